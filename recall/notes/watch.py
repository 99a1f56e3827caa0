"""Keeping the index in step with the sources while recall runs long (`recall mcp`, `index --watch`),
by watchdog's file events or a stat poll; what stops a round is said and retried, never the end."""
from __future__ import annotations

import contextlib
import os
import threading
import time

from .. import db
from ..errors import RecallError
from .walk import SKIP_DIRS, state_inside, state_paths

QUIET_S = 1.0             # a changed file must be still this long before its chunks are embedded
POLL_S = 1.0              # the stat poll: one round of the sources at most this often …
POLL_SHARE = 0.04         # … and its CPU time at most this share of one core
SLICE_S = 0.005           # the most one stretch of the poll runs before it pauses for searches
PAUSE_S = 0.02            # the pause after each stretch
RETRY_S = 0.5             # after a failed round, wait this long, doubled after each failure …
RETRY_MAX_S = 4.0         # … up to this: following resumes soon after the cause goes away


def method() -> str:
    """How a long-lived recall finds changed notes here: 'watchdog', 'poll' or 'off' (RECALL_WATCH)."""
    asked = os.environ.get("RECALL_WATCH", "auto").strip().lower() or "auto"
    if asked in ("off", "poll"):
        return asked
    if asked != "auto":
        raise RecallError(f"RECALL_WATCH={asked!r} is not one of auto, poll, off", "unset it or pick one")
    try:
        import watchdog.observers  # noqa: F401
    except ImportError:
        return "poll"
    return "watchdog"


class _Poll:
    """Changes by stat: each round walks the sources (the folders a source walk enters) in stretches of
    SLICE_S and compares sizes and mtimes with the round before."""

    def __init__(self, roots: list, ignore: set, stop: threading.Event):
        self.roots, self.ignore = roots, ignore
        self.last = self._snapshot(stop)        # taken before the first index pass: nothing slips between

    def _snapshot(self, stop: threading.Event) -> dict | None:
        seen: dict = {}
        stretch, folders = time.monotonic(), list(self.roots)
        while folders:
            folder = folders.pop()
            try:
                with os.scandir(folder) as it:
                    for e in it:
                        if e.is_dir(follow_symlinks=False):
                            if e.name not in SKIP_DIRS and not e.name.startswith(".") and e.path not in self.ignore:
                                folders.append(e.path)
                        elif e.is_file(follow_symlinks=False) and e.path not in self.ignore:
                            st = e.stat(follow_symlinks=False)
                            seen[e.path] = (st.st_size, st.st_mtime_ns)
            except OSError:
                seen[folder] = None
            if time.monotonic() - stretch > SLICE_S:
                if stop.wait(PAUSE_S):           # a search in this process goes first
                    return None
                stretch = time.monotonic()
        return seen

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        """True when something changed since the round before."""
        started, cpu = time.monotonic(), time.thread_time()
        now = self._snapshot(stop)
        if now is None:
            return False
        if now != self.last:          # a change is acted on now: the waits are between quiet rounds
            self.last = now
            return True
        # a large tree is walked less often: this round's CPU time stays a small share of a core
        work = time.thread_time() - cpu
        stop.wait(max(0.0, max(min(timeout, POLL_S), work / POLL_SHARE) - (time.monotonic() - started)))
        return False

    def close(self) -> None:
        pass


class _Events:
    """Changes by the OS's file events (inotify, FSEvents, ReadDirectoryChangesW) through watchdog."""

    def __init__(self, roots: list, ignore: set):
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
        self.changed = changed = threading.Event()

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                paths = {getattr(event, "src_path", ""), getattr(event, "dest_path", "")} - {""}
                if event.event_type not in ("opened", "closed_no_write") and not all(
                        p in ignore or os.path.dirname(p) in ignore for p in paths):
                    changed.set()
        self.observer = Observer()
        for root in roots:
            if os.path.isdir(root):
                self.observer.schedule(Handler(), root, recursive=True)
        self.observer.daemon = True
        self.observer.start()

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            if self.changed.wait(min(0.1, timeout)):
                self.changed.clear()
                return True
        return False

    def close(self) -> None:
        self.observer.stop()
        self.observer.join(1.0)


