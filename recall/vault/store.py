"""Secrets: sync files → encrypted rows; find / show / command / get; the values, decrypted only for
injection, masking and redaction (its redactor); the only reader of its tables; never returns a value."""
from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field

from .. import db
from ..errors import MissingExtra, RecallError, shell_line
from ..notes import terms
from . import audit, keyfile
from .keyfile import bound, cipher_of
from .redact import VaultValues, closed, public_fields, text_redactor

MAX_COMMAND = 10_000                    # characters of a command a handed-out line carries
# what a shell reads as syntax and shlex.split as a word: such a command runs under `sh -c`
_SHELL_SYNTAX = re.compile(r"[|&;<>()$`\n*?\[]|(^|\s)[~#]|^\s*[A-Za-z_][A-Za-z0-9_]*=")
REDACTED_META = "index_redacted_for"     # the vault's signature once the index holds none of its values
_REDACTORS: dict = {}     # {(DB, vault signature, key mtime): the redactor}: one per process


@dataclass
class SyncReport:
    added: int = 0
    updated: int = 0
    removed: int = 0
    total: int = 0
    warnings: list = field(default_factory=list)
    embedded: int = 0
    unchanged: int = 0            # ids kept as they were
    sealed: int = 0               # values written over in their files as ENC[...]
    removed_ids: list = field(default_factory=list)     # kept for 'secret restore'


def _comparable(meta, tags, env, inject, check, variables, values) -> str:
    import json
    return json.dumps([meta, tags, env, inject, check, variables, values], sort_keys=True)


def _stored(con, key) -> dict:
    """{id: comparable} of the vault as it is, so sync can say what it changed (values stay in memory)."""
    import json
    out = {}
    for r in con.execute("SELECT * FROM secrets"):
        try:
            values = json.loads(keyfile.decrypt(key, *cipher_of(r)))
        except RecallError:         # a row this key cannot open is replaced, and counted as updated
            values = None
        out[r["id"]] = _comparable(json.loads(r["meta"]), json.loads(r["tags"]), r["env"], r["inject"],
                                   r["check_cmd"], json.loads(r["variables"]), values)
    return out


def sync(con, cfg, *, prune: bool = False, notify=None) -> SyncReport:
    """Read every secrets file, then replace the vault rows in one transaction, under the vault lock
    (`notify` hears whom it waits for); a sync that would remove most of the vault, or all of one
    file's secrets, stops unless `prune`."""
    with db.vault_lock(keyfile.lock_path(cfg.home), notify):
        report = _sync(con, cfg, prune, notify)
    return _embedded(con, cfg, report)


def _embedded(con, cfg, report: SyncReport) -> SyncReport:
    """The report, once the metadata texts a sync stored are embedded (outside the vault lock)."""
    if report.total and cfg.embedding.provider != "none":
        try:
            from .meaning import embed_metadata
            report.embedded = embed_metadata(con, cfg)
        except RecallError as exc:     # the vault is synced; only 'find' by meaning waits
            report.warnings.append(f"secret metadata not embedded: {exc}")
    return report


