"""The one SQLite database: driver (sqlite3/sqlean + sqlite-vec), connect, migrations, faults in one line."""
from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
import time
from pathlib import Path

from ..errors import RecallError
from . import texts
from .lock import index_lock, vault_lock  # noqa: F401  (the package's surface)
from .migrations import MIGRATIONS
from .texts import UNREADABLE
from .texts import register as _functions

__all__ = ["connect", "transaction", "get_meta", "set_meta", "waiting_at_most", "in_batches", "is_sqlite_error", "rollback", "explain",
           "schema_version", "index_lock", "vault_lock", "has_vec", "load_vec", "sqlite_module", "vec_extension_path",
           "migrations", "repair", "lock", "space", "pids", "texts"]
BUSY_TIMEOUT_MS = 30_000
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)      # absent on Windows, where links are rare
OPENED: list = []          # DB paths this process opened, so a later storage fault can name its file
# The SQLite library this process opened each DB file with. Two copies of SQLite in one process (stdlib
# sqlite3 and sqlean) each think their own connections are all there are: closing the last of one
# drops the POSIX locks the other holds and may delete the WAL under it (recall mcp's watcher beside
# a semantic search). The first to open a file decides; a later wish for vectors then scans them
# without sqlite-vec.
_MODULE_OF: dict = {}


class BrokenDatabase(RecallError):
    """The DB file is damaged or not one this recall can use; `recall index --full` rebuilds it."""

    def __init__(self, path, why: str, first: str = "it is a cache: "):
        super().__init__(f"{path} is {why}",
                         f"{first}run 'recall index --full': it moves the file aside "
                         "(recall.db.broken-<time>) and rebuilds it, keeping the vault key")
        self.path, self.why = str(path), why


def is_sqlite_error(exc) -> bool:
    """sqlite3's errors, and those of the other SQLite modules recall may open the DB with (sqlean)."""
    return isinstance(exc, sqlite3.Error) or any(
        cls.__name__ == "Error" and ("sqlite" in cls.__module__ or "sqlean" in cls.__module__)
        for cls in type(exc).__mro__)

# -- storage faults in one line each ------------------------------------------------------------

_OS_FAULTS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
# A path the person named that no file can have (too long, through a file, a loop of links, a device
# gone): said as that path, whoever opened it.
_PATH_FAULTS = {errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP, errno.ENXIO, errno.ENODEV}


def _kind(exc) -> str:
    """full | readonly | cantopen | damaged | ioerr | locked | '' for an SQLite or OS error."""
    if isinstance(exc, OSError):
        return {errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EROFS: "readonly",
                errno.EIO: "ioerr"}.get(exc.errno, "cantopen")
    name, text = getattr(exc, "sqlite_errorname", "") or "", str(exc).lower()
    for kind, names, words in (
            ("full", ("SQLITE_FULL",), ("database or disk is full",)),
            ("readonly", ("SQLITE_READONLY",), ("readonly database", "read-only")),
            ("cantopen", ("SQLITE_CANTOPEN",), ("unable to open database",)),
            ("damaged", ("SQLITE_CORRUPT", "SQLITE_NOTADB"),
             ("malformed", "not a database", "corrupt", "no such table", "no such column", UNREADABLE)),
            ("ioerr", ("SQLITE_IOERR",), ("disk i/o error",)),
            ("locked", ("SQLITE_BUSY", "SQLITE_LOCKED"), ("database is locked",))):
        if name.startswith(names) or any(w in text for w in words):
            return kind
    return ""


