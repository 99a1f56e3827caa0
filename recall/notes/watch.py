"""Keeping the index in step with the sources while recall runs long (`recall mcp`, `index --watch`),
by watchdog's file events or a stat poll."""
from __future__ import annotations

import os
import threading
import time

from .. import db
from ..errors import RecallError
from .walk import SKIP_DIRS, state_inside, state_paths

QUIET_S = 1.0             # a changed file must be still this long before its chunks are embedded
POLL_S = 1.0              # the stat poll: one round of the sources at most this often …
POLL_SHARE = 0.2          # … and its stat work at most this share of the time between rounds
SLICE_S = 0.005           # the most one stretch of the poll runs before it pauses for searches
PAUSE_S = 0.02            # the pause after each stretch
RETRY_S = 5.0             # after a failed pass (a locked or damaged DB), wait before the next


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
        self.roots, self.ignore, self.work = roots, ignore, 0.0
        self.last = self._snapshot(stop)        # taken before the first index pass: nothing slips between

    def _snapshot(self, stop: threading.Event) -> dict | None:
        seen: dict = {}
        stretch, self.work, folders = time.monotonic(), 0.0, list(self.roots)
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
                self.work += time.monotonic() - stretch
                if stop.wait(PAUSE_S):           # a search in this process goes first
                    return None
                stretch = time.monotonic()
        self.work += time.monotonic() - stretch
        return seen

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        """True when something changed since the round before."""
        started = time.monotonic()
        now = self._snapshot(stop)
        if now is None:
            return False
        changed = now != self.last
        self.last = now
        # a large tree is walked less often: its stat work stays a small share of the time
        stop.wait(max(0.0, max(min(timeout, POLL_S), self.work / POLL_SHARE) - (time.monotonic() - started)))
        return changed

    def close(self) -> None:
        pass


class _Events:
    """Changes by the OS's file events (inotify, FSEvents, ReadDirectoryChangesW) through watchdog."""

    def __init__(self, roots: list, ignore: set):
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
        self.changed, self.ignore = threading.Event(), ignore
        outer = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                paths = {getattr(event, "src_path", ""), getattr(event, "dest_path", "")} - {""}
                if event.event_type not in ("opened", "closed_no_write") and not all(
                        p in outer.ignore or os.path.dirname(p) in outer.ignore for p in paths):
                    outer.changed.set()
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


class Watcher:
    """Follows `cfg`'s sources in a thread (`start`) or the foreground (`run`): each change indexed for
    keyword search at once, embedded once nothing changed for QUIET_S; `report(kind, result)` hears each
    pass ('index' or 'embed')."""

    def __init__(self, cfg, *, redactor, load_values=None, report=lambda kind, result: None):
        self.cfg, self.redactor, self.load_values, self.report = cfg, redactor, load_values, report
        self.how = method()
        self.stop_event, self.thread, self.passes = threading.Event(), None, 0

    def start(self) -> Watcher:
        if self.how != "off" and self.cfg.sources:
            self.thread = threading.Thread(target=self._guarded, name="recall-watch", daemon=True)
            self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout)

    def _guarded(self) -> None:
        try:
            self.run()
        except Exception:        # a long-lived server keeps answering from the index it has
            pass

    def run(self) -> None:
        """Index what changed since the last run, then follow the sources until `stop()`."""
        from .index import embed_pending, run_index
        cfg = self.cfg
        con = db.connect(cfg.db_path)
        roots = [str(s.path) for s in cfg.sources]
        ignore = {str(p) for p in (*cfg.secrets, *cfg.inventory)}
        ignore |= {str(cfg.db_path) + end for end in ("", "-wal", "-shm", "-journal")}
        state = state_paths(cfg)        # recall's own folder inside a source: its writes are no change
        ignore |= {os.path.join(root, rel[:-1]) for root in roots for rel in state_inside(root, state) if rel}
        detector = _Events(roots, ignore) if self.how == "watchdog" else _Poll(roots, ignore, self.stop_event)
        paid = cfg.embedding.provider != "none"
        dirty, unembedded, last_change = True, False, time.monotonic()
        try:
            while not self.stop_event.is_set():
                if dirty:
                    dirty = False
                    try:
                        rep = run_index(con, cfg, embed=False, redactor=self.redactor,
                                        load_values=self.load_values)
                        self.passes += 1
                        if self.passes == 1:       # the redactor's maskers now, not at the first save
                            self.redactor(con, cfg)("")
                        unembedded = paid
                        self.report("index", rep)
                    except (RecallError, OSError):
                        dirty = True
                        if self.stop_event.wait(RETRY_S):
                            break
                        continue
                if unembedded and time.monotonic() - last_change >= QUIET_S:
                    unembedded = False
                    try:         # as run_index's own pass: each text claimed in the ledger, never billed twice
                        self.report("embed", embed_pending(con, cfg, redactor=self.redactor,
                                                           load_values=self.load_values))
                    except (RecallError, OSError):
                        pass            # the next change tries again
                if detector.wait(self.stop_event, QUIET_S / 4 if unembedded else POLL_S):
                    dirty, last_change = True, time.monotonic()
        finally:
            detector.close()
            con.close()