def _sync(con, cfg, prune: bool, notify=None) -> SyncReport:
    """sync's work, the vault lock held: files read, values sealed, rows replaced."""
    import json

    from . import pending, removed
    from .inplace import key_for, open_entries, tidy, write_edits
    from .secretfile import load_secret_files, too_short
    tidy(cfg.home, cfg.secrets)                                 # a killed write's temp files
    read = pending.stamps(cfg.secrets)                          # what the last sync will have seen
    entries, warnings = load_secret_files(cfg.secrets)          # all validation before any write
    if not entries and not holds_values(con):                    # nothing to seal or store: no key needed
        _drop_pending(cfg.home)
        pending.record(con, read)
        return SyncReport(warnings=warnings)
    new = {e.id for e in entries}
    if not prune:
        _refuse_mass_removal(con, new)
    key = key_for(cfg.home, entries, key_probe(con))
    edits = open_entries(entries, key, cfg.home)
    read.update(write_edits(edits))                             # each plain value sealed in its file
    sealed = sum(len(changes) for _, changes in edits.values())
    before, redacted = _stored(con, key), db.get_meta(con, REDACTED_META) == repr(signature(con))
    now = time.time()
    with db.transaction(con):
        gone = [r for r in rows(con) if r["id"] not in new]
        removed.keep(con, gone, now)                             # recoverable for removed.KEEP_DAYS
        con.execute("DELETE FROM secrets")
        con.execute("DELETE FROM secrets_fts")
        for e in entries:
            nonce, blob = keyfile.encrypt(key, e.id, json.dumps(e.values).encode(),
                                          bound(e.inject, e.check, e.variables, e.meta["url"],
                                                e.meta.get("public", []), e.meta.get("proxy")))
            con.execute("INSERT INTO secrets VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                        (e.id, json.dumps(e.meta), json.dumps(e.tags), e.env, e.inject, e.check,
                         json.dumps(e.variables), e.file, e.line, nonce, blob, now))
            con.execute("INSERT INTO secrets_fts(sid, id, service, environment, kind, username, url, tags, "
                        "notes, use) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (e.id, e.id, *(e.meta[k] for k in ("service", "environment", "kind", "username", "url")),
                         " ".join(e.tags), e.meta["notes"], e.meta["use"]))
    changed = [e for e in entries if before.get(e.id) != _comparable(e.meta, e.tags, e.env, e.inject, e.check,
                                                                     e.variables, e.values)]
    _redact_index(con, cfg, changed if redacted else entries, notify)
    warnings = warnings + too_short(changed)
    _drop_pending(cfg.home)
    pending.record(con, read)
    same = len(entries) - len(changed)
    return SyncReport(added=len(new - set(before)), updated=len(new & set(before)) - same,
                      removed=len(set(before) - new), total=len(new), warnings=warnings, unchanged=same,
                      sealed=sealed, removed_ids=[r["id"] for r in gone])


def _redact_index(con, cfg, entries: list, notify=None) -> None:
    """A value pasted into a note leaves the index: chunks rewritten with these entries' values (new or
    changed: the others were redacted by the sync that stored them), then a mark that they were. Under
    the index lock: an index run going on wrote chunks with the vault it read before this sync."""
    from ..notes.index import redact_indexed
    with db.index_lock(cfg.db_path, notify):
        if entries:
            publics = {e.id: public_fields(e.meta) for e in entries}
            redact_indexed(con, text_redactor({e.id: e.values for e in entries}, publics))
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")          # and no old page keeps it in the WAL
        with db.transaction(con):           # a sync stopped before this redacts every value next time
            db.set_meta(con, REDACTED_META, repr(signature(con)))


