"""Redaction: every vault value in note text that is shown, indexed or embedded becomes [recall:ID]
(the stored values decrypted here, for redaction and masking only); fail closed."""
from __future__ import annotations

import json
import os

from .errors import RecallError

PUBLIC_FIELDS = ("username", "user", "login", "email")   # injected, never masked or redacted
_SHORT_MIN = 4             # values of 4-5 characters are redacted as written (whole tokens only)


class VaultClosed(RecallError):
    """The vault holds values but cannot be opened here, so note text cannot be checked for them."""


def public_fields(meta: dict) -> set:
    """Fields of a secret that are not secret: usernames, logins, emails, and any marked public."""
    return set(PUBLIC_FIELDS) | set(meta.get("public") or ())


def secret_parts(values: dict, publics: dict) -> dict:
    """{secret id: [values to mask]}: every field but the public ones."""
    return {sid: [v for f, v in vals.items() if f not in publics.get(sid, PUBLIC_FIELDS)]
            for sid, vals in values.items()}


def publics_of(con) -> dict:
    return {r[0]: public_fields(json.loads(r[1])) for r in con.execute("SELECT id, meta FROM secrets")}


def holds_values(con) -> bool:
    return con.execute("SELECT 1 FROM secrets LIMIT 1").fetchone() is not None


def _closed(exc: RecallError) -> VaultClosed:
    return VaultClosed(f"the vault holds values but cannot be opened here ({exc.message}), so note "
                       "text cannot be checked for them and is not shown",
                       exc.hint or "run 'recall secret sync'")


def require_open(con, cfg) -> None:
    """Cheap check for the search path: refuse when the vault holds values and plainly cannot be
    opened here (no crypto package, key missing or unreadable); the full check is in `redactor`."""
    if not holds_values(con):
        return
    from importlib.util import find_spec

    from .errors import MissingExtra
    from .keyfile import key_path
    if find_spec("cryptography") is None:
        raise _closed(MissingExtra("crypto", "the vault"))
    path = key_path(cfg.home)
    if not path.exists():
        raise _closed(RecallError(f"no vault key at {path}", "restore the key, or run 'recall secret sync'"))
    if not os.access(path, os.R_OK):
        raise _closed(RecallError(f"the key file {path} is not readable", f"check the owner of {path}"))


# -- the stored values, decrypted (vault.load_values is this one) -----------------------------------

class VaultValues(dict):
    """{secret id: {field: value}}, and `public`: {secret id: fields that are not secret}."""
    public: dict = {}


def probe_row(con):
    """One stored row, for load_key to tell which key the DB is under."""
    from . import keyfile
    row = con.execute("SELECT * FROM secrets LIMIT 1").fetchone()
    return (row["id"], row["nonce"], row["ciphertext"], keyfile.row_bound(row)) if row else None


def load_values(con, cfg, ids=None, *, need=()) -> dict:
    """{secret id: {field: value}} decrypted — for injection and masking only, never for output.
    A row that does not open (changed in the DB, corrupt) fails only itself: it is left out,
    unless it is in `need`; when no row opens at all, the key is wrong and that is the error."""
    from . import keyfile
    key = keyfile.load_key(cfg.home, create=False, probe=probe_row(con))
    rows = con.execute("SELECT * FROM secrets").fetchall()
    if ids is not None:
        rows = [r for r in rows if r["id"] in set(ids)]
    values, first_error = VaultValues(), None
    values.public = {r["id"]: public_fields(json.loads(r["meta"])) for r in rows}
    for row in rows:
        try:
            plain = keyfile.decrypt(key, row["id"], row["nonce"], row["ciphertext"], keyfile.row_bound(row))
        except RecallError as exc:
            if row["id"] in need:
                raise
            first_error = first_error or exc
            continue
        values[row["id"]] = json.loads(plain)
    if rows and not values and first_error is not None:
        raise first_error
    return values


def redactor(con, cfg):
    """text -> text with every (non-public) vault value and its encoded forms replaced by
    [recall:ID], as whole tokens; the identity when the vault is empty. Raises VaultClosed when
    the vault holds values but cannot be opened here: no text is ever shown unchecked."""
    if not holds_values(con):
        return _identity
    try:
        values = load_values(con, cfg)
    except RecallError as exc:
        raise _closed(exc) from None
    return text_redactor(values, publics_of(con))


_INLINE = None


def scrub_inline(text: str) -> str:
    """A command line as it may be stored (access log, verify results): a literal token written
    inline — `X_TOKEN=abc`, `https://u:pw@host`, `Authorization: Bearer abc`, `--password abc` —
    becomes [hidden]; `$VAR` references stay. Vault values are masked by the caller."""
    global _INLINE
    if not text:
        return text
    if _INLINE is None:
        import re
        name = (r"[A-Za-z_][A-Za-z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|PASS|API_?KEY|ACCESS_KEY"
                r"|PRIVATE_KEY|CREDENTIALS?|AUTH)[A-Za-z0-9_]*")
        value = r"""(?!['"]?\$)(?:'[^']*'|"[^"]*"|[^\s;&|'"]+)"""
        _INLINE = [
            (re.compile(r"(://[^/\s:@]+:)[^/\s@]+@"), r"\1[hidden]@"),
            (re.compile(r"(?i)((?:authorization|proxy-authorization):\s*(?:bearer|basic|token)\s+)(?!\$)[^\s'\"]+"),
             r"\1[hidden]"),
            (re.compile(r"(?i)((?:x-api-key|private-token|x-auth-token):\s*)(?!\$)[^\s'\"]+"), r"\1[hidden]"),
            (re.compile(rf"(?i)\b({name})={value}"), r"\1=[hidden]"),
            (re.compile(rf"(?i)(--(?:password|passwd|token|api-key|secret)[= ]){value}"), r"\1[hidden]"),
        ]
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return text


def _identity(text: str) -> str:
    return text


def text_redactor(values: dict, publics: dict):
    """The redactor for decrypted `values` ({id: {field: value}})."""
    import re

    from .mask import MIN_SECRET_LEN, Masker
    parts = secret_parts(values, publics)
    masker = Masker(parts, whole_tokens=True, lazy=False)     # used on every chunk: build it now
    short = sorted(((str(v), sid) for sid, vals in parts.items() for v in vals
                    if _SHORT_MIN <= len(str(v)) < MIN_SECRET_LEN), key=lambda p: -len(p[0]))
    short_res = [(re.compile(r"(?<![\w-])" + re.escape(v) + r"(?![\w-])"), f"[recall:{sid}]")
                 for v, sid in short]

    def redact(text: str) -> str:
        for pattern, label in short_res:
            text = pattern.sub(label, text)
        data = text.encode("utf-8", "surrogatepass")
        masked = masker.mask(data)
        return text if masked == data else masked.decode("utf-8", "replace")
    return redact


def redact_hits(hits: list, redact) -> list:
    """Remote search hits (dicts) with every text field redacted on the local side too."""
    out = []
    for hit in hits:
        out.append({k: redact(v) if isinstance(v, str) else v for k, v in hit.items()})
    return out
