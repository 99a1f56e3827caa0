"""Locks held across processes: an flock on a file in the state folder,
released by the kernel when its holder dies; one index run at a time, one
vault writer at a time."""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from pathlib import Path

from ..errors import RecallError

VAULT_WAIT_S = 30.0       # a vault writer waits this long for another
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL)


def index_lock(db_path, notify=None):
    """One index run at a time per DB; the next run says whom it waits
    for, then waits."""
    return held(Path(db_path).with_name("index.lock"),
                "another index run", notify)


def index_running(db_path) -> str | None:
    """The pid of an index run of this DB going on now (None: none is, or none can be told)."""
    from . import NOFOLLOW
    try:
        import fcntl
        fd = os.open(str(Path(db_path).with_name("index.lock")), os.O_RDONLY | NOFOLLOW)
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _holder(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def vault_lock(path, notify=None):
    """One writer of the key, the secrets files and the sealed rows at a
    time (`path`: keyfile.lock_path, beside the key); the next says whom it
    waits for, and gives up after VAULT_WAIT_S. Where no lock can be held,
    nothing is written (fail closed)."""
    return held(Path(path), "another recall writing the vault",
                notify, VAULT_WAIT_S, required=True)


@contextlib.contextmanager
def held(path: Path, what: str, notify=None, wait_s=None, required=False):
    """An exclusive flock on `path` for the block; its holder writes its
    pid there. `wait_s`: None waits for ever, else a RecallError after it.
    `required`: no flock here (Windows, some NFS) is refused, not skipped."""
    try:
        import fcntl
    except ImportError:
        if required:
            raise _unlockable(path, "this system has no flock") from None
        yield
        return
    fd = _open(path)
    try:
        locked = _take(fcntl, fd, path, what, notify, wait_s)
        if not locked and required:
            raise _unlockable(path, "its file system has no flock")
        if locked:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield                      # unlocked: transactions only
    finally:
        os.close(fd)               # closing releases the lock


def _open(path: Path) -> int:
    """The lock file, 0600, never through a link nor a folder."""
    from . import NOFOLLOW, explain, refuse_foreign
    refuse_foreign(path)
    try:
        fd = os.open(str(path), os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
    except OSError as exc:      # a link or a folder swapped in since
        refuse_foreign(path)
        raise explain(exc, path) or exc from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        refuse_foreign(path)
    return fd


def _take(fcntl, fd: int, path, what, notify, wait_s) -> bool:
    """Lock `fd`, saying first whom it waits for; False where the file
    system has no flock; a RecallError once `wait_s` has passed."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    except OSError as exc:
        if exc.errno in _NO_FLOCK:
            return False
        raise
    holder = _holder(fd)
    if notify:
        notify(f"waiting for {what} (pid {holder})")
    if wait_s is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            continue
    raise RecallError(f"{what} (pid {_holder(fd)}) still held {path} "
                      f"after {wait_s:g} s; nothing was changed",
                      "let it finish, then run this again")


def _holder(fd: int) -> str:
    """The pid the holder wrote (it may be writing it just now)."""
    text = os.pread(fd, 20, 0) or (time.sleep(0.05) or os.pread(fd, 20, 0))
    return text.decode("ascii", "replace").strip() or "unknown"


def _unlockable(path, why: str) -> RecallError:
    """Why the vault is not written where no lock can be held."""
    return RecallError(f"cannot lock {path}: {why}, and the vault is "
                       "written only under its lock; nothing was changed",
                       "set RECALL_HOME to a folder on a local disk")
