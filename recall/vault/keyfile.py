"""The vault key: 32 random bytes in a 0600 file inside a 0700 folder; AES-256-GCM around it, and what
each ciphertext is bound to."""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from ..config import key_file as key_path  # noqa: F401  (where the key is: one rule, the walk's too)
from ..errors import MissingExtra, RecallError

KEY_BYTES = 32
NONCE_BYTES = 12


def _aesgcm(key: bytes):
    """cryptography's AESGCM, from the Rust binding when it is there: the public module is its alias, but
    that package loads every cipher, mode and `typing` first (a cost at each `secret exec`'s start)."""
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


def _check_private(path: Path, what: str = "file", mode: str = "600") -> None:
    """Refuse a key file (and its folder) that group or others can reach, as ssh refuses loose keys."""
    if what == "file":
        _check_private(path.parent, "folder", "700")
    found = stat.S_IMODE(os.stat(path).st_mode)
    if found & 0o077:
        raise RecallError(f"the key {what} {path} is open to group or others ({oct(found)})", f"chmod {mode} {path}")


def write_new(path, data: bytes) -> None:
    """Create `path` 0600 (never over a file, nor through a link), write `data`, fsync."""
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_key(path: Path, key: bytes, *, over: bool = True) -> None:
    """Whole or not at all, through `NAME.new` (a leftover, or a link planted there, is removed first);
    `over=False`: never over a key that is there."""
    tmp = path.with_name(path.name + ".new")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    write_new(tmp, key)
    if over:
        os.replace(tmp, path)
        return
    try:
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)       # unlike a rename, fails when a key is there
    finally:
        os.unlink(tmp)


def next_path(path: Path) -> Path:
    return path.with_name(path.name + ".next")


def lock_path(home) -> Path:
    """The vault writers' lock (db.vault_lock): `KEY.lock` beside the real key file, wherever it is
    (RECALL_KEY_FILE, a link to it), so every state folder and config sharing a key share it; its
    folder made 0700, and refused when others can read it (a key is never written there)."""
    real = Path(os.path.realpath(key_path(home)))
    real.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_private(real.parent, "folder", "700")
    return real.with_name(real.name + ".lock")


def load_key(home: Path, *, create: bool, probe=None, settle: bool = False) -> bytes:
    """The vault key. `probe`: one stored row's `cipher_of`; when it opens only with `vault.key.next` (a
    `rotate-key` stopped between its COMMIT and the rename), that key; `settle` (a writer, under the
    vault lock): the rename is finished here."""
    path = key_path(home)
    if os.path.lexists(path) and not path.is_file():
        raise RecallError(f"the vault key {path} is not a file (a folder, or a link to nothing)",
                          f"move it aside and put the key file back from your backup as {path}")
    if not path.exists():
        if not create:
            raise RecallError(f"no vault key at {path}", "run 'recall secret sync' first")
        require_crypto()                   # fail on a missing extra before making a key
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _check_private(path.parent, "folder", "700")     # never write a key into a folder others can read
        write_key(path, os.urandom(KEY_BYTES), over=False)
    _check_private(path)
    key = _read_key(path)
    pending = next_path(path)
    if probe is not None and pending.exists() and not _opens(key, probe):
        _check_private(pending)
        new = _read_key(pending)
        if _opens(new, probe):
            if settle:         # a reader never renames: a rotation may be writing a newer .next
                os.replace(pending, path)
            return new
    return key


def hold_privately() -> None:
    """From now on this process holds secrets: no core file, and (Linux) not dumpable, so no other
    process of this user — a child it runs — can open its /proc memory, environ or descriptors."""
    import sys
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)      # PR_SET_DUMPABLE, 0


def _read_key(path: Path) -> bytes:
    hold_privately()
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
    """(nonce, ciphertext); `bound` (how the value is used) is its AES-GCM associated data, with the id."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce, _aesgcm(key).encrypt(nonce, plaintext, secret_id.encode() + b"\0" + bound)


def decrypt(key: bytes, secret_id: str, nonce: bytes, ciphertext: bytes, bound: bytes = b"") -> bytes:
    try:
        return _aesgcm(key).decrypt(nonce, ciphertext, secret_id.encode() + b"\0" + bound)
    except MissingExtra:
        raise
    except Exception:
        pass
    if bound[:1] == b"[" and _opens(key, (secret_id, nonce, ciphertext)):    # bound to the id only
        raise RecallError(f"secret '{secret_id}' was stored by an older recall (before values were bound "
                          "to how they are used)", "run 'recall secret sync' to re-encrypt")
    raise RecallError(f"secret '{secret_id}' does not decrypt with this key, or its stored row "
                      "was changed", "run 'recall secret sync' to re-encrypt from the secrets files")


# -- what each ciphertext is bound to (AES-GCM associated data) --------------------------------------

def bound(inject: str, check: str, variables: dict, url: str, public: list, proxy=None) -> bytes:
    """Every stored column that changes how a value is used or which fields go unmasked (proxy settings too)."""
    import json
    return json.dumps([inject, check, variables, url, sorted(public)] + ([proxy] if proxy else []),
                      sort_keys=True).encode()


def cipher_of(row) -> tuple:
    """A stored row as `decrypt` takes it: (id, nonce, ciphertext, what it is bound to)."""
    import json
    meta = json.loads(row["meta"])
    return (row["id"], row["nonce"], row["ciphertext"],
            bound(row["inject"], row["check_cmd"], json.loads(row["variables"]), meta.get("url", ""),
                  meta.get("public") or [], meta.get("proxy")))
