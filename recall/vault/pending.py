"""Values written into a secrets file since the last sync: masked and redacted wherever recall shows,
indexes or logs text (a value pasted into the file and into a note before `recall secret sync`), never
injected (a child gets only what sync stored). A file is read only when it is not as sync left it."""
from __future__ import annotations

import os
import re

from .. import db
from ..errors import InputError, RecallError
from .redact import PUBLIC_FIELDS, VaultClosed, VaultValues

SYNCED_META = "secrets_files_synced"     # "path\tstamp" a line, as the last sync (or rotation) left them
REDACTED_META = "index_redacted_unsynced"  # the changed files' stamps once the index holds none of their values
_LABEL = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_LAST: list = []                         # [files and their stamps, what they held]: this process's last read


def file_stamp(path) -> tuple:
    """(inode, size, mtime_ns, ctime_ns, links) of a file: a writer compares it to tell the file
    changed meanwhile (a link made to it too)."""
    try:
        return stamp_of(os.stat(path))
    except FileNotFoundError:
        return ()


def stamp_of(st) -> tuple:
    """file_stamp of an os.stat / os.fstat result."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_nlink)


def stamps(paths) -> dict:
    """{path: stamp} of the secrets files, taken before a writer reads them: a save made after this
    differs from what `record` keeps, so it is a change since the last sync however late it lands."""
    return {str(p): file_stamp(p) for p in paths}


def _line(path, stamp) -> str:
    return f"{path}\t{stamp}"


def record(con, read: dict) -> None:
    """Each secrets file's stamp as a writer of the vault read it (`stamps`), or as its own rewrite left
    it — never the file as it is now: a value saved while sync ran was not stored, so stays masked."""
    with db.transaction(con):
        db.set_meta(con, SYNCED_META, "\n".join(_line(p, s) for p, s in read.items()))


def changed(con, cfg) -> list:
    """(path, stamp) of the secrets files that are there and not as the last sync left them."""
    if not cfg.secrets:
        return []
    synced = set((db.get_meta(con, SYNCED_META) or "").split("\n"))
    stamps = [(str(p), file_stamp(p)) for p in cfg.secrets if os.path.isfile(p)]   # a folder holds no value
    return [(p, s) for p, s in stamps if s and _line(p, s) not in synced]


def values(con, cfg) -> tuple:
    """(signature, {label: {field: value}}) of the plain values in the changed files: every value or
    field but the public ones and placeholders, whether or not its entry would sync. A file that
    cannot be read or parsed fails closed: its values cannot be told from the rest of the text."""
    files = tuple(changed(con, cfg))
    if _LAST and _LAST[0] == files:       # a watcher's next pass, the door after the redactor: read once
        return files, _LAST[1]
    found = VaultValues()
    found.public = {}
    opener = _Opener(cfg.home)
    for path, _ in files:
        for label, field, value in _plain(path, opener):
            found.setdefault(label, {})[f"unsynced {field}"] = value
            found.public.setdefault(label, set())
    _LAST[:] = [files, found]
    return files, found


def with_unsynced(values: VaultValues, plain: VaultValues) -> VaultValues:
    """The vault's values, and those written into its files since (to mask, never to inject)."""
    for label, fields in plain.items():
        values.setdefault(label, {}).update(fields)
        values.public.setdefault(label, set())
    return values


class _Opener:
    """Sealed values of a changed file opened with the vault key, read only: a DB rebuilt from nothing
    (or a file sealed by another config) holds none of them until a sync, yet they are its values. One
    that cannot be opened fails closed, as a file that does not parse."""

    def __init__(self, home):
        self.home, self.keys = home, None

    def __call__(self, path: str, label: str, field: str, line: int, text: str) -> str:
        from types import SimpleNamespace

        from . import keyfile
        from .inplace import opening_keys, unseal
        try:
            if self.keys is None:
                key = keyfile.load_key(self.home, create=False)
                self.keys = opening_keys(self.home, key)
            entry = SimpleNamespace(id=label, file=path, line=line, spans={})
            return unseal(self.keys, entry, field, text, keyfile.key_path(self.home))[0]
        except RecallError as exc:
            raise VaultClosed(f"{path}:{line}: a sealed value cannot be opened here ({exc.message}), so note "
                              "text cannot be checked for it and is not shown", exc.hint) from None