def _raised_by_a_face(exc) -> bool:
    """An OSError raised in the faces' own code (recall.cli's modules, mcp_server): they open no file
    of their own (they parse and format), so it is their output that could not be written."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    name = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    return name == "recall.mcp_server" or name == "recall.cli" or name.startswith("recall.cli.")


def _room_beside_the_db(exc) -> bool:
    """A full disk said by a write that names no file (a child's output copied to a full stdout),
    while the DB's own disk has room: it was not the DB's disk."""
    if exc.errno != errno.ENOSPC or not OPENED:
        return False
    import shutil
    try:
        return shutil.disk_usage(Path(OPENED[-1]).parent).free > 1 << 20
    except OSError:
        return False


def explain(exc, path=None):
    """The RecallError a user should see for a storage fault (a full disk, a read-only or damaged
    DB, a folder recall may not use); None when `exc` is not one (a bug keeps its traceback)."""
    if isinstance(exc, RecallError):
        return exc
    if isinstance(exc, OSError):
        if exc.filename is None and path is None and (_raised_by_a_face(exc) or _room_beside_the_db(exc)):
            return RecallError(f"could not write the output ({exc.strerror})",
                               "send it where there is room (recall … > out.txt, or | less); "
                               "nothing in the index changed")
        if exc.errno in _PATH_FAULTS and exc.filename is not None:
            return RecallError(f"cannot use {exc.filename} ({exc.strerror})",
                               "check the path: a shorter one, through folders that exist")
        if exc.errno not in _OS_FAULTS:
            return None
        home = Path(path or (OPENED[-1] if OPENED else "")).parent
        if exc.errno in (errno.EACCES, errno.EPERM) and exc.filename and path is None \
                and home not in Path(os.path.abspath(exc.filename)).parents:   # not recall's own files
            return RecallError(f"cannot use {exc.filename} ({exc.strerror})", "check its permissions (ls -l)")
        path = exc.filename or path
    elif not is_sqlite_error(exc):
        return None
    import shlex
    path = Path(path or (OPENED[-1] if OPENED else "the index"))
    folder, what = path.parent, getattr(exc, "strerror", None) or str(exc)
    kind = _kind(exc)
    if kind == "damaged":
        if texts.swallowed_interrupt(what):
            raise KeyboardInterrupt      # the person stopped recall; the file is sound
        return BrokenDatabase(path, "damaged (a note's stored text cannot be read)" if UNREADABLE in what
                              else f"damaged ({what})")
    said = {
        "full": (f"the disk holding {path} is full ({what})",
                 "free some space and run it again; what was committed before is kept"),
        "readonly": (f"{path} is read-only ({what})",
                     f"make it and {folder} writable by you (chmod u+w), or set RECALL_HOME to a "
                     "writable folder"),
        "cantopen": (f"cannot open {path} ({what})",
                     f"make {folder} and the files in it yours, readable and writable (ls -l {shlex.quote(str(folder))}; "
                     f"chmod 700 {shlex.quote(str(folder))}), or set RECALL_HOME to another folder"),
        "ioerr": (f"a disk I/O error on {path} ({what})",
                  "check the disk; if the index is damaged, 'recall index --full' rebuilds it"),
        "locked": (f"{path} stayed locked by another process for {BUSY_TIMEOUT_MS // 1000} s",
                   "let the other recall finish (an index or a sync?), then run it again"),
    }.get(kind)
    return RecallError(*said) if said else None


def refuse_foreign(path) -> None:
    """A state file (the DB, its -wal and -shm, the lock) that is a symbolic link or not a
    regular file is refused in one line: recall writes and chmods only files of its own."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        return
    from shlex import quote  # the hint's command, pasted, acts on this path whatever it holds
    if stat.S_ISLNK(st.st_mode):
        raise RecallError(f"{path} is a symbolic link (to {os.readlink(path)}); recall writes only its own "
                          "files, so nothing was changed", f"remove the link (rm {quote(str(path))}) and run it "
                          "again, or set RECALL_HOME to another folder")
    what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
    raise RecallError(f"{path} is {what}, where recall keeps a file of its own; nothing was changed",
                      f"move it out of the way (mv {quote(str(path))} {quote(f'{path}.old')}) and run it again")


def _secure_file(path: Path) -> None:
    """Create the DB file 0600 before SQLite opens it, never through a link; an existing one is
    checked and chmodded by its path. Never opened here once it exists: closing any descriptor of
    a file drops every POSIX lock this process holds on it, the locks of SQLite's other connections
    (the MCP server's watcher, verify's threads) too, and another writer could then corrupt it."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600))
        return
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        refuse_foreign(path)
    if st.st_mode & 0o077:
        os.chmod(path, 0o600)


def in_batches(values, size: int = 500):
    """(slice, "?,?,…") of `values`, `size` at a time: an `IN (…)` each, under SQLite's variable limit."""
    values = list(values)
    for i in range(0, len(values), size):
        part = values[i:i + size]
        yield part, ",".join("?" * len(part))


# -- the driver: which SQLite module, and sqlite-vec loaded into it -------------------------------

def vec_extension_path():
    """sqlite-vec's loadable file, found without importing the package (it imports numpy: ~0.1 s)."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("sqlite_vec")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "vec0")


def sqlite_module():
    """The module to open the DB with when vectors are wanted: stdlib sqlite3 if it can load
    extensions and sqlite-vec is installed, else the drop-in `sqlean` (sqlean.py), else sqlite3."""
    if vec_extension_path() is None or hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        import sqlean
    except ImportError:
        return sqlite3
    return sqlean


def load_vec(con) -> bool:
    """Load sqlite-vec into `con`; False when this connection or machine cannot."""
    path = vec_extension_path()
    if path is None or not hasattr(con, "enable_load_extension"):
        return False
    try:
        con.enable_load_extension(True)
        con.load_extension(path)
        con.enable_load_extension(False)
    except Exception as exc:        # SQLite's refusal means "not loadable here": the caller falls back
        if not is_sqlite_error(exc):
            raise
        return False
    return has_vec(con)


def has_vec(con) -> bool:
    try:
        con.execute("SELECT vec_version()").fetchone()
        return True
    except Exception as exc:        # no such function: sqlite-vec is not loaded on `con`
        if not is_sqlite_error(exc):
            raise
        return False


def look(path, timeout: float = BUSY_TIMEOUT_MS / 1000) -> sqlite3.Connection:
    """The DB at `path` opened to be looked at only: read-only, never created nor migrated (doctor's
    checks, the quick check, a file moved aside); sqlite3's error when it cannot be. Stdlib sqlite3:
    look before this process connects to the file, not beside a connection of another library."""
    con = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True, timeout=timeout)
    _functions(con)
    return con


def connect(path, *, readonly: bool = False, vectors: bool = False) -> sqlite3.Connection:
    """Open (creating and migrating if needed) the DB at `path`. With `vectors`, open it through
    an SQLite module that can load sqlite-vec (stdlib, else sqlean) and load it when installed;
    one process should open a DB file through one module only (POSIX locks are per library)."""
    path = Path(path)
    try:
        if readonly and not path.exists():
            from .lock import index_running
            running = index_running(path)
            raise (RecallError(f"no index at {path} yet: an index run (pid {running}) is making it",
                               "search again when it ends") if running else
                   RecallError(f"no index at {path}", "run 'recall index' first"))
        if not readonly:       # the folders above made 0700 too (mkdir -p gives them 0755)
            for folder in reversed([p for p in path.parent.parents if not p.exists()]):
                folder.mkdir(mode=0o700, exist_ok=True)
            path.parent.mkdir(exist_ok=True, mode=0o700)
        for side in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):   # SQLite writes them for a reader too
            refuse_foreign(side)
        if not readonly:
            _secure_file(path)
    except OSError as exc:          # a home folder recall may not use, a full or read-only disk
        raise (explain(exc, path) or RecallError(
            f"cannot make {path} ({exc.strerror}: {exc.filename})",
            "RECALL_HOME (or 'home:' in the config) must name a folder you can create and write")) from None
    OPENED.append(path)
    module = _MODULE_OF.setdefault(os.path.realpath(path), sqlite_module() if vectors else sqlite3)
    try:
        con = module.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                             check_same_thread=False)
        con.row_factory = module.Row
        _functions(con)
        if vectors:
            load_vec(con)
        con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        con.execute("PRAGMA foreign_keys=ON")
        con.execute("PRAGMA secure_delete=ON")      # deleted text is zeroed, not left in free pages
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute("PRAGMA journal_size_limit=4194304")   # a checkpointed WAL shrinks back to 4 MB
        _use_wal(con, module)
        migrate(con, path)
    except (sqlite3.Error, module.Error) as exc:
        raise (explain(exc, path) or RecallError(f"cannot open the database {path}: {exc}",
                                                 "it is a cache: run 'recall index --full'")) from None
    return con


def _use_wal(con, module) -> None:
    """Switch a new file to WAL. When several processes open a new file at once, SQLite can
    answer the switch with "database is locked" without waiting, so wait here instead."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while con.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            con.execute("PRAGMA journal_mode=WAL").fetchone()
            return              # switched, or a file system without WAL keeps the old journal
        except (sqlite3.OperationalError, module.OperationalError) as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def schema_version(con, path="the database") -> int:
    """The migrations applied to this DB (0: a new file); a DB of another program, or of a newer
    recall, is a BrokenDatabase rather than something to write into."""
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "migrations" not in names:
        if names:
            raise BrokenDatabase(path, "not a recall index (its tables are another program's)")
        return 0
    done = con.execute("SELECT COALESCE(MAX(version), 0) FROM migrations").fetchone()[0]
    if done > len(MIGRATIONS):
        raise BrokenDatabase(path, f"from a newer recall (schema {done}; this one knows {len(MIGRATIONS)})",
                             "upgrade recall to use it; or, to use this recall, ")
    return done


def migrate(con: sqlite3.Connection, path="the database") -> int:
    """Apply the pending migrations in one transaction (a new DB's WAL then holds each page once,
    not once a migration); returns the schema version."""
    if schema_version(con, path) == len(MIGRATIONS):
        return len(MIGRATIONS)
    with transaction(con):
        con.execute("CREATE TABLE IF NOT EXISTS migrations(version INTEGER PRIMARY KEY, applied_at REAL)")
        done = schema_version(con, path)        # another process may have migrated while we waited
        for version, sql in enumerate(MIGRATIONS[done:], start=done + 1):
            try:
                if callable(sql):
                    sql(con)
                else:
                    for statement in _statements(sql):
                        con.execute(statement)
            except Exception as exc:    # its tables are ahead of its record: rebuilt, never patched
                if not is_sqlite_error(exc):
                    raise
                if _kind(exc) not in ("", "damaged"):     # a full disk, a read-only file: said as such
                    raise explain(exc, path) from None
                raise BrokenDatabase(path, f"not what its migration record says (schema {version - 1}, "
                                           f"but migration {version} finds {exc})") from None
            con.execute("INSERT INTO migrations VALUES (?, julianday('now'))", (version,))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return len(MIGRATIONS)


def _statements(sql: str):
    """Split a migration script at top-level semicolons (trigger bodies contain their own)."""
    buf = ""
    for line in sql.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                yield buf.strip()
            buf = ""
    if buf.strip():
        yield buf.strip()


@contextlib.contextmanager
def transaction(con):
    """`with transaction(con):` — BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any exception."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield con
    except BaseException:
        rollback(con)
        raise
    con.execute("COMMIT")


def rollback(con) -> None:
    """ROLLBACK, quietly when SQLite has already rolled back (a full disk does): the first error
    is the one worth telling."""
    try:
        con.execute("ROLLBACK")
    except Exception as exc:                # sqlite3's or sqlean's OperationalError
        if "no transaction is active" not in str(exc):
            raise


def get_meta(con, key: str, default=None):
    row = con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else default


def set_meta(con, key: str, value) -> None:
    con.execute("INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, str(value)))


CACHE_WAIT_MS = 100     # how long a write that is only a cache waits for another writer before it skips


@contextlib.contextmanager
def waiting_at_most(con, ms: int = CACHE_WAIT_MS):
    """`con`'s busy wait at most `ms` inside: a write that only saves work (a cache, tidying) skips
    when another writer holds the DB, rather than hold a search for the whole busy timeout."""
    wait = con.execute("PRAGMA busy_timeout").fetchone()[0]
    con.execute(f"PRAGMA busy_timeout={min(wait, ms)}")
    try:
        yield
    finally:
        con.execute(f"PRAGMA busy_timeout={wait}")