def _drop_pending(home) -> None:
    """A stopped rotation's vault.key.next, once nothing is sealed under it (sync resealed the files'
    values it opened, and wrote every row under the key)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(keyfile.next_path(keyfile.key_path(home)))


def _refuse_mass_removal(con, new_ids: set) -> None:
    """An emptied or truncated secrets file (an editor crash, a bad merge) must not empty the vault."""
    stored = con.execute("SELECT id, file FROM secrets").fetchall()
    gone = [(sid, file) for sid, file in stored if sid not in new_ids]
    emptied = sorted({file for _, file in gone} - {file for sid, file in stored if sid in new_ids})
    if gone and (2 * len(gone) > len(stored) or emptied):
        what = f"all the secrets of {', '.join(emptied)}" if emptied else "more than half the vault"
        raise RecallError(f"secret sync would remove {len(gone)} of {len(stored)} stored secrets "
                          f"({what}); nothing was changed",
                          "check the secrets files (an empty or cut-short file?), or run "
                          "'recall secret sync --prune' if they are meant to go")


def rotate_key(con, cfg, notify=None) -> int:
    """Re-encrypt every row, and reseal every value in the secrets files, under a new key put in place
    after; under the vault lock: the new key written as .next, files, rows, rename."""
    from . import removed
    from .inplace import open_entries, write_edits
    from .secretfile import load_secret_files
    with db.vault_lock(keyfile.lock_path(cfg.home), notify):
        old_key = keyfile.load_key(cfg.home, create=False, probe=key_probe(con), settle=True)
        path = keyfile.key_path(cfg.home)
        pending = keyfile.next_path(path)
        if pending.exists():        # values in the files may be sealed under it: never written over
            raise RecallError(f"an earlier key rotation stopped before it finished ({pending} is there); "
                              "nothing was changed", "run 'recall secret sync' (it reseals what that key "
                              "sealed and removes it), then rotate again")
        from . import pending as unsynced
        read = unsynced.stamps(cfg.secrets)
        entries, _ = load_secret_files(cfg.secrets)
        new_key = os.urandom(keyfile.KEY_BYTES)
        edits = open_entries(entries, old_key, cfg.home, reseal_with=new_key)   # all opened before a write

        def reencrypt(row) -> tuple:
            sid, nonce, ciphertext, use = cipher_of(row)
            return row["id"], keyfile.encrypt(new_key, sid, keyfile.decrypt(old_key, sid, nonce, ciphertext, use), use)
        # every row too (a state folder whose rows another one sharing the key left behind refuses here)
        stored, kept = [reencrypt(r) for r in rows(con)], [reencrypt(r) for r in removed.rows(con)]
        keyfile.write_key(pending, new_key)
        # the files first: stopped after them, a sync opens them with vault.key.next
        read.update(write_edits(edits))
        with db.transaction(con):
            for sid, cipher in stored:
                con.execute("UPDATE secrets SET nonce=?, ciphertext=? WHERE id=?", (*cipher, sid))
            for sid, cipher in kept:                       # the removed ones stay restorable
                removed.replace_ciphertext(con, sid, *cipher)
        # After COMMIT the DB needs the new key. Stopped before this rename, a reader finds that only
        # vault.key.next opens the rows and uses it; the next writer renames it.
        os.replace(pending, path)
        unsynced.record(con, read)
        return len(stored)


def restore(con, cfg, secret_id: str, notify=None) -> tuple:
    """Write a secret a sync removed back into its file (values sealed), then sync: (file, report);
    under the vault lock."""
    import json

    from . import removed
    from .inplace import append_entry, seal
    from .secretfile import load_secret_files
    with db.vault_lock(keyfile.lock_path(cfg.home), notify):
        row = removed.row_of(con, secret_id)
        entries, _ = load_secret_files(cfg.secrets)
        removed.require_absent(entries, secret_id)
        key = keyfile.load_key(cfg.home, create=False, probe=key_probe(con), settle=True)
        values = json.loads(keyfile.decrypt(key, *cipher_of(row)))
        text = removed.entry_text(row, values, {f: seal(key, row["id"], f, v) for f, v in values.items()})
        target = row["file"] if row["file"] in {str(p) for p in cfg.secrets} else str(cfg.secrets[0])
        append_entry(target, text)
        report = _sync(con, cfg, prune=False, notify=notify)
        with db.transaction(con):
            removed.forget(con, row["id"])
    _embedded(con, cfg, report)
    audit.log(con, "secret.restore", row["id"], argv="", verdict=f"written back into {target}")
    return target, report


def first_fault(con, cfg) -> str | None:
    """The first stored row the key cannot open, as its one-line error (for doctor); None if all open."""
    import sqlite3
    cur = con.cursor()
    cur.row_factory = sqlite3.Row          # doctor's connection reads plain tuples
    stored = cur.execute("SELECT * FROM secrets ORDER BY id").fetchall()
    try:
        key = keyfile.load_key(cfg.home, create=False, probe=cipher_of(stored[0]) if stored else None)
        for row in stored:
            keyfile.decrypt(key, *cipher_of(row))
    except MissingExtra:            # said by the extras check
        return None
    except RecallError as exc:
        return str(exc)
    return None


# -- reading metadata (works without the crypto extra) -------------------------------------------

def holds_values(con) -> bool:
    """Whether the vault holds any secret (so note text must be checked for its values)."""
    return con.execute("SELECT 1 FROM secrets LIMIT 1").fetchone() is not None


def key_probe(con):
    """One stored row, for load_key to tell which key the DB is under."""
    row = con.execute("SELECT * FROM secrets LIMIT 1").fetchone()
    return cipher_of(row) if row else None


def count(con) -> int:
    return con.execute("SELECT count(*) FROM secrets").fetchone()[0]


def signature(con) -> tuple:
    """(count, last sync time): changes whenever the stored values may have."""
    return tuple(con.execute("SELECT count(*), max(synced_at) FROM secrets").fetchone())


def synced(con) -> dict:
    return {r[0]: (r[1], r[2]) for r in con.execute("SELECT id, file, synced_at FROM secrets")}


def kinds(con) -> dict:
    import json
    return {r[0]: json.loads(r[1]).get("kind") or "" for r in con.execute("SELECT id, meta FROM secrets")}


def rows(con) -> list:
    """Every stored row, by id (metadata and ciphertext; values need load_values)."""
    return con.execute("SELECT * FROM secrets ORDER BY id").fetchall()


def stored_row(con, secret_id: str):
    return con.execute("SELECT * FROM secrets WHERE id=?", (secret_id,)).fetchone()


def row_named(con, secret_id: str, cfg=None):
    """The row an id names, in any case; else NotFound with the closest ids (or, given `cfg`, the sync
    to run when the id is written in a secrets file since the last one)."""
    row = stored_row(con, secret_id)
    if row is None:
        from ..errors import NotFound, resolve
        if cfg is not None and secret_id in unsynced(con, cfg):
            raise NotFound(f"secret '{secret_id}' is written in a secrets file but not synced yet",
                           "run 'recall secret sync'")
        ids = {r[0]: r[0] for r in con.execute("SELECT id FROM secrets ORDER BY id")}
        row = stored_row(con, resolve(secret_id, ids, "secret", "see 'recall secret find QUERY'"))
    return row


def unsynced(con, cfg) -> list:
    """The ids written in a secrets file since the last sync and not stored yet, sealed or not (none
    when a changed file cannot be read: sync says why)."""
    from . import pending
    try:
        return sorted(pending.written(con, cfg) - set(synced(con)))
    except RecallError:
        return []


def on_stdin(variables: dict) -> tuple:
    """(the field written to stdin, the variables still set) when a secret goes to stdin: its single
    value, else its 'password' field, whose variable is then never set; the field is None when it has
    neither. The one rule for `secret show` and `secret exec`."""
    fields = set(variables.values())
    field = "" if "" in fields else "password" if "password" in fields else None
    return field, {v: f for v, f in variables.items() if f != field}


def _public(row, status=None) -> dict:
    import json
    meta = json.loads(row["meta"])
    variables = json.loads(row["variables"])
    if row["inject"] == "stdin":
        variables = on_stdin(variables)[1]
    out = {"id": row["id"], **meta, "tags": json.loads(row["tags"]),
           "variables": sorted(variables), "inject": row["inject"],
           "check": row["check_cmd"], "file": f"{row['file']}:{row['line']}"}
    if meta.get("proxy"):               # inject: proxy — where the value may go, said once for cli and MCP
        p = meta["proxy"]
        out["host_bound"] = (f"sent only to https://{p['host']}:{p['port']}"
                             + (f" under {', '.join(p['paths'])}" if p.get("paths") else "")
                             + " by recall's proxy; the command sees a placeholder")
    if status is not None:
        out["last_verified"] = status
    return out


def find(con, query: str, *, limit: int = 10, cfg=None) -> list:
    """Secrets ranked over metadata only: an exact id first, then BM25 over the metadata, fused
    with similarity of the embedded metadata when a provider is configured (cfg given). Each list keeps
    only those near its best match (_most_words, meaning.SIMILAR_WITHIN): a query for one service lists its
    secrets, not every secret a common word ('token') or a weak likeness reaches."""
    query = (query or "").strip()
    if not query:          # everything, bounded: the caller says how many there are in all
        listed = con.execute("SELECT * FROM secrets ORDER BY id LIMIT ?", (limit,)).fetchall()
        audit.log(con, "secret.find", "", argv="", verdict=f"{len(listed)} listed")
        return [_public(r) for r in listed]
    exact = con.execute("SELECT * FROM secrets WHERE id=?", (query,)).fetchall()
    ranked = []
    fq = terms.fts_query(query)
    if fq:
        ranked = con.execute(
            "SELECT s.* FROM secrets_fts f JOIN secrets s ON s.id = f.sid WHERE secrets_fts MATCH ? "
            "ORDER BY bm25(secrets_fts, 0, 10.0, 5.0, 2.0, 3.0, 1.0, 1.0, 3.0, 1.0, 1.0)", (fq,)).fetchall()
        ranked = _most_words(con, query, ranked)[:limit]
    logged = _masked_query(con, cfg, query)
    meaning = []
    if logged is not None and cfg is not None and cfg.embedding.provider != "none":
        from .meaning import by_meaning
        meaning = by_meaning(con, cfg, logged, limit)
    if meaning:
        from ..notes.fusion import rrf
        fused = rrf({"keyword": [r["id"] for r in ranked], "vector": meaning})
        by_id = {r["id"]: r for r in con.execute("SELECT * FROM secrets")}
        ranked = [by_id[i] for i in sorted(fused, key=lambda i: -fused[i][0]) if i in by_id]
    out = [_public(row) for row in {r["id"]: r for r in exact + ranked}.values()]
    audit.log(con, "secret.find", logged if logged is not None else "(query not logged: the vault "
              "cannot be opened here to mask it)", argv="", verdict=f"{len(out)} found")
    return out[:limit]


def _most_words(con, query: str, ranked: list) -> list:
    """Of the rows the query's words match, those holding as many of its words as the best one: "jira
    token" lists the jira token, not every token; "prod" every prod secret."""
    holders = [{r[0] for r in con.execute("SELECT sid FROM secrets_fts WHERE secrets_fts MATCH ?", (p,))}
               for p in terms.fts_phrases(query)]
    held = {r["id"]: sum(r["id"] in h for h in holders) for r in ranked}
    most = max(held.values(), default=0)
    return [r for r in ranked if held[r["id"]] == most]


