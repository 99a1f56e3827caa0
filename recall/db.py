"""The one SQLite database: its driver (sqlite3/sqlean + sqlite-vec), connect (WAL, busy timeout, 0600),
migrations, its storage faults said in one line (explain), helpers."""
from __future__ import annotations

import errno
import os
import sqlite3
import time
from pathlib import Path

from .errors import RecallError

BUSY_TIMEOUT_MS = 30_000
OPENED: list = []          # DB paths this process opened, so a later storage fault can name its file


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
             ("malformed", "not a database", "corrupt", "no such table", "no such column")),
            ("ioerr", ("SQLITE_IOERR",), ("disk i/o error",)),
            ("locked", ("SQLITE_BUSY", "SQLITE_LOCKED"), ("database is locked",))):
        if name.startswith(names) or any(w in text for w in words):
            return kind
    return ""


def explain(exc, path=None):
    """The RecallError a user should see for a storage fault (a full disk, a read-only or damaged
    DB, a folder recall may not use); None when `exc` is not one (a bug keeps its traceback)."""
    if isinstance(exc, RecallError):
        return exc
    if isinstance(exc, OSError):
        if exc.errno not in _OS_FAULTS:
            return None
        home = Path(path or (OPENED[-1] if OPENED else "")).parent
        if exc.errno in (errno.EACCES, errno.EPERM) and exc.filename and path is None \
                and home not in Path(os.path.abspath(exc.filename)).parents:   # not recall's own files
            return RecallError(f"cannot use {exc.filename} ({exc.strerror})", "check its permissions (ls -l)")
        path = exc.filename or path
    elif not is_sqlite_error(exc):
        return None
    path = Path(path or (OPENED[-1] if OPENED else "the index"))
    folder, what = path.parent, getattr(exc, "strerror", None) or str(exc)
    kind = _kind(exc)
    if kind == "full":
        return RecallError(f"the disk holding {path} is full ({what})",
                           "free some space and run it again; what was committed before is kept")
    if kind == "readonly":
        return RecallError(f"{path} is read-only ({what})",
                           f"make it and {folder} writable by you (chmod u+w), or set RECALL_HOME "
                           "to a writable folder")
    if kind == "cantopen":
        return RecallError(f"cannot open {path} ({what})",
                           f"make {folder} and the files in it yours, readable and writable (ls -l "
                           f"{folder}; chmod 700 {folder}), or set RECALL_HOME to another folder")
    if kind == "damaged":
        return BrokenDatabase(path, f"damaged ({what})")
    if kind == "ioerr":
        return RecallError(f"a disk I/O error on {path} ({what})",
                           "check the disk; if the index is damaged, 'recall index --full' rebuilds it")
    if kind == "locked":
        return RecallError(f"{path} stayed locked by another process for {BUSY_TIMEOUT_MS // 1000} s",
                           "let the other recall finish (an index or a sync?), then run it again")
    return None


