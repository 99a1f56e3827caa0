"""The vector store: 12-bit rows in `embeddings` (int8 high bytes first), scanned by sqlite-vec when loadable, else numpy, else Python."""
from __future__ import annotations

import array
import importlib
import math
import operator
import struct
import sys
import threading

from .. import db
from ..db import has_vec, in_batches, load_vec, sqlite_module, vec_extension_path  # noqa: F401 (the driver is db's)

VEC_K_MAX = 4096               # the most neighbours one search asks for
# Without numpy or sqlite-vec, the rows nearest the query by the signs of their high planes (a Hamming
# distance of C-level ints), this many per neighbour wanted, are the only ones scored at 12 bits
SIGN_POOL = 20
# a window of a long chunk is stored under "<chunk hash>#<n>" (n ≥ 1; the first under the hash itself):
# the chunk hash an embedding row serves, in SQL
CHUNK_HASH = "(CASE WHEN instr(e.hash, '#') THEN substr(e.hash, 1, instr(e.hash, '#') - 1) ELSE e.hash END)"


# -- which backend -----------------------------------------------------------------------------

def _importable(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


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
                "int8 cosine scan of the high planes")
    hint = "pip install 'recall[vec]' for sqlite-vec"
    from ..extras import installed
    if installed("numpy"):     # found, not imported (doctor's 1 s); its import is probed apart
        return f"numpy brute force ({hint})"
    return f"pure Python: the rows' signs narrow each search to {SIGN_POOL}× the neighbours it wants ({hint})"


# -- vectors as bytes -----------------------------------------------------------------------------

def normalize(vec) -> list:
    vec = [float(x) for x in vec]
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def pack(vec) -> bytes:
    """Unit-length float32, little-endian: a query's or a secret's vector, kept exact."""
    return struct.pack(f"<{len(vec)}f", *normalize(vec))


def unpack(blob: bytes) -> list:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def quantize(vec) -> bytes:
    """A vector as int8, its largest part ±127: the query sqlite-vec's scan is given."""
    top = max(map(abs, vec)) or 1.0
    return bytes(round(x * 127 / top) & 0xFF for x in vec)


def quantize12(vec) -> bytes:
    """A chunk's vector at 12 bits a dimension (its largest part ±2039) in two planes: the high
    bytes, an int8 vector sqlite-vec scans in place, then each part's low 4 bits, two to a byte
    (part = 16·high + low). 1.5 bytes a dimension, float32's ranking (docs/BENCHMARKS.md); an
    older recall's int8 row is a high plane alone, read as it is."""
    top = max(map(abs, vec)) or 1.0
    parts = [round(x * 2039 / top) for x in vec]
    highs = [(x + 8) >> 4 for x in parts]                 # rounded: the int8 vector of the part
    lows = [x - 16 * h for x, h in zip(parts, highs)] + [0] * (len(parts) % 2)     # -8 … 7
    return bytes(h & 0xFF for h in highs) + bytes(a & 15 | (b & 15) << 4 for a, b in zip(lows[::2], lows[1::2]))


# each byte of the low plane as its two signed 4-bit parts, each an int8 byte: the first part, the second
_FIRST = bytes((((b & 15) ^ 8) - 8) & 0xFF for b in range(256))
_SECOND = bytes((((b >> 4) ^ 8) - 8) & 0xFF for b in range(256))


def _parts(blob: bytes, dim: int) -> list:
    """A stored chunk vector's parts (two planes, or an older int8 row); without numpy this is the
    search's inner loop, so the low plane is split by C-level byte tables, not part by part."""
    high = array.array("b", blob[:dim])
    if len(blob) == dim:
        return high.tolist()
    plane = blob[dim:]
    lows = array.array("b", bytes(2 * len(plane)))
    lows[0::2], lows[1::2] = array.array("b", plane.translate(_FIRST)), array.array("b", plane.translate(_SECOND))
    return [16 * h + low for h, low in zip(high, lows)]


def stored(blob: bytes, dim: int) -> list:
    """A stored chunk vector at unit length."""
    vec = _parts(blob, dim)
    norm = math.hypot(*vec) or 1.0
    return [x / norm for x in vec]