def _identity(path, *, edits: bool = False) -> tuple | None:
    """Which file or folder `path` is now: (device, inode), with `edits` its
    size and mtime too; None when nothing is there. A DB file replaced, a
    folder moved and made again, a config edited: each changes it."""
    try:
        st = os.stat(path)
    except (OSError, TypeError):        # TypeError: no path (no config file was found)
        return None
    return (st.st_dev, st.st_ino) + ((st.st_size, st.st_mtime_ns) if edits else ())


def _why(exc) -> str:
    """A failed round in one line: a storage fault as `recall` says it,
    anything else by its type."""
    err = db.explain(exc)
    return str(err) if err is not None else f"{type(exc).__name__}: {exc}"


class Watcher:
    """Follows the sources in a thread (`start`) or the foreground (`run`):
    each change indexed for keyword search at once, embedded once nothing
    changed for QUIET_S; `report(kind, result)` hears each pass ('index',
    'embed') and each new trouble ('trouble', its line).

    `cfg` is the config as loaded (None: it could not be); `reload()` loads
    it again until it loads, and when its file changes. A failed round (the
    DB locked, full, damaged; the config wrong) is said by `trouble()` and
    tried again after `retry_s`, doubled up to `retry_max_s`."""

    def __init__(self, cfg, *, redactor, load_values=None,
                 report=lambda kind, result: None, reload=None,
                 retry_s: float = RETRY_S, retry_max_s: float = RETRY_MAX_S,
                 busy_s: float | None = None, catch_up=None):
        self.cfg, self.reload, self.report = cfg, reload, report
        self.redactor, self.load_values = redactor, load_values
        self.catch_up = catch_up        # run_index's: text indexed before a value was written
        self.retry_s, self.retry_max_s = retry_s, retry_max_s
        self.busy_s = busy_s            # None: the DB's own busy wait
        self.how = method()
        self.stop_event = threading.Event()
        self.thread, self.passes = None, 0
        self.settled = threading.Event()    # the first pass ended, or failed (trouble() says why)
        self.indexing = False               # a pass is writing the index now
        self._remade = False                # its DB file was made again: the next pass refills it
        self._why: str | None = None
        self._con = self._detector = None
        self._opened_on: dict = {}      # the config, DB, folders as opened
        self._dirty, self._unembedded = True, False
        self._last_change = time.monotonic()

    def trouble(self) -> str | None:
        """Why the sources are not followed right now (every search says
        it), or None while they are."""
        return self._why

    def due(self) -> bool:
        """Whether the index is being made again: its DB file removed or replaced since it was opened,
        and the first pass on the new one still to end (a search waits for it, as for the first pass;
        an everyday pass, a note saved, is not waited for)."""
        cfg = self.cfg
        if self.thread is None or cfg is None:
            return False
        if "db" in self._opened_on and _identity(cfg.db_path) != self._opened_on["db"]:
            return True     # (its old connection may fail meanwhile: the retry opens the new file)
        return self._remade

    def start(self) -> Watcher:
        if self.how != "off" and (self.reload is not None or self.cfg.sources):
            self.thread = threading.Thread(target=self._guarded, name="recall-watch", daemon=True)
            self.thread.start()
        else:
            self.settled.set()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(5.0)

    def _guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:    # the server answers from the index it has
            self._why = f"stopped following the sources ({_why(exc)})"
        finally:
            self.settled.set()

    def run(self) -> None:
        """Index what changed since the last run, then follow the sources
        until `stop()`; a failed round is said and tried again."""
        delay = self.retry_s
        try:
            while not self.stop_event.is_set():
                try:
                    self._round()
                    delay = self.retry_s
                except Exception as exc:    # said, then retried: a bug's too
                    why = _why(exc)
                    if why != self._why:
                        self._why = why
                        self.report("trouble", why)
                    self.settled.set()
                    self._close_db()        # reopened: a file replaced or freed alike
                    if self.stop_event.wait(delay):
                        break
                    delay = min(delay * 2, self.retry_max_s)
        finally:
            self._close_db()
            if self._detector is not None:
                self._detector.close()

    def _round(self) -> None:
        """What changed under it reopened, a pass when a note changed, then
        a wait for the next change."""
        from .index import embed_pending, run_index
        cfg = self._refresh()
        if self._dirty:
            self.indexing = True
            try:
                rep = run_index(self._con, cfg, embed=False, redactor=self.redactor,
                                load_values=self.load_values, notify=self._waiting,
                                catch_up=self.catch_up)
            finally:
                self.indexing = False
            self._dirty, self._why, self._remade = False, None, False
            self.passes += 1
            self.settled.set()
            if self.passes == 1:     # the redactor's maskers now, not at the first save
                with contextlib.suppress(RecallError):   # a closed vault: the save says so itself
                    self.redactor(self._con, cfg)("")
            self._unembedded = cfg.embedding.provider != "none"
            self.report("index", rep)
        if self._unembedded and time.monotonic() - self._last_change >= QUIET_S:
            self._unembedded = False
            try:      # as run_index's own: each text claimed, never billed twice
                self.report("embed", embed_pending(
                    self._con, cfg, redactor=self.redactor, load_values=self.load_values))
            except (RecallError, OSError):
                pass            # the next change tries again
        wait = QUIET_S / 4 if self._unembedded else POLL_S
        if self._detector.wait(self.stop_event, wait):
            self._dirty, self._last_change = True, time.monotonic()

    def _waiting(self, line: str) -> None:
        self._why = line      # "waiting for another index run (pid …)"

    def _refresh(self):
        """The config as it is now, reloaded when it was not loaded or its
        file changed; the DB reopened when its file is another one; the
        detector made again when a source folder is (moved, made again)."""
        seen, cfg = self._opened_on, self.cfg
        stamp = None if cfg is None else _identity(cfg.path, edits=True)
        if cfg is None or (self.reload is not None
                           and stamp != seen.setdefault("config", stamp)):
            self._close_db()
            self.cfg = None           # until it loads: retried as any failure
            self.cfg = cfg = self.reload()
            seen.clear()
            seen["config"] = _identity(cfg.path, edits=True)
        cfg.require_sources()
        if self._con is not None and _identity(cfg.db_path) != seen["db"]:
            self._close_db()
        if self._con is None:
            before = seen.get("db")
            self._con = db.connect(cfg.db_path)
            if self.busy_s is not None:
                self._con.execute(f"PRAGMA busy_timeout={int(self.busy_s * 1000)}")
            seen["db"] = _identity(cfg.db_path)
            self._remade = self._remade or (before is not None and seen["db"] != before)
        secrets = [_identity(p, edits=True) for p in cfg.secrets]
        if secrets != seen.setdefault("secrets", secrets):     # a value written: a pass redacts it
            seen["secrets"], self._dirty = secrets, True
        roots = [str(s.path) for s in cfg.sources]
        folders = [_identity(r) for r in roots]
        if self._detector is None or folders != seen.get("roots"):
            if self._detector is not None:
                self._detector.close()
            seen["roots"] = folders
            self._detector, self._dirty = self._detect(cfg, roots), True
        return cfg

    def _detect(self, cfg, roots: list):
        """watchdog's events on `roots`, or the stat poll (also when the OS
        refuses more watches)."""
        ignore = {str(p) for p in (*cfg.secrets, *cfg.inventory)}
        ignore |= {f"{cfg.db_path}{end}" for end in ("", "-wal", "-shm", "-journal")}
        state = state_paths(cfg)        # recall's own folder inside a source: its writes are no change
        ignore |= {os.path.join(root, rel[:-1]) for root in roots for rel in state_inside(root, state) if rel}
        if self.how == "watchdog":
            try:
                return _Events(roots, ignore)
            except OSError:       # inotify's watch limit: the poll still follows
                pass
        return _Poll(roots, ignore, self.stop_event)

    def _close_db(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con, self._dirty = None, True
