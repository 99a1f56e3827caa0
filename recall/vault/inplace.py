"""Values sealed in place in the secrets files (sops-style `ENC[...]`: AES-256-GCM under the vault
key, bound to the secret's id and field), the atomic rewrite that keeps every other byte, and the
key's backup."""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from .. import db
from ..errors import InputError, MissingExtra, RecallError, resolve
from . import keyfile
from .pending import file_stamp, stamp_of
from .secretfile import check_value, load_secret_files, on_stdin, text_as_read

_ENC = re.compile(r"ENC\[AES256_GCM,data:([A-Za-z0-9+/]*=*),iv:([A-Za-z0-9+/]+=*),"
                  r"tag:([A-Za-z0-9+/]+=*),type:str\]\Z")
_TAG = 16
BACKUP_META = "vault_key_backup"      # where an older recall kept the record below, in each config's DB


def is_sealed(text: str) -> bool:
    return text.startswith("ENC[")


def _bound(field: str) -> bytes:
    return b"file\0" + field.encode()        # not JSON: never equal to a DB row's binding


def seal(key: bytes, secret_id: str, field: str, value: str) -> str:
    """The `ENC[...]` text of one value (a fresh nonce each time)."""
    nonce, blob = keyfile.encrypt(key, secret_id, value.encode("utf-8"), _bound(field))
    b64 = base64.b64encode
    return (f"ENC[AES256_GCM,data:{b64(blob[:-_TAG]).decode()},iv:{b64(nonce).decode()},"
            f"tag:{b64(blob[-_TAG:]).decode()},type:str]")


def _what(entry, field: str) -> str:
    return f"{entry.id}.{field}" if field else entry.id


def unseal(keys: list, entry, field: str, text: str, key_file) -> tuple:
    """(plain value, the key that opened it) of a sealed text; a text that is not ours, or that no key
    opens, is one line."""
    line = entry.spans[field].row + 1 if entry.spans.get(field) else entry.line
    m = _ENC.match(text)
    try:                                 # a character added or lost by hand: not whole base64
        data, iv, tag = (base64.b64decode(g) for g in m.groups()) if m else (None, None, None)
    except ValueError:
        m = None
    if not m:
        raise InputError(entry.file, line, f"the value of '{_what(entry, field)}' starts with ENC[ but is "
                         "not a value recall sealed", hint="write the plain value over it and run "
                         "'recall secret sync'")
    for key in keys:
        try:
            return keyfile.decrypt(key, entry.id, iv, data + tag, _bound(field)).decode("utf-8"), key
        except MissingExtra:
            raise
        except RecallError:
            continue
    raise InputError(entry.file, line, f"the value of '{_what(entry, field)}' does not open with the vault "
                     f"key {key_file} (sealed under another key, or for another secret or field: an ENC[...] "
                     "copied from another line)", hint=f"put back the key it was sealed under (your 'recall "
                     f"secret key backup' copy) as {key_file}, or write the plain value over ENC[...] and sync again")


def key_for(home, entries: list, probe=None) -> bytes:
    """The vault key for these entries; a new one is made only while no value is sealed yet."""
    path = keyfile.key_path(home)
    sealed = next((e for e in entries if any(is_sealed(v) for v in e.values.values())), None)
    if sealed is not None and not os.path.lexists(path):
        import shlex
        raise RecallError(f"{sealed.file}:{sealed.line}: values are sealed (ENC[...]) and there is no "
                          f"vault key at {path}", f"put your key backup back: cp BACKUP {shlex.quote(str(path))} && chmod 600 {shlex.quote(str(path))}")
    return keyfile.load_key(home, create=True, probe=probe, settle=True)


def opening_keys(home, key: bytes) -> list:
    """The key, and a rotation's new key when one is pending (files are resealed before it lands)."""
    with contextlib.suppress(OSError):
        return [key, keyfile.next_path(keyfile.key_path(home)).read_bytes()]
    return [key]


def open_entries(entries: list, key: bytes, home, *, reseal_with: bytes | None = None) -> dict:
    """Each sealed value opened in place (in entry.values), and the edits that seal every plain one, and
    any a stopped rotation sealed under vault.key.next: {file: (stamp, [(span, new text)])}.
    `reseal_with`: every value sealed under that key (rotate-key)."""
    keys, key_file = opening_keys(home, key), keyfile.key_path(home)
    edits: dict = {}
    for e in entries:
        for field, text in e.values.items():
            was_sealed, opened_with = is_sealed(text), key
            if was_sealed:
                e.values[field], opened_with = unseal(keys, e, field, text, key_file)
            span = e.spans.get(field)
            check_value(e.values[field], _what(e, field), e.file, span.row + 1 if span else e.line,
                        on_stdin(e.inject, field))
            if span is None or (was_sealed and reseal_with is None and opened_with is key) or (
                    not was_sealed and field in e.meta.get("public", ())):   # a username stays readable
                continue                  # a sealed value keeps its ciphertext: no diff under git
            sealed = seal(reseal_with or key, e.id, field, e.values[field])
            edits.setdefault(e.file, (e.stamp, []))[1].append((span, f'"{sealed}"' if span.flow else sealed))
    _refuse_values_in_comments(entries)
    return edits