_SIGN = bytes(b"1"[0] if b >> 7 else b"0"[0] for b in range(256))      # an int8 byte's sign, as a binary digit
_ones = getattr(int, "bit_count", None) or (lambda x: bin(x).count("1"))     # int.bit_count: 3.10+


def sign_key(high: bytes) -> int:
    """A stored row's signs (its high plane's int8 bytes) as one int, its first part the highest bit,
    set when negative."""
    return int(high.translate(_SIGN), 2)


def _query_key(unit_query: list) -> int:
    return int("".join("1" if x < 0 else "0" for x in unit_query), 2)


def _sum_of_products(a, b) -> float:
    return sum(map(operator.mul, a, b))


_dot = getattr(math, "sumprod", _sum_of_products)        # Python 3.12+: the same sum as a C loop


def _cosine(unit_query: list, blob: bytes, dim: int) -> float:
    vec = _parts(blob, dim)
    return _dot(unit_query, vec) / (math.hypot(*vec) or 1.0)


def cosines(query, blobs: list) -> list:
    """The query's cosine with each stored chunk vector: by numpy when this process has it loaded."""
    q = normalize(query)
    if "numpy" not in sys.modules:
        return [_cosine(q, blob, len(q)) for blob in blobs]
    import numpy as np
    return (_unit_rows(blobs, len(q)) @ np.asarray(q, dtype="f4")).tolist()


def _unit_rows(blobs: list, dim: int):
    """Stored rows (two planes or int8, in any mix) as a float32 matrix in their order, each at unit length."""
    import numpy as np
    width = dim + (dim + 1) // 2
    whole = np.fromiter((len(b) == width for b in blobs), dtype=bool, count=len(blobs))
    if whole.all():
        rows = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(-1, width)
        low = np.empty((len(blobs), 2 * (width - dim)), dtype=np.float32)
        low[:, 0::2], low[:, 1::2] = rows[:, dim:] & 15, rows[:, dim:] >> 4
        mat = rows[:, :dim].view(np.int8).astype(np.float32) * 16 + ((low[:, :dim] + 8) % 16 - 8)
    else:
        mat = np.empty((len(blobs), dim), dtype=np.float32)
        if whole.any():
            mat[whole] = _unit_rows([b for b, w in zip(blobs, whole) if w], dim)
        raw = b"".join(b for b, w in zip(blobs, whole) if not w)
        mat[~whole] = np.frombuffer(raw, dtype=np.int8).reshape(-1, dim)
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    return mat / np.where(norms == 0, 1.0, norms)


# -- the store ------------------------------------------------------------------------------------

_MATRICES: dict = {}           # (db file, model id, generation, kind) -> numpy's (ids, matrix) or Python's rows, kept per process
_SEARCHED: dict = {}           # (db file, model id) -> searches in this process
_LOCK = threading.Lock()
WARM_MATRIX_MAX_BYTES = 512 * 2 ** 20