def _masked_query(con, cfg, query: str):
    """The query with every vault value masked, as it may be logged or embedded; None when the
    vault holds values that cannot be opened here (a pasted token is never logged as written)."""
    if cfg is None:
        return None if holds_values(con) else query
    try:
        return redactor(con, cfg)(query)
    except RecallError:
        return None


def show(con, secret_id: str, last_verified=None, cfg=None) -> dict:
    """One secret's metadata; `last_verified(con, target)` says when its check last ran (the inventory's)."""
    row = row_named(con, secret_id, cfg)
    out = _public(row, last_verified(con, f"secret:{row['id']}") if last_verified else None)
    audit.log(con, "secret.show", row["id"], argv="", verdict="shown")
    return out


# -- the values, decrypted: for injection, masking and redaction only, never for output -------------

def load_values(con, cfg, ids=None, *, need=()) -> VaultValues:
    """{secret id: {field: value}} decrypted, and `.public`: the fields of each that are not secret. A row
    that does not open (changed, corrupt) is left out unless it is in `need` (NotFound when one is gone);
    when none opens, the key is wrong."""
    import json
    key = keyfile.load_key(cfg.home, create=False, probe=key_probe(con))
    wanted = None if ids is None else set(ids)
    stored = [r for r in con.execute("SELECT * FROM secrets") if wanted is None or r["id"] in wanted]
    values, first_error = VaultValues(), None
    values.public = {r["id"]: public_fields(json.loads(r["meta"])) for r in stored}
    values.urls = {r["id"]: json.loads(r["meta"]).get("url", "") for r in stored}   # where each may be sent
    for row in stored:
        try:
            values[row["id"]] = json.loads(keyfile.decrypt(key, *cipher_of(row)))
        except RecallError as exc:
            if row["id"] in need:
                raise
            first_error = first_error or exc
    if first_error is not None and not values:
        raise first_error
    for sid in need:                     # asked for by id, and removed by a sync since it was looked up
        if sid not in values:
            from ..errors import NotFound
            raise NotFound(f"secret '{sid}' was removed from the vault meanwhile (by a sync); nothing was run with it",
                           "see 'recall secret find QUERY'")
    return values


