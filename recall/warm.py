"""The warm helper of `recall search`: a process with the search's imports done, that runs each search
in a fork of itself with the caller's arguments, folder, umask, environment and standard streams
(passed over a Unix socket in a folder only its user may enter; the caller's user id is checked
again). Started by launch.py, never by hand; it leaves after its idle time, or once its socket is
gone or taken by another. The fork is the whole isolation: nothing of one search outlives it.

The next fork is made ahead, as a spare: it has already opened (read-only) the index the last
search read, and takes the next caller handed to it — unless that caller's index is another file,
or this one was replaced or written since (db.AHEAD), when it opens its own as any search does.
"""
from __future__ import annotations

import os
import select
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
_HELD: list = []    # closers of the helper's lock and listening socket: a fork closes them (a search that outlives
                    # the helper must not keep the next one from starting)


class _State:
    def __init__(self, idle: float):
        self.idle, self.last, self.searches = idle, time.monotonic(), 0
        self.hint = None            # (path, vectors) of the index the last search read
        self.spare = None           # (pid, socket to it, the hint it opened)
        self.reports: list = []     # sockets of forks at work, each says which index it read


def serve(path: str, sig: str, idle: float) -> None:
    """Answer searches on `path` until `idle` seconds pass without one. Returns at once when another
    helper holds the lock, or when the code on disk is not what `sig` describes."""
    os.chdir("/")
    if launch.signature() != sig:
        return
    import fcntl
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    _HELD.append(lambda: os.close(lock))
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
    _HELD.append(listener.close)
    inode = os.stat(path).st_ino
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))      # `kill` it: it still takes its socket away
    state = _State(idle)
    try:
        _loop(listener, sig, state, lambda: _still_ours(path, inode))
    finally:
        if _still_ours(path, inode):
            os.unlink(path)
            os.unlink(path + ".lock")   # still locked by this process: a helper starting now makes a new one
        listener.close()                # a spare waiting on its socket sees this process gone, and leaves


def _loop(listener, sig: str, state: _State, ours) -> None:
    while True:
        _reap()
        if state.spare is None:
            state.spare = _fork_spare(state)
        ready, _, _ = select.select([listener, *state.reports], [], [], min(_TICK, state.idle))
        for report in ready:
            if report is not listener:
                _take_report(report, state)
        if listener in ready:
            conn, _ = listener.accept()
            with conn:
                if not _answer(conn, sig, state):
                    return
        elif time.monotonic() - state.last >= state.idle or not ours():
            return


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


# -- the helper's side of a search ----------------------------------------------------------------

def _answer(conn, sig: str, state: _State) -> bool:
    """Hand this caller to the spare (or a fork of its own); False when this helper should leave."""
    fds: list = []
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", creds)[1] != os.getuid():
            return True
        conn.settimeout(2.0)
        fields, fds = _receive(conn)
        if fields[0] == launch.STATUS:
            left = max(0.0, state.idle - (time.monotonic() - state.last))
            conn.sendall(b"pid %d searches %d idle %.0f\n" % (os.getpid(), state.searches, left))
            return True
        if fields[0] != launch.MAGIC or fields[1].decode("utf-8", "surrogateescape") != sig:
            conn.sendall(b"stale\n")
            return False
        if len(fds) != 4:
            return True
        state.last = time.monotonic()
        if not _hand_over(state, conn, fields, fds):
            if os.fork() == 0:
                _forked()
                _child(conn, fields, fds, report=None)      # never returns
        state.searches += 1
    except (OSError, ValueError, IndexError):
        pass                                        # a caller that went away or spoke nonsense
    finally:
        for fd in fds:
            os.close(fd)
    return True


def _hand_over(state: _State, conn, fields: list, fds: list) -> bool:
    """Pass the caller (its socket, streams and folder) and its request to the spare."""
    if state.spare is None:
        return False
    _, to_spare, _ = state.spare
    state.spare = None
    try:
        _send(to_spare, b"\0".join(fields), [conn.fileno(), *fds])
    except OSError:
        to_spare.close()
        return False
    state.reports.append(to_spare)
    return True