class VectorStore:
    """Vectors of one embedding model, keyed by chunk hash, as 12-bit BLOBs in `embeddings`, which
    every backend reads where they are: no second copy (a vec0 table scans them no faster). Writes
    go inside the caller's transaction; each bumps the model's generation in `meta`, which tells a
    warm numpy matrix it is stale."""

    def __init__(self, con, model_id: int, dimension: int, backend: str | None = None):
        self.con, self.model_id, self.dim = con, model_id, dimension
        self.auto = backend is None
        self.backend = backend or available_backend(con)
        self.gen_key = f"vectors_gen:{model_id}"

    # writing ------------------------------------------------------------------------------------
    def put_many(self, rows) -> None:
        """rows: [(hash, vector)]; replaces existing vectors for those hashes. Caller holds a transaction."""
        rows = list(rows)
        for digest, vec in rows:
            if len(vec) != self.dim:
                raise ValueError(f"vector of dimension {len(vec)}, expected {self.dim}")
            self.con.execute("DELETE FROM embeddings WHERE model_id=? AND hash=?", (self.model_id, digest))
            self.con.execute("INSERT INTO embeddings(model_id, hash, dim, vector) VALUES (?,?,?,?)",
                             (self.model_id, digest, self.dim, quantize12(vec)))
        if rows:
            self._bump()

    def delete_orphans(self) -> int:
        """Drop vectors (of every model) whose chunk text or file head no longer exists anywhere, and the vec0
        tables an older recall kept (where sqlite-vec is loaded: it alone can drop them)."""
        if self.backend == "sqlite-vec":
            for (name,) in self.con.execute("SELECT name FROM sqlite_master WHERE type='table' AND "
                                            "name GLOB 'vec_m[0-9]*' AND sql LIKE '%USING vec0%'").fetchall():
                self.con.execute(f'DROP TABLE "{name}"')
        rows = self.con.execute(
            "SELECT id, model_id FROM embeddings e WHERE NOT EXISTS "
            f"(SELECT 1 FROM chunks c WHERE c.hash = {CHUNK_HASH}) "
            "AND NOT EXISTS (SELECT 1 FROM files f WHERE f.head_hash = e.hash)").fetchall()
        for part, marks in in_batches([r[0] for r in rows]):
            self.con.execute(f"DELETE FROM embeddings WHERE id IN ({marks})", part)
        for mid in {r[1] for r in rows}:
            VectorStore(self.con, mid, 0, self.backend)._bump()
        return len(rows)

    def _bump(self) -> None:
        db.set_meta(self.con, self.gen_key, int(db.get_meta(self.con, self.gen_key, 0)) + 1)

    # searching ----------------------------------------------------------------------------------
    def count(self) -> int:
        return self.con.execute("SELECT count(*) FROM embeddings WHERE model_id=?", (self.model_id,)).fetchone()[0]

    def knn(self, query, k: int) -> list:
        """[(embedding id, cosine similarity)] best first, ties by id; k is capped at 4096."""
        k = max(1, min(int(k), VEC_K_MAX))
        if len(query) != self.dim:
            raise ValueError(f"query of dimension {len(query)}, expected {self.dim}")
        if self.backend == "sqlite-vec" and not (self.auto and self._warm()):
            return self._knn_sqlite_vec(query, k)
        if self.backend == "numpy" or (self.backend == "sqlite-vec" and _importable("numpy")):
            return self._knn_numpy(query, k)
        return self._knn_python(query, k)

    def _path(self) -> str:
        return next((r[2] for r in self.con.execute("PRAGMA database_list") if r[1] == "main"), "") or str(id(self.con))

    def _warm(self) -> bool:
        """A process searching a second time (the MCP server) keeps the vectors in a numpy matrix, whose
        product beats sqlite-vec's scalar scan; a one-shot CLI search scans and never loads the table."""
        key = (self._path(), self.model_id)
        searches = self._count_search(key)
        with _LOCK:
            cached = any(x[:2] == key and x[3] == "numpy" for x in _MATRICES)
        if cached or searches < 2:
            return cached
        if _importable("numpy") is None:       # imported only now: ~50 ms a one-shot search skips
            return False
        return self.count() * self.dim * 4 <= WARM_MATRIX_MAX_BYTES

    @staticmethod
    def _count_search(key: tuple) -> int:
        """This process's searches of (db file, model id) so far, this one counted."""
        with _LOCK:
            _SEARCHED[key] = _SEARCHED.get(key, 0) + 1
            return _SEARCHED[key]

    def _knn_sqlite_vec(self, query, k: int) -> list:
        """sqlite-vec's int8 cosine over the rows' high planes in place, for the 2k nearest, which
        are scored again at 12 bits against the query as it is (not rounded to int8): the other
        backends' order."""
        rows = self.con.execute(
            "SELECT id, vector FROM embeddings WHERE model_id=? AND dim=? "
            "ORDER BY vec_distance_cosine(vec_int8(substr(vector, 1, dim)), vec_int8(?)), id LIMIT ?",
            (self.model_id, self.dim, quantize(query), min(2 * k, VEC_K_MAX))).fetchall()
        scored = zip((r[0] for r in rows), cosines(query, [r[1] for r in rows])) if rows else ()
        return sorted(scored, key=lambda x: (-x[1], x[0]))[:k]

    def _kept(self, kind: str, build):
        """`build(rows)` of the model's [(id, vector)] rows by id, kept per process until they change."""
        gen = db.get_meta(self.con, self.gen_key, "0")
        top = self.con.execute("SELECT max(id) FROM embeddings WHERE model_id=?", (self.model_id,)).fetchone()[0]
        key = (self._path(), self.model_id, f"{gen}:{top}", kind)
        with _LOCK:
            hit = _MATRICES.get(key)
        if hit is not None:
            return hit
        made = build(self.con.execute("SELECT id, vector FROM embeddings WHERE model_id=? AND dim=? ORDER BY id",
                                      (self.model_id, self.dim)).fetchall())
        with _LOCK:
            for old in [x for x in _MATRICES if x[:2] == key[:2]]:
                del _MATRICES[old]
            _MATRICES[key] = made
        return made

    def _matrix(self):
        import numpy as np
        return self._kept("numpy", lambda rows: (np.array([r[0] for r in rows], dtype=np.int64),
                                                 _unit_rows([r[1] for r in rows], self.dim)))

    def _knn_numpy(self, query, k: int) -> list:
        import numpy as np
        ids, mat = self._matrix()
        if not len(ids):
            return []
        sims = mat @ np.asarray(normalize(query), dtype=np.float32)
        k = min(k, len(ids))
        top = np.argpartition(-sims, k - 1)[:k] if k < len(ids) else np.arange(len(ids))
        return sorted(((int(ids[i]), float(sims[i])) for i in top), key=lambda x: (-x[1], x[0]))

    def _knn_python(self, query, k: int) -> list:
        """The rows nearest the query by their signs (SIGN_POOL × k of them), scored at 12 bits: every row
        when there are no more. A process searching again (the MCP server, `recall eval`) keeps the rows
        decoded at unit length (float32, as numpy's matrix, within its bound) with their signs; a one-shot
        search reads the signs of every row, then only the nearest rows whole."""
        import heapq
        q, pool = normalize(query), SIGN_POOL * k
        qkey = _query_key(q)
        again = self._count_search((self._path(), self.model_id)) > 1
        if again and self.count() * self.dim * 4 <= WARM_MATRIX_MAX_BYTES:
            rows = self._kept("python", lambda rows: [(rid, sign_key(blob[:self.dim]),
                                                       array.array("f", stored(blob, self.dim))) for rid, blob in rows])
            near = heapq.nsmallest(pool, rows, key=lambda r: (_ones(qkey ^ r[1]), r[0])) if len(rows) > pool else rows
            scored = [(rid, _dot(q, unit)) for rid, _, unit in near]
        else:
            signs = self.con.execute("SELECT id, substr(vector, 1, ?) FROM embeddings WHERE model_id=? AND dim=?",
                                     (self.dim, self.model_id, self.dim))
            near = [rid for _, rid in heapq.nsmallest(pool, ((_ones(qkey ^ sign_key(high)), rid) for rid, high in signs))]
            scored = []
            for part, marks in in_batches(near):
                scored += [(rid, _cosine(q, blob, self.dim)) for rid, blob in self.con.execute(
                    f"SELECT id, vector FROM embeddings WHERE id IN ({marks})", part)]
        return heapq.nsmallest(k, scored, key=lambda x: (-x[1], x[0]))

    def chunks_for(self, hits: list) -> list:
        """[(chunk id, similarity)] for KNN hits, best first: one embedding may serve several
        chunks with the same text, a long chunk has a vector per window (its best one counts);
        embeddings with no chunk left are skipped."""
        sims = dict(hits)
        best: dict = {}
        for part, marks in in_batches(sims):
            for eid, cid in self.con.execute(
                    f"SELECT e.id, c.id FROM embeddings e JOIN chunks c ON c.hash = {CHUNK_HASH} "
                    f"WHERE e.id IN ({marks})", part):
                best[cid] = max(best.get(cid, -2.0), sims[eid])
        return sorted(best.items(), key=lambda x: (-x[1], x[0]))
