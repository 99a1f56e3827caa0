"""The warm helper of `recall search`: a process with the search's imports done, that forks once per
search and runs it in the fork with the caller's arguments, folder, umask, environment and standard
streams (passed over a Unix socket in a folder only its user may enter, the caller's user id checked
again). Started by launch.py, never by hand; it leaves after its idle time, or once its socket is
gone or taken by another. The fork is the whole isolation: nothing of one search outlives it.
"""
from __future__ import annotations

import os
import signal
import socket
import struct
import sys
import time

from . import launch

# What a search imports (the CLI's, the search's, the store's), loaded once here instead of per search.
WARM = ("recall.cli", "recall.search", "recall.db", "recall.vault", "recall.config", "recall.yamlish",
        "recall.common_terms", "recall.chunk", "recall.inventory", "recall.vectors", "recall.embed")
_TICK = 2.0         # how often an idle helper looks whether its socket is still its own


def serve(path: str, sig: str, idle: float) -> None:
    """Answer searches on `path` until `idle` seconds pass without one. Returns at once when another
    helper holds the lock, or when the code on disk is not what `sig` describes."""
    os.chdir("/")
    if launch.signature() != sig:
        return
    import fcntl
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return                          # another helper for this code starts or runs
    _sweep(os.path.dirname(path))
    _warm_up()
    if launch.signature() != sig:       # edited while loading: the loaded code is not `sig`'s
        return
    try:
        os.unlink(path)                 # a socket left by a helper that was killed
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mask = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(mask)
    listener.listen(64)
    inode = os.stat(path).st_ino
    listener.settimeout(min(_TICK, idle))
    state = {"searches": 0, "last": time.monotonic(), "idle": idle}
    try:
        while True:
            _reap()
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                if time.monotonic() - state["last"] >= idle or not _still_ours(path, inode):
                    break
                continue
            with conn:
                if not _answer(conn, listener, sig, state):
                    break
    finally:
        if _still_ours(path, inode):
            os.unlink(path)
            os.unlink(path + ".lock")   # still locked by this process: a helper starting now makes a new one
        listener.close()


def _sweep(folder: str) -> None:
    """Remove what killed helpers (of any code) left: a socket whose lock no process holds."""
    import fcntl
    for name in os.listdir(folder):
        if not name.endswith(".sock.lock"):
            continue
        lock_path = os.path.join(folder, name)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue                    # a live helper's
        for stale in (lock_path[:-len(".lock")], lock_path):
            try:
                os.unlink(stale)
            except OSError:
                pass
        os.close(fd)


def _warm_up() -> None:
    import importlib
    for name in WARM:
        importlib.import_module(name)
    cli = sys.modules["recall.cli"]
    cli.BUILT["search"] = cli.build_parser("search")   # each fork uses it once, as a process would its own
    try:
        import numpy  # noqa: F401      the local model's query encoder needs it, when installed
    except ImportError:
        pass


def _still_ours(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _answer(conn, listener, sig: str, state: dict) -> bool:
    """Fork one search for this caller; False when this helper should leave (its code is stale)."""
    fds: list = []
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", creds)[1] != os.getuid():
            return True
        conn.settimeout(2.0)
        fields, fds = _receive(conn)
        if fields[0] == launch.STATUS:
            left = max(0.0, state["idle"] - (time.monotonic() - state["last"]))
            conn.sendall(b"pid %d searches %d idle %.0f\n" % (os.getpid(), state["searches"], left))
            return True
        if fields[0] != launch.MAGIC or fields[1].decode("utf-8", "surrogateescape") != sig:
            conn.sendall(b"stale\n")
            return False
        state["last"] = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(conn, listener, fields, fds)     # never returns
        state["searches"] += 1
    except (OSError, ValueError, IndexError):
        pass                                        # a caller that went away or spoke nonsense
    finally:
        for fd in fds:
            os.close(fd)
    return True


def _receive(conn):
    """(fields, passed descriptors) of one request: a length line, then NUL-separated fields."""
    data, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(4 * struct.calcsize("i")))
    fds = []
    for level, kind, blob in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += struct.unpack(f"{len(blob) // 4}i", blob[: len(blob) // 4 * 4])
    head, _, body = data.partition(b"\n")
    size = int(head)
    if size > 16 << 20:
        raise ValueError("request too large")
    chunks = [body]
    got = len(body)
    while got < size:
        more = conn.recv(min(1 << 20, size - got))
        if not more:
            raise ValueError("request cut short")
        chunks.append(more)
        got += len(more)
    return b"".join(chunks).split(b"\0"), fds


def _child(conn, listener, fields: list, fds: list) -> None:
    """Become the caller's `recall search`: its streams, folder, umask, environment and arguments."""
    code = 1
    try:
        listener.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        conn.settimeout(5.0)
        conn.sendall(b"pid %d\n" % os.getpid())
        if conn.recv(3) != b"go\n":
            os._exit(0)                             # the caller gave up waiting and runs it itself
        conn.settimeout(None)
        if len(fds) != 4:
            raise ValueError("expected stdin, stdout, stderr and the folder")
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.fchdir(fds[3])
        mask, streams, argv0, count = int(fields[2]), fields[3:6], fields[6], int(fields[7])
        argv = [os.fsdecode(a) for a in fields[8:8 + count]]
        env = dict(os.fsdecode(item).partition("=")[::2] for item in fields[8 + count:] if item)
        os.umask(mask)
        os.environ.clear()
        os.environ.update(env)
        time.tzset()
        sys.argv = [os.fsdecode(argv0), *argv]
        _streams([s.decode() for s in streams])
        code = _run(argv)
    except BaseException:                           # as an uncaught exception ends a process: traceback, 1
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        try:
            conn.sendall(b"exit %d\n" % code)
        except Exception:
            pass
        os._exit(code)


def _streams(specs: list) -> None:
    enc = [spec.rpartition(":") for spec in specs]
    sys.stdin = open(0, "r", encoding=enc[0][0], errors=enc[0][2], closefd=False)
    sys.stdout = open(1, "w", encoding=enc[1][0], errors=enc[1][2], closefd=False)
    sys.stderr = open(2, "w", encoding=enc[2][0], errors=enc[2][2], closefd=False, buffering=1)


def _run(argv: list) -> int:
    from .cli import main
    try:
        code = main(argv)
        sys.stdout.flush()
    except SystemExit as exc:                      # argparse's usage errors, as in a process of its own
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except BrokenPipeError:
        return 0
    return code
