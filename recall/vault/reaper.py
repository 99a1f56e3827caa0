"""Where every child that holds secrets starts and ends: a process group of its own that ends with it, a
watcher that ends the group if recall is killed first, and (Linux) what left the group, ended too."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, suppress

_TERM_GRACE = 1.0      # seconds between SIGTERM and SIGKILL
# A watcher per child, not PR_SET_PDEATHSIG: that reaches the child alone (not its group), needs a preexec_fn (unsafe
# with the MCP server's threads) and fires when the forking thread ends. Its pipe closed before "done": kill the group.
_WATCH = 'read -r g && { read -r _ || kill -9 "-$g"; }'
_LOCK = threading.Lock()
_WATCHERS: dict = {}   # {child started and not yet ended: its watcher}
_LIVE = [0]            # children starting or started, not yet ended
_SINCE = [None]        # while children run and recall is their subreaper (Linux): the last pid given before them


def start(argv: list, into: list, **popen) -> subprocess.Popen:
    """`argv` started (Popen's keywords) in a session and process group of its own, watched, and put in
    `into` (the caller's: `end` each there) before a signal that lands meanwhile is raised."""
    with _LOCK:
        if not _LIVE[0]:
            _SINCE[0] = _last_pid() if _subreaper(True) else None
        _LIVE[0] += 1
    watcher = None
    with _signals_held():
        try:
            watcher = subprocess.Popen(["/bin/sh", "-c", _WATCH], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, env={}, bufsize=0,
                                       start_new_session=True)   # `kill -9 %1` of recall's job leaves it to act
            proc = subprocess.Popen(argv, start_new_session=True, **popen)
        except BaseException:
            if watcher is not None:
                _stand_down(watcher, b"")
            _leave()
            raise
        with suppress(OSError):
            watcher.stdin.write(b"%d\n" % proc.pid)
        with _LOCK:
            _WATCHERS[proc] = watcher
        into.append(proc)
    return proc


@contextmanager
def _signals_held():
    """Ctrl-C, SIGTERM or SIGHUP landing while a child starts is raised once it is held (a busy machine
    widens that moment: the child runs, the caller never learns it started). Signals reach the main
    thread only; elsewhere nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list = []
    held = {n: signal.signal(n, lambda signum, _frame: came.append(signum))
            for n in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for n, handler in held.items():
            signal.signal(n, handler)
        if came:
            signal.raise_signal(came[0])


def end(proc: subprocess.Popen) -> None:
    """End a started child, if running, and what it started (once: again does nothing): its process group
    (SIGTERM, a grace, SIGKILL), its watcher told it is done, and, once no child runs, what left its group."""
    with _LOCK:
        watcher = _WATCHERS.pop(proc, None)
    if watcher is None:
        return
    try:
        if proc.poll() is None:
            kill_group(proc)
        else:                    # what it started and left behind (`sleep 600 &`, nohup …) ends with it
            end_group(proc.pid)
    finally:
        try:
            _stand_down(watcher, b"\n")
        finally:
            _leave()


def _stand_down(watcher: subprocess.Popen, said: bytes) -> None:
    with suppress(OSError):
        watcher.stdin.write(said)
    with suppress(OSError):
        watcher.stdin.close()
    watcher.wait()


def _leave() -> None:
    """One child fewer; after the last, what the runs left outside their groups ends, and recall reaps no more."""
    with _LOCK:
        _LIVE[0] -= 1
        since = _SINCE[0]
        if _LIVE[0] or since is None:
            return
        try:
            _end_escaped(since if _last_pid() >= since else 0)      # below it: the pids wrapped, look at all
        finally:
            _subreaper(False)
            _SINCE[0] = None


def _end_escaped(since: int) -> None:
    """`setsid cmd &`, a daemon's double fork: out of its group, orphaned to recall. SIGTERM, a grace, SIGKILL."""
    sig, until = signal.SIGTERM, time.monotonic() + _TERM_GRACE
    while groups := _escaped(since):
        if time.monotonic() >= until:
            if sig == signal.SIGKILL:
                return
            sig, until = signal.SIGKILL, time.monotonic() + _TERM_GRACE
        for pgrp in groups:
            with suppress(OSError):
                os.killpg(pgrp, sig)
        time.sleep(0.02)


def _escaped(since: int) -> set:
    """The process groups of recall's running children newer than pid `since` in a session not recall's:
    a run's (every other child of recall is in its session, but the watchers, already reaped, and `secret
    reveal`'s, which runs none); the ended ones are reaped."""
    me, mine, groups = os.getpid(), os.getsid(0), set()
    for pid, state, ppid, pgrp, sid in _processes(since):
        if ppid == me and sid != mine:
            if state == b"Z":
                with suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            else:
                groups.add(pgrp)
    return groups


def _processes(since: int = 0):
    """(pid, state, parent, group, session) of each process newer than pid `since`, as /proc says."""
    with suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) > since:
                with suppress(OSError, ValueError):
                    with open(f"/proc/{name}/stat", "rb") as f:      # "pid (comm) state ppid pgrp session …"
                        state, *ids = f.read().rsplit(b")", 1)[1].split()[:4]
                    yield (int(name), state, *map(int, ids))


def _subreaper(on: bool) -> bool:
    """Linux: orphaned descendants become recall's children (PR_SET_CHILD_SUBREAPER), not init's. Whether set."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    return ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0) == 0


def _last_pid() -> int:
    """The last process id given out (0 when unknown: every pid is newer)."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left of it (grandchildren too) after a grace."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(_TERM_GRACE)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def end_group(pgid: int) -> None:
    """Stop what is left of a finished child's process group: no process a run started outlives it,
    holding what it was given. SIGTERM, up to a grace for the group to go, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        end = time.monotonic() + _TERM_GRACE
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        while _group_runs(pgid):
            if time.monotonic() >= end:
                break
            time.sleep(0.02)
        else:
            return


def _group_runs(pgid: int) -> bool:
    """Does a process of group `pgid` still run? Zombies waiting for a reaper do not (where /proc says
    which they are; elsewhere any member counts)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return not os.path.isdir("/proc/self") or any(
        pgrp == pgid and state not in (b"Z", b"X") for _, state, _, pgrp, _ in _processes())
