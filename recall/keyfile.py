"""The vault key: 32 random bytes in a 0600 file inside a 0700 folder; AES-256-GCM around it, what
each ciphertext is bound to, and decrypting stored rows."""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from .errors import MissingExtra, RecallError

KEY_BYTES = 32
NONCE_BYTES = 12


def key_path(home: Path) -> Path:
    override = os.environ.get("RECALL_KEY_FILE")
    return Path(override).expanduser() if override else Path(home) / "vault.key"


def _aesgcm(key: bytes):
    """cryptography's AESGCM. The public module is an alias of the Rust binding's class, but its
    package loads every cipher, mode and `typing` first (~13 ms of each `secret exec`'s start);
    the class is taken from the binding when it is there, from the public name otherwise."""
    try:
        from cryptography.hazmat.bindings._rust import openssl
        AESGCM = openssl.aead.AESGCM
    except (ImportError, AttributeError):
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            raise MissingExtra("crypto", "the vault (encrypting secret values)") from None
    return AESGCM(key)


def require_crypto() -> None:
    _aesgcm(bytes(KEY_BYTES))


def _check_folder(folder: Path) -> None:
    folder_mode = stat.S_IMODE(os.stat(folder).st_mode)
    if folder_mode & 0o077:
        raise RecallError(f"the key folder {folder} is open to group or others ({oct(folder_mode)})",
                          f"chmod 700 {folder}")


def _check_private(path: Path) -> None:
    """Refuse a key file or folder that group or others can reach, as ssh refuses loose keys."""
    _check_folder(path.parent)
    file_mode = stat.S_IMODE(os.stat(path).st_mode)
    if file_mode & 0o077:
        raise RecallError(f"the key file {path} is open to group or others ({oct(file_mode)})",
                          f"chmod 600 {path}")


def write_key(path: Path, key: bytes) -> None:
    """Write atomically: a 0600 temp file in the same folder, fsync, rename. A leftover temp file
    (or a link planted in its place) is removed, never written through."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".new")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def next_path(path: Path) -> Path:
    return path.with_name(path.name + ".next")


def load_key(home: Path, *, create: bool, probe=None) -> bytes:
    """The vault key. `probe` is one stored (id, nonce, ciphertext) row: when a `rotate-key` stopped
    between committing the DB and renaming the new key into place, the row opens only with
    `vault.key.next`, and the rename is finished here."""
    path = key_path(home)
    if os.path.lexists(path) and not path.is_file():
        raise RecallError(f"the vault key {path} is not a file (a folder, or a link to nothing)",
                          f"move it aside and put the key file back from your backup as {path}")
    if not path.exists():
        if not create:
            raise RecallError(f"no vault key at {path}", "run 'recall secret sync' first")
        require_crypto()                   # fail on a missing extra before making a key
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _check_folder(path.parent)         # never write a key into a folder others can read
        write_key(path, os.urandom(KEY_BYTES))
    _check_private(path)
    key = _read_key(path)
    pending = next_path(path)
    if probe is not None and pending.exists() and not _opens(key, probe):
        _check_private(pending)
        new = _read_key(pending)
        if _opens(new, probe):
            os.replace(pending, path)
            return new
    return key


def _read_key(path: Path) -> bytes:
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise RecallError(f"the key file {path} is {len(key)} bytes, not {KEY_BYTES}",
                          "restore it, or remove it and run 'recall secret sync' again")
    return key


def _opens(key: bytes, probe) -> bool:
    try:
        decrypt(key, *probe)
        return True
    except RecallError:
        return False


def encrypt(key: bytes, secret_id: str, plaintext: bytes, bound: bytes = b"") -> tuple:
    """(nonce, ciphertext); `bound` (how the value is used) is authenticated with it (AES-GCM
    associated data): a changed id, variable name or check makes the row refuse to decrypt."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce, _aesgcm(key).encrypt(nonce, plaintext, secret_id.encode() + b"\0" + bound)


def decrypt(key: bytes, secret_id: str, nonce: bytes, ciphertext: bytes, bound: bytes = b"") -> bytes:
    try:
        return _aesgcm(key).decrypt(nonce, ciphertext, secret_id.encode() + b"\0" + bound)
    except MissingExtra:
        raise
    except Exception:
        pass
    if bound[:1] == b"[" and _opens_unbound(key, secret_id, nonce, ciphertext):
        raise RecallError(f"secret '{secret_id}' was stored by an older recall (before values were bound "
                          "to how they are used)", "run 'recall secret sync' to re-encrypt")
    raise RecallError(f"secret '{secret_id}' does not decrypt with this key, or its stored row "
                      "was changed", "run 'recall secret sync' to re-encrypt from the secrets files")


def _opens_unbound(key: bytes, secret_id: str, nonce: bytes, ciphertext: bytes) -> bool:
    """Whether a row opens as recall stored rows before they were bound (id only)."""
    try:
        _aesgcm(key).decrypt(nonce, ciphertext, secret_id.encode() + b"\0")
        return True
    except Exception:
        return False


def decrypt_rows(key: bytes, rows: list, values: dict, *, need=()) -> dict:
    """`values` filled with {secret id: {field: value}} from stored rows (the vault reads them). A
    row that does not open (changed in the DB, corrupt) fails only itself: it is left out, unless
    it is in `need`; when no row opens at all, the key is wrong and that is the error."""
    import json
    first_error = None
    for row in rows:
        try:
            plain = decrypt(key, row["id"], row["nonce"], row["ciphertext"], row_bound(row))
        except RecallError as exc:
            if row["id"] in need:
                raise
            first_error = first_error or exc
            continue
        values[row["id"]] = json.loads(plain)
    if rows and not values and first_error is not None:
        raise first_error
    return values


# -- what each ciphertext is bound to (AES-GCM associated data) --------------------------------------

def bound(inject: str, check: str, variables: dict, url: str, public: list, proxy=None) -> bytes:
    """Every stored column that changes how a value is used (and which fields go unmasked), as
    authenticated with its ciphertext; a host-bound secret's proxy settings too (paths, ca, query)."""
    import json
    return json.dumps([inject, check, variables, url, sorted(public)] + ([proxy] if proxy else []),
                      sort_keys=True).encode()


def row_bound(row) -> bytes:
    """What a stored row's ciphertext is bound to (its columns, as `bound` takes them)."""
    import json
    meta = json.loads(row["meta"])
    return bound(row["inject"], row["check_cmd"], json.loads(row["variables"]), meta.get("url", ""),
                 meta.get("public") or [], meta.get("proxy"))