def _take_report(report, state: _State) -> None:
    """A fork at work says which index it read: the next spare opens that one ahead."""
    try:
        line = report.recv(8192)
    except OSError:
        line = b""
    state.reports.remove(report)
    report.close()
    if not line.startswith(b"db "):
        return
    vectors, _, path = line[3:].rstrip(b"\n").partition(b" ")
    state.hint = (os.fsdecode(path), vectors == b"1")
    if state.spare is not None and state.spare[2] != state.hint:    # made for another index: replace it
        state.spare[1].close()
        state.spare = _fork_spare(state)


def _fork_spare(state: _State):
    mine, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            _forked()
            mine.close()
            for other in state.reports:
                other.close()
            _spare(theirs, state.hint)              # never returns
        finally:
            os._exit(1)
    theirs.close()
    return pid, mine, state.hint


def _forked() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for close in _HELD:
        close()


def _send(sock, payload: bytes, fds: list) -> None:
    data = b"%d\n" % len(payload) + payload
    sent = sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])
    if sent < len(data):
        sock.sendall(data[sent:])


def _receive(conn):
    """(fields, passed descriptors) of one request: a length line, then NUL-separated fields."""
    data, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(5 * struct.calcsize("i")))
    fds = []
    for level, kind, blob in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += struct.unpack(f"{len(blob) // 4}i", blob[: len(blob) // 4 * 4])
    try:
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
    except (OSError, ValueError):
        for fd in fds:                  # a long-lived helper keeps no descriptor of a request it dropped
            os.close(fd)
        raise
    return b"".join(chunks).split(b"\0"), fds


# -- a fork: the spare, then the caller's search ----------------------------------------------------

def _spare(from_helper, hint) -> None:
    """Open the last search's index ahead, then wait for a caller (none: the helper left)."""
    if hint is not None:
        _open_ahead(*hint)
    try:
        fields, fds = _receive(from_helper)
    except (OSError, ValueError):
        os._exit(0)
    if len(fds) != 5:
        os._exit(0)
    _child(socket.socket(fileno=fds[0]), fields, fds[1:], report=from_helper)


def _open_ahead(path: str, vectors: bool) -> None:
    from . import common_terms, db
    try:
        ident = db.file_identity(path)
        con = db.connect(path, readonly=True, vectors=vectors)
        common_terms.prepare(con)
    except Exception:                   # whatever it is, the search meets it again and says it
        db.AHEAD.clear()
        return
    db.AHEAD.update(key=(path, vectors), file=ident, con=con)
    del db.OPENED[:]


def _child(conn, fields: list, fds: list, report) -> None:
    """Become the caller's `recall search`: its streams, folder, umask, environment and arguments."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        conn.settimeout(5.0)
        conn.sendall(b"pid %d\n" % os.getpid())
        if conn.recv(3) != b"go\n":
            os._exit(0)                             # the caller gave up waiting and runs it itself
        conn.settimeout(None)
        _follow(conn)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.fchdir(fds[3])
        for fd in fds:
            os.close(fd)
        mask, streams, argv0, count = int(fields[2]), fields[3:6], fields[6], int(fields[7])
        argv = [os.fsdecode(a) for a in fields[8:8 + count]]
        env = dict(os.fsdecode(item).partition("=")[::2] for item in fields[8 + count:] if item)
        os.umask(mask)
        os.environ.clear()
        os.environ.update(env)
        time.tzset()
        sys.argv = [os.fsdecode(argv0), *argv]
        _streams([s.decode() for s in streams])
        if launch.verb_of(argv) != "search":        # launch.py sends nothing else; a hand-made request may
            sys.stderr.write("recall: the search helper runs `recall search` only\n")
            code = 2
        else:
            code = _run(argv)
    except BaseException:                           # as an uncaught exception ends a process: traceback, 1
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        _leave(conn, code, report)


def _follow(conn) -> None:
    """A caller that goes away before its search ends (killed, timed out) takes the search with it,
    as it would a search in its own process."""
    import threading

    def wait():
        try:
            gone = conn.recv(1) == b""
        except OSError:
            gone = True
        if gone and not _ENDING:
            os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=wait, daemon=True).start()


_ENDING: list = []      # set once the search has ended: the caller may leave now


def _leave(conn, code: int, report) -> None:
    _ENDING.append(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    try:
        conn.sendall(b"exit %d\n" % code)
    except Exception:
        pass
    read = sys.modules["recall.db"].LAST_READ
    if report is not None and read:
        try:
            report.sendall(b"db %d %s\n" % (bool(read[1]), os.fsencode(read[0])))
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
