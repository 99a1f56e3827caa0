"""The client of the warm helper of `recall search`, and the verbs' one list (__main__.run uses both).

A `recall search` is handed to the helper (warm.py) when one runs for this very code: this process
passes it the arguments, its folder, umask, environment and standard streams, and waits for the
exit code. The search runs in a fork of the helper, whose imports are already done, exactly as it
would here. When no helper answers, the search runs here, as every other command does, and a
helper is started for the next one; it leaves after RECALL_HELPER seconds without a search.

Kept small and free of imports beyond C modules: it runs before every search.
"""
import os
import sys

IDLE_DEFAULT = 600          # seconds the helper stays after its last search
MAGIC = b"recall-search-1"
STATUS = b"recall-status-1"
_CONNECT_WAIT = 2.0         # a helper that does not start the search by then is passed over


VERBS = ("index", "search", "read", "secret", "access", "verify", "remote", "mcp", "instructions",
         "doctor", "eval")


def verb_of(argv: list):
    """The verb argv names (None: unknown, or help asked of the top level)."""
    after_config = False
    for arg in argv:
        if after_config:
            after_config = False
        elif arg == "--config":
            after_config = True
        elif not arg.startswith("-"):
            return arg if arg in VERBS else None
        elif arg in ("-h", "--help"):
            return None
    return None


def idle_seconds():
    """RECALL_HELPER as seconds of idling, or None when it is `off`; a bad value ends the search."""
    seconds = _setting()
    if isinstance(seconds, str):
        sys.stderr.write(f"recall: {seconds}\n")
        os._exit(2)
    return seconds


def _setting():
    """RECALL_HELPER: seconds, None (off), or what is wrong with it."""
    raw = os.environ.get("RECALL_HELPER", "").strip()
    if raw.lower() in ("off", "0", "no", "false"):
        return None
    try:
        seconds = float(raw) if raw else IDLE_DEFAULT
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 86400:
        return (f"RECALL_HELPER is {raw!r}: give `off`, or the seconds the search helper stays after its "
                "last search (1-86400)")
    return seconds


def signature() -> str:
    """What makes a helper's answers the same as this process's: the interpreter, the import path
    and every file of this package (its size and time), so an edited or upgraded recall gets a new one."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    parts = [sys.executable, sys.version, pkg, *import_path()]
    with os.scandir(pkg) as entries:
        for e in sorted(entries, key=lambda e: e.name):
            if e.name.endswith(".py"):
                st = e.stat()
                parts.append(f"{e.name} {st.st_size} {st.st_mtime_ns}")
    return "\n".join(parts)


def import_path() -> list:
    """sys.path as the helper gets it: absolute, and without the current folder (`python -m recall`
    puts it first), so one helper serves every folder; the package's own parent stays first."""
    here = os.getcwd()
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rest = [p for p in map(os.path.abspath, sys.path) if p not in (here, pkg_parent)]
    return [pkg_parent, *rest]


def run_dir_path() -> str:
    """Where the helpers' sockets live: XDG_RUNTIME_DIR/recall, else /tmp/recall-UID."""
    base = os.environ.get("XDG_RUNTIME_DIR") or ""
    return os.path.join(base, "recall") if base else f"/tmp/recall-{os.getuid()}"


def run_dir():
    """run_dir_path(), made if missing; None unless it is a real folder of this user that no one
    else may enter."""
    path = run_dir_path()
    for attempt in (0, 1):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if attempt:
                return None
            try:
                os.mkdir(path, 0o700)
            except OSError:
                pass            # made meanwhile by another search, or not allowed: the lstat decides
            continue
        except OSError:
            return None
        import stat
        ok = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077
        return path if ok else None
    return None


def socket_path(sig: str):
    folder = run_dir()
    if folder is None:
        return None
    import zlib
    data = sig.encode("utf-8", "surrogateescape")
    path = os.path.join(folder, f"search-{zlib.crc32(data):08x}{zlib.adler32(data):08x}.sock")
    return path if len(path.encode()) < 100 else None      # AF_UNIX holds 107 bytes


TO_START: list = []         # [socket path, signature, idle]: no helper answered; start one once the search is done