def _refuse_values_in_comments(entries: list) -> None:
    """A value also written in a comment stays there as plain text after sealing: refused at the
    comment's line, never quoted (nothing is written)."""
    from .mask import MIN_SECRET_LEN
    from .redact import public_fields
    values = [(e, f, piece) for e in entries for f, v in e.values.items() if f not in public_fields(e.meta)
              for piece in _pieces(v, MIN_SECRET_LEN)]
    for path in dict.fromkeys(e.file for e in entries) if values else ():
        mine = [e for e in entries if e.file == path]
        for line, comment in _comments(path, mine[0].stamp, [s for e in mine for s in e.spans.values() if s]):
            hit = next((_what(e, f) for e, f, v in values if v in comment), None)
            if hit:
                raise InputError(path, line, f"the value of '{hit}' is written in this comment too, where "
                                 "sealing would leave it as plain text; nothing was written",
                                 hint="remove it from the comment, then run the command again")


def _pieces(value: str, shortest: int) -> set:
    """What of a value no comment may hold: all of it and, of a multi-line one, each long line (a
    key's body, a token on a line of its own; PEM armor is public)."""
    lines = [line.strip() for line in value.splitlines()]
    long = [line for line in lines if len(line) >= 16 and not line.startswith("-----")] if len(lines) > 1 else []
    return {piece for piece in (value.strip(), *long) if len(piece) >= shortest}


def _comments(path, stamp: tuple, spans: list) -> list:
    """(line, text) of each comment in a secrets file, the values' own text left out; refused when
    the file is no longer as it was read (the spans point into that text)."""
    from ..yaml import replace_spans
    text = text_as_read(path, stamp)
    if text is None:
        raise _changed(path)
    text = replace_spans(text, [(s, "\n" * (s.end_row - s.row)) for s in spans])   # the same line numbers
    found = ((n, re.search(r"(?:^|[ \t])#.*", line)) for n, line in enumerate(re.split(r"\r\n|\r|\n", text), 1))
    return [(n, m.group()) for n, m in found if m]


def write_edits(edits: dict) -> dict:
    """Apply open_entries' edits, file by file, atomically: {file: its stamp as the write left it}."""
    return {path: rewrite(path, stamp, changes) for path, (stamp, changes) in edits.items()}


def rewrite(path, stamp: tuple, changes: list) -> tuple:
    """Replace spans of a file atomically: its stamp as written; refused, nothing written, when it is no
    longer as read (`stamp`)."""
    from ..yaml import replace_spans
    real = os.path.realpath(path)
    changed = _changed(path)
    data = _bytes_of(real)
    if file_stamp(real) != stamp:
        raise changed
    return _write_atomic(real, stamp, data, replace_spans(data.decode("utf-8"), changes), changed)


def _changed(path) -> RecallError:
    return RecallError(f"{path} changed while recall was reading it; nothing was written to it", "run the command again")


def append_entry(path, text: str) -> None:
    """Add an entry at the end of a secrets file (the same atomic write, the file's own line breaks);
    the file may be absent. Refused, nothing written, when the entry would not read as its last one."""
    from .. import yaml
    real = os.path.realpath(path)
    stamp = file_stamp(real)
    data = _bytes_of(real)
    old = data.decode("utf-8")
    brk = re.search(r"\r\n|\r|\n", old)
    brk = brk.group() if brk else "\n"
    joined = old + (brk if old and not old.endswith(("\n", "\r")) else "") + text.replace("\n", brk)
    try:
        before, after = yaml.parse(old, path), yaml.parse(joined, path)
    except InputError:
        before = after = None
    if not isinstance(after, list) or len(after) != len(before or []) + 1:
        raise RecallError(f"{path} does not end where a '- id:' entry can be added (it ends with a '...' "
                          "line, or is a [...] list); nothing was written", "write its entries as '- id: …' "
                          "with nothing after the last, then run the command again")
    _write_atomic(real, stamp, data, joined, RecallError(f"{path} changed while recall was writing to it; "
                                                         "nothing was written", "run the command again"))