# Each entry is one migration, applied in order and recorded in `migrations`; never edit a landed one.
MIGRATIONS: list = [
    """
    CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
    CREATE TABLE files(
        id INTEGER PRIMARY KEY,
        source TEXT NOT NULL,
        relpath TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        hash TEXT NOT NULL,
        date TEXT,
        title TEXT,
        UNIQUE(source, relpath)
    );
    CREATE TABLE chunks(
        id INTEGER PRIMARY KEY,
        file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
        ord INTEGER NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        breadcrumb TEXT NOT NULL,
        body TEXT NOT NULL,
        hash TEXT NOT NULL
    );
    CREATE INDEX chunks_file ON chunks(file_id);
    CREATE INDEX chunks_hash ON chunks(hash);
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        breadcrumb, body, content='chunks', content_rowid='id',
        tokenize="unicode61 remove_diacritics 2");
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, breadcrumb, body) VALUES (new.id, new.breadcrumb, new.body);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, breadcrumb, body)
        VALUES ('delete', old.id, old.breadcrumb, old.body);
        DELETE FROM idents WHERE chunk_id = old.id;
    END;
    -- identifiers exactly as written (lower-cased), so INC-10963 is one term, not two
    CREATE TABLE idents(term TEXT NOT NULL, chunk_id INTEGER NOT NULL, hits INTEGER NOT NULL,
                        PRIMARY KEY(term, chunk_id)) WITHOUT ROWID;
    CREATE INDEX idents_chunk ON idents(chunk_id);
    """,
    """
    CREATE TABLE secrets(
        id TEXT PRIMARY KEY,
        meta TEXT NOT NULL,            -- JSON: service, environment, kind, username, url, notes, use
        tags TEXT NOT NULL,            -- JSON list
        env TEXT NOT NULL,
        inject TEXT NOT NULL,
        check_cmd TEXT NOT NULL,
        variables TEXT NOT NULL,       -- JSON: variable name -> field ("" for a single value)
        file TEXT NOT NULL,
        line INTEGER NOT NULL,
        nonce BLOB NOT NULL,
        ciphertext BLOB NOT NULL,      -- AES-256-GCM of the JSON values, the id as associated data
        synced_at REAL NOT NULL
    );
    CREATE VIRTUAL TABLE secrets_fts USING fts5(
        sid UNINDEXED, id, service, environment, kind, username, url, tags, notes, use,
        tokenize="unicode61 remove_diacritics 2");
    CREATE TABLE access_log(
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        caller TEXT NOT NULL,          -- cli | mcp
        parent TEXT NOT NULL,          -- the parent process name
        verb TEXT NOT NULL,
        target TEXT NOT NULL,          -- secret or inventory id
        argv TEXT NOT NULL,            -- masked
        verdict TEXT NOT NULL,
        exit_code INTEGER
    );
    CREATE TABLE verify_results(
        target TEXT PRIMARY KEY,       -- 'secret:ID' or 'entry:ID'
        status TEXT NOT NULL,          -- ok | stale | unreachable | missing | skipped | error
        reason TEXT NOT NULL,
        command TEXT NOT NULL,
        at REAL NOT NULL
    );
    """,
    """
    -- one row per embedding fingerprint: what a vector means (provider, model, dimension, input type)
    CREATE TABLE embed_models(
        id INTEGER PRIMARY KEY,
        fingerprint TEXT NOT NULL UNIQUE,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        dimension INTEGER NOT NULL,
        input_type TEXT NOT NULL
    );
    -- vectors keyed by the chunk text's hash (chunks.hash), so a renamed file keeps its vectors
    CREATE TABLE embeddings(
        id INTEGER PRIMARY KEY,
        model_id INTEGER NOT NULL REFERENCES embed_models(id),
        hash TEXT NOT NULL,
        dim INTEGER NOT NULL,
        vector BLOB NOT NULL,          -- float32 little-endian, unit length
        UNIQUE(model_id, hash)
    );
    CREATE INDEX embeddings_hash ON embeddings(hash);
    -- the token cap: every paid request is reserved here before it is sent
    CREATE TABLE embed_ledger(
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        kind TEXT NOT NULL,            -- document | query | rerank
        state TEXT NOT NULL,           -- reserved | billed | unconfirmed
        estimate INTEGER NOT NULL,
        tokens INTEGER NOT NULL DEFAULT 0,
        items INTEGER NOT NULL,
        pid INTEGER NOT NULL,
        run TEXT NOT NULL
    );
    CREATE INDEX embed_ledger_state ON embed_ledger(state);
    -- texts a running index has sent and not yet stored, so a second run does not send them too
    CREATE TABLE embed_claims(
        model_id INTEGER NOT NULL,
        hash TEXT NOT NULL,
        ledger_id INTEGER NOT NULL,
        PRIMARY KEY(model_id, hash)
    ) WITHOUT ROWID;
    CREATE INDEX embed_claims_ledger ON embed_claims(ledger_id);
    CREATE TABLE query_vectors(
        model_id INTEGER NOT NULL,
        query TEXT NOT NULL,
        vector BLOB NOT NULL,
        used_at REAL NOT NULL,
        PRIMARY KEY(model_id, query)
    ) WITHOUT ROWID;
    """,
    """
    -- secrets' metadata (never a value) embedded, so 'find' understands paraphrases
    CREATE TABLE secret_vectors(
        model_id INTEGER NOT NULL REFERENCES embed_models(id),
        hash TEXT NOT NULL,            -- of the metadata text
        vector BLOB NOT NULL,
        PRIMARY KEY(model_id, hash)
    ) WITHOUT ROWID;
    """,
    """
    -- the bytes of a file name that is not UTF-8 (relpath then shows them as U+FFFD), else NULL
    ALTER TABLE files ADD COLUMN rawpath BLOB;
    """,
    """
    -- words match their forms (fix/fixed, certificate/certificates): the porter stemmer over
    -- unicode61; identifiers stay exact in idents. The triggers name the table, so they carry on.
    DROP TABLE chunks_fts;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        breadcrumb, body, content='chunks', content_rowid='id',
        tokenize="porter unicode61 remove_diacritics 2");
    INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
    """,
    """
    -- the file's path is searched too (runbooks/restore-etcd.md says what the note is about),
    -- as a third FTS column kept on the chunk, so a delete can hand FTS5 the same values
    ALTER TABLE chunks ADD COLUMN path TEXT NOT NULL DEFAULT '';
    UPDATE chunks SET path = (SELECT relpath FROM files WHERE files.id = chunks.file_id);
    DROP TRIGGER chunks_ai;
    DROP TRIGGER chunks_ad;
    DROP TABLE chunks_fts;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        breadcrumb, body, path, content='chunks', content_rowid='id',
        tokenize="porter unicode61 remove_diacritics 2");
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, breadcrumb, body, path) VALUES (new.id, new.breadcrumb, new.body, new.path);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, breadcrumb, body, path)
        VALUES ('delete', old.id, old.breadcrumb, old.body, old.path);
        DELETE FROM idents WHERE chunk_id = old.id;
    END;
    INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
    """,
    """
    -- the common words' chunks by weighted frequency, as bitmaps (common_terms.py): built at the
    -- end of an index run; a chunk written or deleted since is listed in common_dirty by trigger,
    -- and while any is listed the search asks FTS5 instead
    CREATE TABLE common_postings(
        term TEXT NOT NULL, f REAL NOT NULL, n INTEGER NOT NULL, dmin INTEGER NOT NULL,
        bits BLOB NOT NULL, ids BLOB,           -- ids: the chunk ids as well, for a group of few
        PRIMARY KEY(term, f)) WITHOUT ROWID;
    CREATE TABLE common_state(id INTEGER PRIMARY KEY CHECK (id = 1), rows INTEGER NOT NULL,
                              weights TEXT NOT NULL, lengths BLOB NOT NULL);
    CREATE TABLE common_dirty(chunk_id INTEGER PRIMARY KEY);
    CREATE TRIGGER chunks_common_ai AFTER INSERT ON chunks BEGIN
        INSERT OR IGNORE INTO common_dirty(chunk_id) VALUES (new.id);
    END;
    CREATE TRIGGER chunks_common_ad AFTER DELETE ON chunks BEGIN
        INSERT OR IGNORE INTO common_dirty(chunk_id) VALUES (old.id);
    END;
    """,
]