def by_helper(argv):
    """The search's exit code from the helper, or None when none answered (TO_START says which to
    start, after this process's own search: started now, it would take CPU from that search)."""
    if sys.platform != "linux":        # the helper checks its caller's user id with SO_PEERCRED
        return None
    idle = idle_seconds()
    if idle is None:
        return None
    sig = signature()
    path = socket_path(sig)
    if path is None:
        return None
    try:
        fds = [0, 1, 2]
        for fd in fds:
            os.fstat(fd)            # a closed stream cannot be passed: run here
        fds.append(os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except OSError:
        return None
    import _socket
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(_CONNECT_WAIT)
        sock.connect(path)
        _send(sock, sig, argv, fds)
        buf = bytearray()
        pid = _started(sock, buf)
    except OSError:
        pid = None
    finally:
        os.close(fds[3])
    if pid is None:
        sock.close()
        TO_START[:] = [path, sig, idle]
        return None
    return _wait(sock, pid, buf)


def _send(sock, sig, argv, fds) -> None:
    mask = os.umask(0o077)
    os.umask(mask)
    streams = [f"{s.encoding}:{s.errors}" if s is not None else "utf-8:strict"
               for s in (sys.stdin, sys.stdout, sys.stderr)]
    fields = [MAGIC, sig.encode("utf-8", "surrogateescape"), str(mask).encode(), *map(str.encode, streams),
              os.fsencode(sys.argv[0]), str(len(argv)).encode(), *map(os.fsencode, argv),
              *(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in os.environ.items())]
    payload = b"\0".join(fields)
    head = b"%d\n" % len(payload)
    import _socket
    rights = b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)
    sent = sock.sendmsg([head + payload], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    if sent < len(head) + len(payload):
        sock.sendall((head + payload)[sent:])


def _started(sock, buf):
    """The pid of the fork that will run the search, once it is told to go; None if it did not answer."""
    line = _line(sock, buf)
    if not line.startswith(b"pid "):
        return None
    sock.sendall(b"go\n")
    sock.settimeout(None)
    return int(line[4:])


def _line(sock, buf):
    while b"\n" not in buf:
        chunk = sock.recv(64)
        if not chunk:
            break
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line


def _wait(sock, pid, buf) -> int:
    """The search's exit code; Ctrl-C is passed on to it, as if it ran here."""
    while True:
        try:
            line = _line(sock, buf)
            break
        except KeyboardInterrupt:
            import signal
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass
        except OSError:
            line = b""
            break
    sock.close()
    if line.startswith(b"exit "):
        return int(line[5:])
    sys.stderr.write("recall: the search helper stopped before the search ended; run it again, "
                     "or set RECALL_HELPER=off\n")
    return 1


def start(path, sig, idle) -> None:
    """Start a helper for later searches, detached: its own session, no terminal, no streams."""
    code = ("import sys; sys.path[:] = %r; from recall.warm import serve; serve(%r, %r, %r)"
            % (import_path(), path, sig, idle))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")}
    null = os.devnull
    try:
        os.posix_spawn(sys.executable, [sys.executable, "-c", code], env, setsid=True,
                       file_actions=[(os.POSIX_SPAWN_OPEN, 0, null, os.O_RDONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 2, null, os.O_WRONLY, 0)])
    except OSError:
        pass                # no helper: searches run in their own process, as before


def status():
    """{"state": off | not running | running | unusable, …} for `recall doctor`."""
    setting = _setting()
    if sys.platform != "linux":
        return {"state": "unusable", "why": "the helper runs on Linux only"}
    if setting is None:
        return {"state": "off", "why": "RECALL_HELPER=off"}
    if isinstance(setting, str):
        return {"state": "unusable", "why": setting}
    path = socket_path(signature())
    if path is None:
        folder = run_dir_path()
        why = (f"{folder} is not a folder of this user alone: remove it, or chmod 700 it" if run_dir() is None
               else f"the socket's path in {folder} is too long: set XDG_RUNTIME_DIR to a shorter folder")
        return {"state": "unusable", "why": why}
    import _socket
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(_CONNECT_WAIT)
        sock.connect(path)
        sock.sendall(b"%d\n" % len(STATUS) + STATUS)
        words = _line(sock, bytearray()).decode().split()
    except OSError:
        return {"state": "not running", "socket": path}
    finally:
        sock.close()
    info = dict(zip(words[::2], words[1::2]))
    return {"state": "running", "socket": path, "pid": int(info.get("pid", 0)),
            "searches": int(info.get("searches", 0)), "idle_exit": float(info.get("idle", 0))}