def _bytes_of(real: str) -> bytes:
    """The file's bytes; b"" when there is none."""
    with contextlib.suppress(FileNotFoundError):
        return Path(real).read_bytes()
    return b""


def _write_atomic(real: str, stamp: tuple, based_on: bytes, text: str, changed: RecallError) -> tuple:
    """A temp file in the same folder (the file's mode, flocked while it is written), fsync, rename;
    `changed` when the file is no longer `based_on` (its stamp and its bytes, compared just before).
    The stamp of what it wrote: a write into it after the rename leaves that stamp behind."""
    import fcntl
    mode = stat.S_IMODE(os.stat(real).st_mode) if stamp else 0o600
    tmp = f"{real}.recall-{os.getpid()}.tmp"
    _remove_stale_temps(real)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | db.NOFOLLOW, 0o600)
    except OSError as exc:
        raise RecallError(f"cannot write beside {real}: {exc.strerror}; nothing was written",
                          "recall seals values in place through a temp file in the same folder: "
                          "make the folder writable") from None
    try:
        with contextlib.suppress(OSError):      # a live write, never taken for a stale temp (no flock on
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)    # some NFS: the vault lock still holds)
        with open(fd, "wb", closefd=False) as f:    # a short write is retried, or raises
            f.write(text.encode("utf-8"))
            f.flush()
            os.fchmod(fd, mode)
            os.fsync(fd)
        if file_stamp(real) != stamp or _bytes_of(real) != based_on:   # a save meanwhile is kept
            raise changed
        mine = os.fstat(fd)
        os.replace(tmp, real)
        now = os.fstat(fd)                   # the rename changes its ctime only
        written = stamp_of(now if (now.st_size, now.st_mtime_ns) == (mine.st_size, mine.st_mtime_ns) else mine)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise RecallError(f"cannot write {real}: {exc.strerror}; the file is as it was",
                              "free some space, or check the folder's permissions") from None
        raise
    finally:
        os.close(fd)
    dfd = os.open(os.path.dirname(real), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return written


def tidy(home, paths) -> None:
    """What killed writes left, removed by a writer holding the vault lock (even one with nothing to
    write): each secrets file's temp files no live writer holds, and the key's `.new` and `.next.new`
    (a key written only under that lock, never linked or renamed into place)."""
    for path in paths:
        real = os.path.realpath(path)
        if os.path.isdir(os.path.dirname(real)):
            _remove_stale_temps(real)
    key = keyfile.key_path(home)
    for temp in (key, keyfile.next_path(key)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp.with_name(temp.name + ".new"))


def _remove_stale_temps(real: str) -> None:
    """Remove the temp files (`NAME.recall-PID.tmp`) of writes that were killed: a regular file
    no live writer holds locked, whatever its PID (it may have been reused)."""
    import fcntl
    folder, name = os.path.split(real)
    pattern = re.compile(re.escape(name) + r"\.recall-\d+\.tmp\Z")
    for entry in os.scandir(folder):
        if not pattern.match(entry.name) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | db.NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(entry.path)
        except OSError:          # locked: a write under way (or gone already)
            pass
        finally:
            os.close(fd)


@dataclass
class Written:
    """A value `set_value` sealed: `what` (`id` or `id.field`), where, and its sealed text (no value)."""
    what: str
    id: str
    field: str
    file: str
    sealed: str


def set_value(con, cfg, secret_id: str, field: str | None, value: str, notify=None) -> Written:
    """Seal `value` into the file where secret `secret_id` (its `field`) is written, under the vault
    lock and the key the stored rows need (a rotation stopped before its rename is finished here, as
    sync finishes it). The caller syncs the vault after."""
    from .store import key_probe
    if not value:
        raise RecallError("no value given (an empty value is not a credential)", "type or pipe the value")
    with db.vault_lock(keyfile.lock_path(cfg.home), notify):
        entries, _ = load_secret_files(cfg.secrets)
        by_id = {e.id: e for e in entries}
        e = by_id[resolve(secret_id, {i: i for i in by_id}, "secret", "see 'recall secret find'")]
        names = [f for f in e.values if f]
        if field is None and names:
            raise RecallError(f"secret '{e.id}' has fields ({', '.join(names)}): name one",
                              f"recall secret set {e.id} {names[0]}")
        field = field or ""
        if field not in e.values:
            raise RecallError(f"secret '{e.id}' has no field '{field}'" if names else
                              f"secret '{e.id}' has one value, no fields",
                              f"its fields: {', '.join(names)}" if names else f"recall secret set {e.id}")
        span = e.spans[field]
        # the value was typed or piped, not read from the file: the error names where it came from
        check_value(value, _what(e, field), "the value given", None, on_stdin(e.inject, field))
        key = key_for(cfg.home, entries, key_probe(con))
        sealed = seal(key, e.id, field, value)
        rewrite(e.file, e.stamp, [(span, f'"{sealed}"' if span.flow else sealed)])
        return Written(_what(e, field), e.id, field, e.file, sealed)


def still_written(con, cfg, written: Written) -> bool:
    """Whether the value `set_value` sealed is still in its file, as sealed, and opens with the vault's
    key: a sync that failed after it then loses nothing (the next one stores it)."""
    from .store import key_probe
    try:
        entries, _ = load_secret_files([written.file])
        e = next((e for e in entries if e.id == written.id), None)
        if e is None or e.values.get(written.field) != written.sealed:
            return False
        key = keyfile.load_key(cfg.home, create=False, probe=key_probe(con))
        unseal(opening_keys(cfg.home, key), e, written.field, written.sealed, keyfile.key_path(cfg.home))
    except (RecallError, OSError):
        return False
    return True


def read_value(prompt: str, *, stdin_fd: int = 0, tty: str = "/dev/tty") -> str:
    """A value typed on the terminal without echo, or read from stdin when it is not a terminal
    (one trailing line break, LF or CR LF, dropped)."""
    if not os.isatty(stdin_fd):
        data = b"".join(iter(lambda: os.read(stdin_fd, 1 << 20), b""))
        return _text(data[:-2] if data.endswith(b"\r\n") else data[:-1] if data.endswith(b"\n") else data,
                     "standard input")
    from .tty import ask
    fd = os.open(tty, os.O_RDWR | os.O_NOCTTY)
    try:
        return _text(ask(fd, prompt, echo=False), "the terminal")
    finally:
        os.close(fd)


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RecallError(f"the value read from {where} is not UTF-8 text; nothing was stored",
                          "a binary value goes in base64 (base64 -w0 FILE | recall secret set ID), "
                          "decoded by the command that uses it") from None


# -- the key's backup: the one thing to keep -------------------------------------------------------

def fingerprint(key: bytes) -> str:
    """A short name of a key that tells keys apart and says nothing about them."""
    return hashlib.blake2b(key, digest_size=8, person=b"recall-key-id").hexdigest()


def backup_key(con, cfg, dest) -> Path:
    """Copy the vault key to `dest` (0600, never over an existing file) and record that it was."""
    from .store import key_probe
    key = keyfile.load_key(cfg.home, create=False, probe=key_probe(con))   # the key the rows need
    dest = Path(dest).expanduser()
    from ..notes.walk import would_index
    inside = would_index(cfg, dest)
    if inside is not None:      # indexed, the key's bytes would be searchable, read and embedded
        raise RecallError(f"{dest} would be indexed as a note of source '{inside}'; nothing written",
                          "name a file outside the notes, best on a disk you keep apart")
    try:
        keyfile.write_new(dest, key)
    except FileExistsError:
        raise RecallError(f"{dest} exists; a key backup never overwrites a file", "name a new file") from None
    except OSError as exc:
        raise RecallError(f"cannot write {dest}: {exc.strerror}", "name a file in a folder you can write") from None
    mark = json.dumps({"key": fingerprint(key), "file": str(dest), "at": time.time()}).encode()
    with contextlib.suppress(OSError):          # the copy is made; a record not written asks again
        keyfile.write_key(_backup_mark(cfg.home), mark)
    return dest


def _backup_mark(home) -> Path:
    """The record of the key's last backup, beside the key: every config sharing it, and a rebuilt DB, see it."""
    key = keyfile.key_path(home)
    return key.with_name(key.name + ".backed-up")


def backup_state(con, home) -> tuple:
    """(ok, detail): whether the key in use was backed up since it was made or rotated."""
    path = keyfile.key_path(home)
    try:
        key = path.read_bytes()
        try:
            mark = json.loads(_backup_mark(home).read_bytes())
        except FileNotFoundError:
            mark = json.loads(db.get_meta(con, BACKUP_META) or "{}")
    except (OSError, ValueError):
        return False, f"cannot read {path}"
    if mark.get("key") == fingerprint(key):
        when = time.strftime("%Y-%m-%d", time.localtime(mark["at"]))
        return True, f"backed up {when} to {mark['file']}"
    return False, (f"{'rotated since the last backup' if mark else 'never backed up'}: without it the sealed "
                   "values in the secrets files are lost with this disk — run 'recall secret key backup "
                   f"~/recall-vault-{time.strftime('%Y-%m-%d')}.key' and keep that copy off this machine")