def _secure_file(path: Path) -> None:
    """Create the DB file 0600 inside a 0700 folder before SQLite opens it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        fd = os.open(str(path), os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    elif path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)


def in_batches(values, size: int = 500):
    """(slice, "?,?,…") of `values`, at most `size` at a time: one `IN (…)` query per slice stays
    under SQLite's limit on bound variables."""
    values = list(values)
    for i in range(0, len(values), size):
        part = values[i:i + size]
        yield part, ",".join("?" * len(part))


# -- the driver: which SQLite module, and sqlite-vec loaded into it -------------------------------

def vec_extension_path():
    """sqlite-vec's loadable file, found without importing the package (it imports numpy: ~0.1 s)."""
    import importlib.util
    import os
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
    if vec_extension_path() is None:
        return sqlite3
    if hasattr(sqlite3.Connection, "enable_load_extension"):
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
        con.execute("SELECT vec_version()").fetchone()
        return True
    except Exception as exc:        # SQLite's refusal means "not loadable here": the caller falls back
        if not is_sqlite_error(exc):
            raise
        return False


def has_vec(con) -> bool:
    try:
        con.execute("SELECT vec_version()").fetchone()
        return True
    except Exception as exc:        # no such function: sqlite-vec is not loaded on `con`
        if not is_sqlite_error(exc):
            raise
        return False