def redactor(con, cfg):
    """text -> text with every (non-public) vault value and its encoded forms as [recall:ID] (whole tokens);
    the identity when the vault is empty; VaultClosed when it holds values it cannot open here. One per
    process until the vault or its key changes (an index run, each watch pass, the MCP server)."""
    from . import pending
    from .redact import identity
    unsynced, plain = pending.values(con, cfg)       # written into a secrets file since the last sync
    if not holds_values(con):
        return text_redactor(plain, plain.public) if plain else identity
    try:
        sig = (str(cfg.db_path), signature(con), keyfile.key_path(cfg.home).stat().st_mtime_ns, unsynced)
    except OSError:
        sig = None                       # load_values says what is wrong with the key
    if sig is None or sig not in _REDACTORS:
        try:
            values = pending.with_unsynced(load_values(con, cfg), plain)
        except RecallError as exc:
            raise closed(exc) from None
        _REDACTORS.clear()
        _REDACTORS[sig] = text_redactor(values, values.public)
    return _REDACTORS[sig]


def require_open(con, cfg) -> None:
    """Cheap check for the search path: refuse when the vault holds values and plainly cannot be opened
    here (no crypto package, key missing or unreadable)."""
    if not holds_values(con):
        return
    from ..extras import installed
    if not installed("cryptography"):
        raise closed(MissingExtra("crypto", "the vault"))
    path = keyfile.key_path(cfg.home)
    if not path.exists():
        raise closed(RecallError(f"no vault key at {path}", "restore the key, or run 'recall secret sync'"))
    if not os.access(path, os.R_OK):
        raise closed(RecallError(f"the key file {path} is not readable", f"check the owner of {path}"))


