"""The vector store: float32 rows in `embeddings`, searched by sqlite-vec when loadable, else numpy, else Python."""
from __future__ import annotations

import array
import importlib
import math
import sys
import threading

from .. import db
from ..db import has_vec, in_batches, load_vec, sqlite_module, vec_extension_path  # noqa: F401 (the driver is db's)

VEC_K_MAX = 4096               # sqlite-vec refuses a larger k
# a window of a long chunk is stored under "<chunk hash>#<n>" (n ≥ 1; the first under the hash itself):
# the chunk hash an embedding row serves, in SQL
CHUNK_HASH = "(CASE WHEN instr(e.hash, '#') THEN substr(e.hash, 1, instr(e.hash, '#') - 1) ELSE e.hash END)"
BACKENDS = ("sqlite-vec", "numpy", "python")


# -- which backend -----------------------------------------------------------------------------

def _importable(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _cannot_write(exc) -> bool:
    """A locked or read-only DB (the vec0 index cannot be brought up to date now), not another error."""
    text = str(exc).lower()
    return db.is_sqlite_error(exc) and any(w in text for w in ("locked", "readonly", "read-only", "busy"))


def available_backend(con) -> str:
    """The backend a search on `con` uses: sqlite-vec, numpy or python."""
    if has_vec(con):
        return "sqlite-vec"
    return "numpy" if _importable("numpy") is not None else "python"


def describe_backend() -> str:
    """One line for `recall doctor`: the live backend and what would improve it."""
    mod = sqlite_module()
    con = mod.connect(":memory:") if vec_extension_path() else None
    if con is not None and load_vec(con):
        version = con.execute("SELECT vec_version()").fetchone()[0]
        return (f"sqlite-vec {version} through {mod.__name__} (SQLite {mod.sqlite_version}), "
                "cosine vec0")
    hint = "pip install 'recall[vec]' for sqlite-vec"
    from importlib.util import find_spec
    if find_spec("numpy") is not None:     # found, not imported (doctor's 1 s); its import is probed apart
        return f"numpy brute force ({hint})"
    return f"pure Python brute force, slow past ~10k chunks ({hint})"


# -- vectors as bytes -----------------------------------------------------------------------------

def normalize(vec) -> list:
    vec = [float(x) for x in vec]
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def pack(vec) -> bytes:
    """Unit-length float32, little-endian (what sqlite-vec reads)."""
    arr = array.array("f", normalize(vec))
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def unpack(blob: bytes) -> list:
    arr = array.array("f")
    arr.frombytes(blob)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tolist()


# -- the store ------------------------------------------------------------------------------------

_MATRICES: dict = {}           # (db file, model id, generation) -> (ids, matrix): numpy, kept per process
_SEARCHED: dict = {}           # (db file, model id) -> vec0 searches in this process
_LOCK = threading.Lock()
WARM_MATRIX_MAX_BYTES = 512 * 2 ** 20


class VectorStore:
    """Vectors of one embedding model, keyed by chunk hash, as float32 BLOBs in `embeddings` (every
    backend reads them); sqlite-vec's `vec_m{id}` indexes them, rebuilt when another backend wrote
    since (generation counters in `meta`). Writes go inside the caller's transaction."""

    def __init__(self, con, model_id: int, dimension: int, backend: str | None = None):
        self.con, self.model_id, self.dim = con, model_id, dimension
        self.auto = backend is None
        self.backend = backend or available_backend(con)
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown vector backend {self.backend!r}")
        self.table = f"vec_m{int(model_id)}"
        self.gen_key, self.vec0_key = f"vectors_gen:{model_id}", f"vec0_gen:{model_id}"

    # writing ------------------------------------------------------------------------------------
    def put_many(self, rows) -> int:
        """rows: [(hash, vector)]; replaces existing vectors for those hashes. Caller holds a transaction."""
        n = 0
        use_vec = self.backend == "sqlite-vec" and self._vec0_current()
        for digest, vec in rows:
            if len(vec) != self.dim:
                raise ValueError(f"vector of dimension {len(vec)}, expected {self.dim}")
            blob = pack(vec)
            old = self.con.execute("SELECT id FROM embeddings WHERE model_id=? AND hash=?",
                                   (self.model_id, digest)).fetchone()
            if old is not None:
                self.con.execute("DELETE FROM embeddings WHERE id=?", (old[0],))
                if use_vec:        # vec0 has no upsert: DELETE, then INSERT
                    self.con.execute(f"DELETE FROM {self.table} WHERE rowid=?", (old[0],))
            rowid = self.con.execute(
                "INSERT INTO embeddings(model_id, hash, dim, vector) VALUES (?,?,?,?)",
                (self.model_id, digest, self.dim, blob)).lastrowid
            if use_vec:
                self.con.execute(f"INSERT INTO {self.table}(rowid, embedding) VALUES (?, ?)", (rowid, blob))
            n += 1
        if n:
            self._bump(use_vec)
        return n

    def delete_orphans(self) -> int:
        """Drop vectors (of every model) whose chunk text or file head no longer exists anywhere."""
        rows = self.con.execute(
            "SELECT id, model_id FROM embeddings e WHERE NOT EXISTS "
            f"(SELECT 1 FROM chunks c WHERE c.hash = {CHUNK_HASH}) "
            "AND NOT EXISTS (SELECT 1 FROM files f WHERE f.head_hash = e.hash)").fetchall()
        if not rows:
            return 0
        touched = {}
        for rid, mid in rows:
            touched.setdefault(mid, []).append(rid)
        for mid, ids in touched.items():
            other = VectorStore(self.con, mid, 0, self.backend)
            live = other.backend == "sqlite-vec" and other._vec0_current()
            for part, marks in in_batches(ids):
                self.con.execute(f"DELETE FROM embeddings WHERE id IN ({marks})", part)
                if live:
                    self.con.execute(f"DELETE FROM {other.table} WHERE rowid IN ({marks})", part)
            other._bump(live)
        return len(rows)

    def _bump(self, vec0_too: bool) -> None:
        gen = int(db.get_meta(self.con, self.gen_key, 0)) + 1
        db.set_meta(self.con, self.gen_key, gen)
        if vec0_too:
            db.set_meta(self.con, self.vec0_key, gen)

    # the sqlite-vec index -----------------------------------------------------------------------
    def _vec0_current(self) -> bool:
        if self.con.execute("SELECT 1 FROM sqlite_master WHERE name=?", (self.table,)).fetchone() is None:
            return False
        return db.get_meta(self.con, self.vec0_key) == db.get_meta(self.con, self.gen_key, "0")

    def ensure_index(self) -> None:
        """Create or rebuild `vec_m{id}` from `embeddings` when it is missing or stale."""
        if self.backend != "sqlite-vec" or self._vec0_current():
            return
        with db.transaction(self.con):
            if self._vec0_current():           # another process rebuilt it meanwhile
                return
            self.con.execute(f"DROP TABLE IF EXISTS {self.table}")
            self.con.execute(f"CREATE VIRTUAL TABLE {self.table} USING vec0("
                             f"embedding float[{int(self.dim)}] distance_metric=cosine)")
            self.con.execute(f"INSERT INTO {self.table}(rowid, embedding) "
                             "SELECT id, vector FROM embeddings WHERE model_id=? AND dim=?",
                             (self.model_id, self.dim))
            db.set_meta(self.con, self.vec0_key, db.get_meta(self.con, self.gen_key, "0"))

    # searching ----------------------------------------------------------------------------------
    def count(self) -> int:
        return self.con.execute("SELECT count(*) FROM embeddings WHERE model_id=?", (self.model_id,)).fetchone()[0]

    def knn(self, query, k: int) -> list:
        """[(embedding id, cosine similarity)] best first, ties by id; k is capped at 4096."""
        k = max(1, min(int(k), VEC_K_MAX))
        if len(query) != self.dim:
            raise ValueError(f"query of dimension {len(query)}, expected {self.dim}")
        if self.backend == "sqlite-vec":
            if self.auto and self._warm():
                return self._knn_numpy(query, k)
            try:
                self.ensure_index()
                return self._knn_vec0(query, k)
            except Exception as exc:   # a locked or read-only DB: search without the index; else it is a bug
                if not _cannot_write(exc):
                    raise
        if self.backend == "numpy" or (self.backend == "sqlite-vec" and _importable("numpy")):
            return self._knn_numpy(query, k)
        return self._knn_python(query, k)

    def _path(self) -> str:
        return next((r[2] for r in self.con.execute("PRAGMA database_list") if r[1] == "main"), "") or str(id(self.con))

    def _warm(self) -> bool:
        """A process searching a second time (the MCP server) keeps the vectors in a numpy matrix, whose
        product beats vec0's scalar scan; a one-shot CLI search uses vec0 and never loads the table."""
        key = (self._path(), self.model_id)
        with _LOCK:
            _SEARCHED[key] = _SEARCHED.get(key, 0) + 1
            cached = any(x[:2] == key for x in _MATRICES)
            if cached or _SEARCHED[key] < 2:
                return cached
        if _importable("numpy") is None:       # imported only now: ~50 ms a one-shot search skips
            return False
        return self.count() * self.dim * 4 <= WARM_MATRIX_MAX_BYTES

    def _knn_vec0(self, query, k: int) -> list:
        # The KNN runs alone: inside a JOIN sqlite-vec may plan a scan instead of its KNN.
        rows = self.con.execute(f"SELECT rowid, distance FROM {self.table} WHERE embedding MATCH ? AND k = ?",
                                (pack(query), k)).fetchall()
        return sorted(((r[0], 1.0 - r[1]) for r in rows), key=lambda x: (-x[1], x[0]))

    def _matrix(self):
        import numpy as np
        gen = db.get_meta(self.con, self.gen_key, "0")
        top = self.con.execute("SELECT max(id) FROM embeddings WHERE model_id=?", (self.model_id,)).fetchone()[0]
        key = (self._path(), self.model_id, f"{gen}:{top}")
        with _LOCK:
            hit = _MATRICES.get(key)
        if hit is not None:
            return hit
        rows = self.con.execute("SELECT id, vector FROM embeddings WHERE model_id=? AND dim=? ORDER BY id",
                                (self.model_id, self.dim)).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        mat = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), self.dim) \
            if rows else np.zeros((0, self.dim), dtype=np.float32)
        with _LOCK:
            for old in [x for x in _MATRICES if x[:2] == key[:2]]:
                del _MATRICES[old]
            _MATRICES[key] = (ids, mat)
        return ids, mat

    def _knn_numpy(self, query, k: int) -> list:
        import numpy as np
        ids, mat = self._matrix()
        if not len(ids):
            return []
        q = np.asarray(normalize(query), dtype=np.float32)
        sims = mat @ q
        k = min(k, len(ids))
        top = np.argpartition(-sims, k - 1)[:k] if k < len(ids) else np.arange(len(ids))
        out = [(int(ids[i]), float(sims[i])) for i in top]
        return sorted(out, key=lambda x: (-x[1], x[0]))

    def _knn_python(self, query, k: int) -> list:
        import heapq
        q = normalize(query)
        scored = ((rid, sum(a * b for a, b in zip(q, unpack(blob))))
                  for rid, blob in self.con.execute(
                      "SELECT id, vector FROM embeddings WHERE model_id=? AND dim=?", (self.model_id, self.dim)))
        return heapq.nsmallest(k, scored, key=lambda x: (-x[1], x[0]))

    def chunks_for(self, hits: list) -> list:
        """[(chunk id, similarity)] for KNN hits, best first: one embedding may serve several
        chunks with the same text, a long chunk has a vector per window (its best one counts);
        embeddings with no chunk left are skipped."""
        if not hits:
            return []
        sims = dict(hits)
        best: dict = {}
        ids = [h[0] for h in hits]
        for part, marks in in_batches(ids):
            rows = self.con.execute(
                f"SELECT e.id, c.id FROM embeddings e JOIN chunks c ON c.hash = {CHUNK_HASH} "
                f"WHERE e.id IN ({marks})", part).fetchall()
            for eid, cid in rows:
                best[cid] = max(best.get(cid, -2.0), sims[eid])
        return sorted(best.items(), key=lambda x: (-x[1], x[0]))