def redact_index(con, cfg) -> None:
    """Values written into a secrets file since the last sync leave the text indexed before they were
    (a token pasted into a note, then into the file): once per state of the changed files, by an index
    run (the index lock held) or a watch pass. Sync does the same for the values it stores."""
    unsynced, plain = values(con, cfg)
    mark = repr(unsynced)
    if not plain or db.get_meta(con, REDACTED_META) == mark:
        return
    from ..notes.index import redact_indexed
    from .redact import text_redactor
    if redact_indexed(con, text_redactor(plain, plain.public)):
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()     # and no old page keeps them in the WAL
    with db.transaction(con):
        db.set_meta(con, REDACTED_META, mark)


def _plain(path: str, opener) -> list:
    """(label, field, value) of each value in one secrets file, a sealed one opened by `opener`."""
    from .. import yaml
    out, rows = [], []
    for label, item in _entries(path):
        fields = item.get("fields") if isinstance(item.get("fields"), dict) else {}
        for name, value, holder, key in [("", item.get("value"), item, "value"),
                                         *((n, v, fields, n) for n, v in fields.items())]:
            if isinstance(value, dict) and not value.get("public"):
                value, holder, key = value.get("value"), value, "value"
            if isinstance(value, (int, float)) and not isinstance(value, bool):   # a PIN YAML reads as a number
                value = _as_written(path, holder, key, rows) or str(value)        # (sync asks to quote it)
            if not isinstance(value, str) or str(name) in PUBLIC_FIELDS:
                continue
            if value.strip().startswith("ENC[") and not label.startswith("unsynced line "):
                line = yaml.line_of(fields, name) if name else yaml.line_of(item, "value")
                out.append((label, str(name), opener(path, label, str(name), line or item.line, value.strip())))
            elif _secret_like(value):
                out.append((label, str(name), value))
    return out


def _as_written(path: str, holder, key, rows: list) -> str | None:
    """A scalar's text as the file writes it (0x1F2E, 0012345678: not as YAML reads it); `rows`: the
    file's lines, read on first use."""
    span = getattr(holder, "spans", {}).get(key)
    if span is None or span.row != span.end_row:
        return None
    if not rows:
        with open(path, encoding="utf-8-sig", errors="replace") as fh:
            rows.extend(re.split(r"\r\n|\r|\n", fh.read()))
    return rows[span.row][span.col:span.end_col] if span.row < len(rows) else None


def written(con, cfg) -> set:
    """The ids of the entries in the secrets files changed since the last sync, sealed or not (a DB
    rebuilt beside a sealed file holds none of them). A file that does not parse fails closed."""
    return {label for path, _ in changed(con, cfg) for label, _ in _entries(path)
            if not label.startswith("unsynced line ")}


def _entries(path: str) -> list:
    """(label, mapping) of each entry in one secrets file: its entries, or the one mapping a file holds
    when its `- ` was forgotten (a file of another shape holds no value: sync says what is wrong with it).
    The label is the entry's id, or `unsynced line N` without a usable one. A file that does not parse
    fails closed."""
    from .. import yaml
    try:
        doc = yaml.load(path)
    except (RecallError, OSError) as exc:     # said without any text of the file: it may hold a value
        from .secretfile import without_text
        said = without_text(exc).message if isinstance(exc, InputError) else \
            exc.message if isinstance(exc, RecallError) else f"{path}: {exc.strerror}"
        raise VaultClosed(f"{said}; that secrets file changed since the last sync and its values cannot be "
                          "read, so note text cannot be checked for them and is not shown",
                          "fix it, then run 'recall secret sync'") from None
    entries = [(item, yaml.line_of(doc, i)) for i, item in enumerate(doc)] if isinstance(doc, list) else \
        [(doc, getattr(doc, "line", 1))] if isinstance(doc, dict) else []
    out = []
    for item, line in entries:
        if isinstance(item, dict):
            sid = item.get("id")
            out.append((sid if isinstance(sid, str) and _LABEL.fullmatch(sid) else f"unsynced line {line}", item))
    return out


def placeholder(value: str) -> bool:
    """`<paste the token>` or `…` copied from an example: not a credential (sync refuses it)."""
    text = value.strip()
    return (text.startswith("<") and text.endswith(">") and "<" not in text[1:-1]) or text in ("…", "...")


def _secret_like(value: str) -> bool:
    """Not sealed, and not a placeholder."""
    return bool(value.strip()) and not value.strip().startswith("ENC[") and not placeholder(value)