# -- using a value ---------------------------------------------------------------------------------

def command_line(con, secret_id: str, command, cfg=None) -> str:
    """A shell-quoted `recall secret exec ID -- …` line for `command` (argv, or a string split like a shell,
    under `sh -c` when it names the secret's variables; empty: its `use` line), naming cfg's config."""
    import json
    import shlex
    row = row_named(con, secret_id, cfg)
    secret_id = row["id"]
    variables = json.loads(row["variables"])
    if not command:
        command = json.loads(row["meta"]).get("use") or ""
        if not command:
            raise RecallError(f"secret '{secret_id}' has no 'use' line", "give the command after --")
    if isinstance(command, str):
        if len(command) > MAX_COMMAND:          # no shell would take it as one argument, no agent read it back
            raise RecallError(f"the command is {len(command):,} characters; a handed-out line holds at most "
                              f"{MAX_COMMAND:,}", "write it to a script file and pass 'sh SCRIPT'")
        shell_line(command)
        if _SHELL_SYNTAX.search(command) or any(f"${v}" in command or f"${{{v}}}" in command for v in variables):
            argv = ["sh", "-c", command]        # a pipe, a redirect, $X …: what a shell makes of it
        else:
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                raise RecallError(f"cannot split the command: {exc}") from None
    else:
        argv = list(command)
    if not argv:
        raise RecallError("no command given")
    from ..config import invocation
    line = invocation(cfg) + " " + shlex.join(["secret", "exec", secret_id, "--"] + argv)
    audit.log(con, "secret.command", secret_id, argv=line, verdict="given")
    return line
