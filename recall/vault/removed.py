"""Secrets a sync removed, kept (encrypted, as their rows were) for KEEP_DAYS so `secret restore`
can write them back into their file; a cut-short secrets file never loses a secret for good."""
from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass

from .. import db
from ..errors import NotFound, RecallError
from . import audit

KEEP_DAYS = 30
_PREFIX = "secret_removed:"     # meta rows, one per removed secret: its row's columns as JSON
_COLUMNS = ("id", "meta", "tags", "env", "inject", "check_cmd", "variables", "file", "line")


@dataclass
class Removed:
    id: str
    file: str
    line: int
    removed_at: float
    until: str                   # the day it is dropped for good


def keep(con, rows: list, now: float) -> None:
    """Inside sync's transaction: keep each removed row, log it, and drop what is past KEEP_DAYS."""
    for row in rows:
        record = {c: row[c] for c in _COLUMNS} | _encoded(row["nonce"], row["ciphertext"]) | {"removed_at": now}
        db.set_meta(con, _PREFIX + row["id"], json.dumps(record))
        audit.log(con, "secret.removed", row["id"], argv="", verdict=f"removed by sync from {row['file']}; "
                  f"'recall secret restore {row['id']}' until {_until(now)}")
    con.execute("DELETE FROM meta WHERE key LIKE ? AND json_extract(value, '$.removed_at') < ?",
                (_PREFIX + "%", now - KEEP_DAYS * 86400))


def _encoded(nonce: bytes, ciphertext: bytes) -> dict:
    return {"nonce": base64.b64encode(nonce).decode(), "ciphertext": base64.b64encode(ciphertext).decode()}


def _until(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(at + KEEP_DAYS * 86400))


def _records(con) -> dict:
    out = {}
    for key, value in con.execute("SELECT key, value FROM meta WHERE key LIKE ?", (_PREFIX + "%",)):
        record = json.loads(value)
        if record["removed_at"] >= time.time() - KEEP_DAYS * 86400:
            out[key[len(_PREFIX):]] = record
    return out


def listed(con) -> list:
    """Every secret removed in the last KEEP_DAYS, newest first."""
    got = [Removed(r["id"], r["file"], r["line"], r["removed_at"], _until(r["removed_at"]))
           for r in _records(con).values()]
    return sorted(got, key=lambda r: -r.removed_at)


def rows(con) -> list:
    """The kept rows as dicts shaped like `secrets` rows (bytes nonce and ciphertext), for rotate-key."""
    return [{**r, "nonce": base64.b64decode(r["nonce"]), "ciphertext": base64.b64decode(r["ciphertext"])}
            for r in _records(con).values()]


def replace_ciphertext(con, secret_id: str, nonce: bytes, ciphertext: bytes) -> None:
    record = json.loads(db.get_meta(con, _PREFIX + secret_id)) | _encoded(nonce, ciphertext)
    db.set_meta(con, _PREFIX + secret_id, json.dumps(record))


def row_of(con, secret_id: str) -> dict:
    """The kept row of a removed secret; NotFound naming the ones there are."""
    found = {r["id"]: r for r in rows(con)}
    if secret_id not in found:
        have = ", ".join(sorted(found)[:10]) or "none"
        raise NotFound(f"no removed secret '{secret_id}' kept (removed in the last {KEEP_DAYS} days: {have})",
                       "see 'recall secret log'")
    return found[secret_id]


def forget(con, secret_id: str) -> None:
    con.execute("DELETE FROM meta WHERE key=?", (_PREFIX + secret_id,))


def entry_text(row: dict, values: dict, sealed: dict) -> str:
    """The YAML entry of a kept row, every value as its ENC[...] text (`sealed`: {field: text})."""
    q = lambda s: json.dumps(s, ensure_ascii=False)          # a JSON string is a YAML double-quoted one
    meta = json.loads(row["meta"])
    lines = [f"- id: {q(row['id'])}"]
    for key in ("service", "environment", "kind", "username", "url", "notes", "use"):
        if meta.get(key):
            lines.append(f"  {key}: {q(meta[key])}")
    tags = json.loads(row["tags"])
    if tags:
        lines.append(f"  tags: [{', '.join(q(t) for t in tags)}]")
    lines.append(f"  env: {q(row['env'])}")
    if row["inject"] != "env":
        lines.append(f"  inject: {row['inject']}")
    if row["check_cmd"]:
        lines.append(f"  check: {q(row['check_cmd'])}")
    proxy = meta.get("proxy") or {}
    if proxy.get("paths"):
        lines.append(f"  paths: [{', '.join(q(p) for p in proxy['paths'])}]")
    if proxy.get("ca"):
        lines.append(f"  ca: {q(proxy['ca'])}")
    if proxy.get("query"):
        lines.append("  in_query: true")
    if "" in values:
        lines.append(f"  value: {sealed['']}")
    else:
        public = set(meta.get("public") or ())
        lines.append("  fields:")
        for name in values:
            if name in public:
                lines.append(f"    {q(name)}: {{value: {q(values[name])}, public: true}}")
            else:
                lines.append(f"    {q(name)}: {sealed[name]}")
    return "\n".join(lines) + "\n"


def require_absent(entries: list, secret_id: str) -> None:
    for e in entries:
        if e.id == secret_id:
            raise RecallError(f"secret '{secret_id}' is in {e.file}:{e.line} already; nothing was restored",
                              "remove or rename that entry first")