def connect(path, *, readonly: bool = False, vectors: bool = False) -> sqlite3.Connection:
    """Open (creating and migrating if needed) the DB at `path`. With `vectors`, open it through
    an SQLite module that can load sqlite-vec (stdlib, else sqlean) and load it when installed;
    one process should open a DB file through one module only (POSIX locks are per library)."""
    path = Path(path)
    try:
        if readonly and not path.exists():
            raise RecallError(f"no index at {path}", "run 'recall index' first")
        if not readonly:
            _secure_file(path)
    except OSError as exc:          # a home folder recall may not use, a full or read-only disk
        raise (explain(exc, path) or RecallError(
            f"cannot make {path} ({exc.strerror}: {exc.filename})",
            "RECALL_HOME (or 'home:' in the config) must name a folder you can create and write")) from None
    OPENED.append(path)
    module = sqlite3
    if vectors:
        module = sqlite_module()
    try:
        con = module.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                             check_same_thread=False)
        con.row_factory = module.Row
        if vectors:
            load_vec(con)
        con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        con.execute("PRAGMA foreign_keys=ON")
        con.execute("PRAGMA secure_delete=ON")      # deleted text is zeroed, not left in free pages
        con.execute("PRAGMA synchronous=NORMAL")
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
    """Apply pending migrations, each in its own transaction; returns the schema version."""
    schema_version(con, path)
    con.execute("CREATE TABLE IF NOT EXISTS migrations(version INTEGER PRIMARY KEY, applied_at REAL)")
    done = con.execute("SELECT COALESCE(MAX(version), 0) FROM migrations").fetchone()[0]
    for version, sql in enumerate(MIGRATIONS[done:], start=done + 1):
        with transaction(con):
            if con.execute("SELECT 1 FROM migrations WHERE version=?", (version,)).fetchone():
                continue            # another process migrated while we waited for the lock
            for statement in _statements(sql):
                con.execute(statement)
            con.execute("INSERT INTO migrations VALUES (?, julianday('now'))", (version,))
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


class transaction:
    """`with transaction(con):` — BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any exception."""

    def __init__(self, con: sqlite3.Connection):
        self.con = con

    def __enter__(self):
        self.con.execute("BEGIN IMMEDIATE")
        return self.con

    def __exit__(self, exc_type, exc, tb):
        if not exc_type:
            self.con.execute("COMMIT")
        else:
            rollback(self.con)
        return False


def rollback(con) -> None:
    """ROLLBACK, quietly when SQLite has already rolled back (a full disk does): the first error
    is the one worth telling."""
    try:
        con.execute("ROLLBACK")
    except Exception as exc:                # sqlite3's or sqlean's OperationalError
        if "no transaction is active" not in str(exc):
            raise


class index_lock:
    """`with index_lock(db_path, notify):` one index run at a time per DB (an flock beside it,
    released by the kernel if the holder dies); the next run says whom it waits for, then waits."""

    def __init__(self, db_path, notify=None):
        self.path, self.notify, self.fd = Path(db_path).with_name("index.lock"), notify, None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:            # no flock here (Windows): each write is still a transaction
            return self
        self.fd = os.open(str(self.path), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 20, 0) or (time.sleep(0.05) or os.pread(self.fd, 20, 0))
            holder = holder.decode("ascii", "replace").strip() or "unknown"    # the holder writes it
            if self.notify:
                self.notify(f"waiting for another index run (pid {holder})")
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:         # a file system without flock (some NFS): transactions only
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            return self
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)          # closing releases the lock
        return False


def get_meta(con, key: str, default=None):
    row = con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else default


def set_meta(con, key: str, value) -> None:
    con.execute("INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, str(value)))
