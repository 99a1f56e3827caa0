"""The vector store: chunk vectors at 12 bits in two planes (1.5 bytes a dimension, float32's
neighbours), an older recall's int8 rows read beside them; every backend gives the same top-k,
k ≤ 4096; an older DB's float32 vectors convert once; the core imports with no extras."""
import random
import subprocess
import sys

import pytest

from recall import db
from recall.embed import vectors
from recall.embed.vectors import VectorStore
from recall.vault import store as vault
from tests.conftest import REPO


def _db(tmp_path, vec=True):
    return db.connect(tmp_path / "v.db", vectors=vec)


def _model(con, dim=16):
    con.execute("INSERT INTO embed_models(fingerprint, provider, model, dimension, input_type) "
                "VALUES ('t|m|%d|document|v1', 't', 'm', %d, 'document')" % (dim, dim))
    return con.execute("SELECT id FROM embed_models").fetchone()[0]


def _random_vectors(n, dim, seed=7):
    rnd = random.Random(seed)
    return [(f"h{i:05d}", [rnd.gauss(0, 1) for _ in range(dim)]) for i in range(n)]


def _backends(con):
    out = ["python"]
    try:
        import numpy  # noqa: F401
        out.append("numpy")
    except ImportError:
        pass
    if vectors.has_vec(con):
        out.append("sqlite-vec")
    return out


def test_pack_is_unit_float32_little_endian():
    blob = vectors.pack([3.0, 4.0])
    assert len(blob) == 8
    assert vectors.unpack(blob) == pytest.approx([0.6, 0.8])


def test_every_backend_gives_the_same_top_k(tmp_path):
    con = _db(tmp_path)
    mid = _model(con, 16)
    rows = _random_vectors(600, 16)
    with db.transaction(con):
        VectorStore(con, mid, 16, "python").put_many(rows)
    query = [random.Random(1).gauss(0, 1) for _ in range(16)]
    results = {}
    for backend in _backends(con):
        store = VectorStore(con, mid, 16, backend)
        results[backend] = store.knn(query, 25)
    expected = results["python"]
    assert len(expected) == 25
    # similarity really is the cosine
    best_id, best_sim = expected[0]
    digest = con.execute("SELECT hash FROM embeddings WHERE id=?", (best_id,)).fetchone()[0]
    vec = dict(rows)[digest]
    assert best_sim == pytest.approx(sum(a * b for a, b in zip(vectors.normalize(vec), vectors.normalize(query))),
                                     abs=1e-3)                 # 12 bits
    if len(results) < 2:
        pytest.skip("only the pure-Python backend here: nothing to compare it with")
    for backend, got in results.items():
        assert [i for i, _ in got] == [i for i, _ in expected], backend
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-5), backend


def _near(query, n, step, rnd):
    """n vectors at cosine 0.95, 0.95 - step, … with the query, in that order."""
    out = []
    for i in range(n):
        side = [rnd.gauss(0, 1) for _ in query]
        dot = sum(a * b for a, b in zip(side, query))
        side = vectors.normalize([s - dot * q for s, q in zip(side, query)])
        cos = 0.95 - i * step
        out.append((f"near{i}", [cos * q + (1 - cos * cos) ** 0.5 * s for q, s in zip(query, side)]))
    return out


def test_a_chunk_vector_takes_a_byte_and_a_half_a_dimension_and_keeps_its_neighbours(tmp_path):
    """Stored in two planes: 576 bytes for 384 dimensions (float32 took 1536), the first 384 the
    int8 vector sqlite-vec scans; its cosine with the vector given ≥ 0.99999, and ten neighbours
    a ten-thousandth of cosine apart (their int8 vectors misorder them), among 2,000 others,
    found in their order by every backend."""
    con = _db(tmp_path)
    mid = _model(con, 384)
    rnd = random.Random(5)
    query = vectors.normalize([rnd.gauss(0, 1) for _ in range(384)])
    rows = _random_vectors(2000, 384) + _near(query, 10, 0.0001, rnd)
    with db.transaction(con):
        VectorStore(con, mid, 384, "python").put_many(rows)
    assert {r[0] for r in con.execute("SELECT length(vector) FROM embeddings")} == {576}
    blob = con.execute("SELECT vector FROM embeddings WHERE hash='h00000'").fetchone()[0]
    assert sum(a * b for a, b in zip(vectors.normalize(rows[0][1]), vectors.stored(blob, 384))) >= 0.99999
    high = vectors.stored(blob[:384], 384)                     # the high plane alone: the int8 vector
    assert sum(a * b for a, b in zip(vectors.normalize(rows[0][1]), high)) >= 0.999
    as_int8 = [sum(a * b for a, b in zip(query, vectors.stored(vectors.quantize(v), 384))) for _, v in rows[-10:]]
    assert sorted(range(10), key=lambda i: -as_int8[i]) != list(range(10))
    for backend in _backends(con):
        found = VectorStore(con, mid, 384, backend).knn(query, 10)
        hashes = [con.execute("SELECT hash FROM embeddings WHERE id=?", (i,)).fetchone()[0] for i, _ in found]
        assert hashes == [f"near{n}" for n in range(10)], backend


def test_an_older_recalls_int8_rows_are_searched_beside_new_rows(tmp_path):
    """An int8 row (what recall stored before) is a high plane alone: no migration, it ranks as
    it did, beside 12-bit rows, and every backend gives the same order."""
    con = _db(tmp_path)
    mid = _model(con, 64)
    rnd = random.Random(9)
    query = vectors.normalize([rnd.gauss(0, 1) for _ in range(64)])
    rows = _random_vectors(300, 64) + _near(query, 8, 0.05, rnd)
    older = {h for i, (h, _) in enumerate(rows) if i % 2}
    with db.transaction(con):
        VectorStore(con, mid, 64, "python").put_many([r for r in rows if r[0] not in older])
        con.executemany("INSERT INTO embeddings(model_id, hash, dim, vector) VALUES (?,?,64,?)",
                        [(mid, h, vectors.quantize(v)) for h, v in rows if h in older])
    assert {r[0] for r in con.execute("SELECT length(vector) FROM embeddings")} == {64, 96}
    exact = {h: sum(a * b for a, b in zip(query, vectors.normalize(v))) for h, v in rows}
    results = {}
    for backend in _backends(con):
        found = VectorStore(con, mid, 64, backend).knn(query, 20)
        results[backend] = [(con.execute("SELECT hash FROM embeddings WHERE id=?", (i,)).fetchone()[0], s)
                            for i, s in found]
        assert [h for h, _ in results[backend][:8]] == [f"near{n}" for n in range(8)], backend
        for h, sim in results[backend]:
            assert sim == pytest.approx(exact[h], abs=0.02 if h in older else 1e-4), backend
    for backend, got in results.items():
        assert [h for h, _ in got] == [h for h, _ in results["python"]], backend
        assert [s for _, s in got] == pytest.approx([s for _, s in results["python"]], abs=1e-5), backend
    blobs = [r[0] for r in con.execute("SELECT vector FROM embeddings ORDER BY id")]
    python = [sum(a * b for a, b in zip(query, vectors.stored(b, 64))) for b in blobs]
    assert vectors.cosines(query, blobs) == pytest.approx(python, abs=1e-5)


def test_replacing_a_vector_keeps_one_row(tmp_path):
    con = _db(tmp_path)
    mid = _model(con, 4)
    for backend in _backends(con):
        store = VectorStore(con, mid, 4, backend)
        with db.transaction(con):
            store.put_many([("a", [1, 0, 0, 0]), ("b", [0, 1, 0, 0])])
        with db.transaction(con):
            store.put_many([("a", [0, 0, 1, 0])])          # same hash: replaced, not duplicated
        assert store.count() == 2
        top = store.knn([0, 0, 1, 0], 1)
        assert con.execute("SELECT hash FROM embeddings WHERE id=?", (top[0][0],)).fetchone()[0] == "a"
        assert top[0][1] == pytest.approx(1.0)


def test_k_is_capped_at_4096(tmp_path):
    con = _db(tmp_path)
    mid = _model(con, 4)
    rows = _random_vectors(4200, 4)
    with db.transaction(con):
        VectorStore(con, mid, 4, "python").put_many(rows)
    for backend in _backends(con):
        got = VectorStore(con, mid, 4, backend).knn([1, 0, 0, 0], 10_000)
        assert len(got) == vectors.VEC_K_MAX, backend


def test_vectors_written_without_sqlite_vec_are_found_by_it(tmp_path):
    """No index beside the rows to fall behind: what a connection without sqlite-vec wrote, a
    search through sqlite-vec finds at once."""
    con = _db(tmp_path)
    if not vectors.has_vec(con):
        pytest.skip("sqlite-vec not loadable here")
    mid = _model(con, 4)
    with db.transaction(con):
        VectorStore(con, mid, 4).put_many([("a", [1, 0, 0, 0])])
    VectorStore(con, mid, 4).knn([1, 0, 0, 0], 1)
    con.close()
    plain = db.connect(tmp_path / "v.db")               # stdlib sqlite3: no sqlite-vec
    with db.transaction(plain):
        VectorStore(plain, mid, 4, "python").put_many([("b", [0, 1, 0, 0])])
    plain.close()
    con = _db(tmp_path)
    store = VectorStore(con, mid, 4)
    assert store.backend == "sqlite-vec"
    top = store.knn([0, 1, 0, 0], 1)
    assert con.execute("SELECT hash FROM embeddings WHERE id=?", (top[0][0],)).fetchone()[0] == "b"


def test_knn_hits_map_to_every_chunk_with_that_text(tmp_path, config, notes):
    from recall.config import load_config
    from recall.notes.index import run_index
    (notes / "copy.md").write_text((notes / "projects/cert-rotation.md").read_text())
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=True)
    run_index(con, cfg, redactor=vault.redactor)
    mid = _model(con, 4)
    hashes = [r[0] for r in con.execute("SELECT DISTINCT hash FROM chunks")]
    with db.transaction(con):
        store = VectorStore(con, mid, 4)
        store.put_many([(h, [1, i, 0, 0]) for i, h in enumerate(hashes)])
    hits = store.knn([1, 0, 0, 0], 1)
    chunks = store.chunks_for(hits)
    assert len(chunks) >= 1
    same_text = con.execute("SELECT count(*) FROM chunks WHERE hash=?", (hashes[0],)).fetchone()[0]
    assert len(chunks) == same_text


def test_a_long_chunk_matches_by_its_best_window_and_its_windows_go_with_it(tmp_path, config, notes):
    """A chunk embedded in windows ("hash", "hash#1", …): a search finds the chunk once, with its
    best window's similarity; when the chunk's text is gone, every window goes."""
    from recall.config import load_config
    from recall.notes.index import run_index
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=True)
    run_index(con, cfg, redactor=vault.redactor)
    mid = _model(con, 4)
    (long, other) = [r[0] for r in con.execute("SELECT DISTINCT hash FROM chunks LIMIT 2")]
    for backend in _backends(con):
        with db.transaction(con):
            store = VectorStore(con, mid, 4, backend)
            store.put_many([(long, [0, 1, 0, 0]), (f"{long}#1", [1, 0.1, 0, 0]), (f"{long}#2", [1, 0.2, 0, 0]),
                            (other, [1, 0.5, 0, 0])])
        near = store.knn([1, 0, 0, 0], 3)
        assert len(near) == 3
        found = store.chunks_for(near)
        ids = [cid for cid, _ in found]
        assert len(ids) == len(set(ids))                     # one entry per chunk, however many windows
        long_ids = {r[0] for r in con.execute("SELECT id FROM chunks WHERE hash=?", (long,))}
        assert set(ids[:len(long_ids)]) == long_ids
        assert found[0][1] == pytest.approx(1 / (1 + 0.1 ** 2) ** 0.5, abs=1e-4)   # its best window's
    with db.transaction(con):
        con.execute("UPDATE chunk_rows SET hash='changed' WHERE hash=?", (long,))
        assert store.delete_orphans() == 3
    assert {r[0] for r in con.execute("SELECT hash FROM embeddings")} == {other}


def test_orphaned_vectors_are_dropped(tmp_path):
    con = _db(tmp_path)
    mid = _model(con, 4)
    store = VectorStore(con, mid, 4)
    with db.transaction(con):
        store.put_many([("gone", [1, 0, 0, 0])])
        assert store.delete_orphans() == 1
    assert store.count() == 0


def test_the_extension_capable_module_is_chosen():
    import sqlite3
    mod = vectors.sqlite_module()
    try:
        import sqlite_vec  # noqa: F401
    except ImportError:
        assert mod is sqlite3
        return
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        assert mod is sqlite3
    else:
        assert mod.__name__ in ("sqlean", "sqlite3")


def test_doctor_names_the_live_backend(config, cli):
    code, out, _ = cli("doctor")
    line = next(x for x in out.splitlines() if " vectors " in x)
    assert any(name in line for name in ("sqlite-vec", "numpy", "pure Python"))


BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'numpy', 'sqlite_vec', 'sqlean', 'voyageai', 'sentence_transformers', 'torch'}:
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
"""


def test_core_works_with_no_extras(tmp_path):
    """Pure-Python vectors and the urllib client when no extra is importable."""
    code = BLOCK + f"""
from recall import db
from recall.embed import providers as embed, vectors
from recall.notes import search
con = db.connect({str(tmp_path / 'x.db')!r}, vectors=True)
print(vectors.available_backend(con))
con.execute("INSERT INTO embed_models(fingerprint, provider, model, dimension, input_type) VALUES ('k','p','m',2,'document')")
st = vectors.VectorStore(con, 1, 2)
with db.transaction(con):
    st.put_many([('a', [1, 0]), ('b', [0, 1])])
print(st.knn([1, 0.1], 1)[0][0])
from recall.config import Embedding
print(type(embed.VoyageProvider(Embedding(provider='voyage'), 'k').transport).__name__)
try:
    embed.LocalProvider(Embedding(provider='local')).embed(['disk full'], 'query')
except Exception as exc:
    print(exc.hint)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "python"
    assert lines[1] == "1"
    assert lines[2] == "UrllibTransport"
    assert "pip install 'recall[local]'" in lines[3]


def test_a_process_that_searches_again_keeps_a_numpy_matrix(tmp_path, monkeypatch):
    pytest.importorskip("numpy")
    con = _db(tmp_path)
    if not vectors.has_vec(con):
        pytest.skip("sqlite-vec not loadable here")
    monkeypatch.setattr(vectors, "_MATRICES", {})
    monkeypatch.setattr(vectors, "_SEARCHED", {})
    mid = _model(con, 8)
    with db.transaction(con):
        VectorStore(con, mid, 8).put_many(_random_vectors(300, 8))
    store = VectorStore(con, mid, 8)
    first = store.knn([1] * 8, 10)
    assert not vectors._MATRICES                       # a one-shot search never loads the table
    second = store.knn([1] * 8, 10)
    assert vectors._MATRICES and [i for i, _ in first] == [i for i, _ in second]
    monkeypatch.setattr(vectors, "WARM_MATRIX_MAX_BYTES", 0)
    monkeypatch.setattr(vectors, "_MATRICES", {})
    assert [i for i, _ in store.knn([1] * 8, 10)] == [i for i, _ in first] and not vectors._MATRICES


def test_without_numpy_a_process_that_searches_again_keeps_the_rows_decoded(tmp_path, monkeypatch):
    """The MCP server and `recall eval` on a core install: the second search reads no row again,
    ranks as the first, and a write is seen by the next search."""
    monkeypatch.setattr(vectors, "_MATRICES", {})
    monkeypatch.setattr(vectors, "_SEARCHED", {})
    con = _db(tmp_path)
    mid = _model(con, 64)
    rows = _random_vectors(300, 64)
    with db.transaction(con):
        VectorStore(con, mid, 64, "python").put_many(rows)
    store = VectorStore(con, mid, 64, "python")
    query = rows[7][1]
    first = store.knn(query, 10)
    assert not vectors._MATRICES                       # a one-shot search streams the rows
    second = store.knn(query, 10)
    assert [key[3] for key in vectors._MATRICES] == ["python"]
    assert [i for i, _ in second] == [i for i, _ in first]
    assert [s for _, s in second] == pytest.approx([s for _, s in first], abs=1e-6)     # kept as float32
    assert con.execute("SELECT hash FROM embeddings WHERE id=?", (first[0][0],)).fetchone()[0] == rows[7][0]
    with db.transaction(con):                          # a new row just like the query: found next time
        VectorStore(con, mid, 64, "python").put_many([("twin", [2 * x for x in query])])
    top = store.knn(query, 2)
    assert "twin" in {con.execute("SELECT hash FROM embeddings WHERE id=?", (i,)).fetchone()[0] for i, _ in top}
    monkeypatch.setattr(vectors, "WARM_MATRIX_MAX_BYTES", 0)
    monkeypatch.setattr(vectors, "_MATRICES", {})
    assert [i for i, _ in store.knn(query, 2)] == [i for i, _ in top] and not vectors._MATRICES


def test_without_numpy_a_search_scores_only_the_rows_nearest_by_sign_and_finds_the_nearest(tmp_path, monkeypatch):
    """Many more rows than a search wants (the README's install with Voyage at the seed's scale):
    only SIGN_POOL × k rows are scored at 12 bits, and the nearest still come back in their order,
    one-shot and kept alike."""
    monkeypatch.setattr(vectors, "_MATRICES", {})
    monkeypatch.setattr(vectors, "_SEARCHED", {})
    con = _db(tmp_path)
    mid = _model(con, 64)
    rnd = random.Random(11)
    query = [rnd.gauss(0, 1) for _ in range(64)]
    planted = [(f"near{n}", [x + rnd.gauss(0, 0.1 + 0.06 * n) for x in query]) for n in range(10)]
    with db.transaction(con):
        VectorStore(con, mid, 64, "python").put_many(_random_vectors(4000, 64) + planted)
    every = con.execute("SELECT id, hash, vector FROM embeddings ORDER BY id").fetchall()
    exact = sorted(zip([r[1] for r in every], vectors.cosines(query, [r[2] for r in every])), key=lambda x: -x[1])
    scored = []
    monkeypatch.setattr(vectors, "_cosine", lambda q, blob, dim: scored.append(blob) or vectors._dot(
        q, vectors.stored(blob, dim)))
    store = VectorStore(con, mid, 64, "python")
    for _ in ("one-shot", "kept"):
        found = store.knn(query, 10)
        hashes = [con.execute("SELECT hash FROM embeddings WHERE id=?", (i,)).fetchone()[0] for i, _ in found]
        assert hashes == [h for h, _ in exact[:10]]
        assert [s for _, s in found] == pytest.approx([s for _, s in exact[:10]], abs=1e-6)
    assert len(scored) == vectors.SIGN_POOL * 10 < len(every)       # the one-shot search read 200 rows whole
    assert [key[3] for key in vectors._MATRICES] == ["python"]
    assert vectors.sign_key(bytes([0x80, 0x7F, 0x00, 0xFF])) == 0b1001        # a bit a part, set when negative


def test_a_read_only_db_is_searched_by_sqlite_vec_and_its_error_is_raised(tmp_path, monkeypatch):
    import sqlite3
    con = _db(tmp_path)
    if not vectors.has_vec(con):
        pytest.skip("sqlite-vec not loadable here")
    mid = _model(con, 4)
    with db.transaction(con):
        VectorStore(con, mid, 4, "python").put_many([("a", [1, 0, 0, 0]), ("b", [0, 1, 0, 0])])
    con.execute("PRAGMA query_only=ON")               # as a read-only DB: a search writes nothing
    store = VectorStore(con, mid, 4)
    top = store.knn([1, 0, 0, 0], 1)
    assert con.execute("SELECT hash FROM embeddings WHERE id=?", (top[0][0],)).fetchone()[0] == "a"
    assert store.backend == "sqlite-vec"
    monkeypatch.setattr(vectors, "_SEARCHED", {})     # a first search again: sqlite-vec, not a warm matrix
    monkeypatch.setattr(vectors, "_MATRICES", {})

    def broken(self, query, k):
        raise sqlite3.OperationalError("a query sqlite-vec refuses")
    monkeypatch.setattr(VectorStore, "_knn_sqlite_vec", broken)
    with pytest.raises(sqlite3.OperationalError, match="refuses"):      # not silently answered by numpy
        VectorStore(con, mid, 4).knn([1, 0, 0, 0], 1)


OLD_VECTORS = """
import json, struct, sys
from recall import db
from recall.db import migrations
n = migrations.MIGRATIONS.index(migrations.int8_vectors)
migrations.MIGRATIONS[:] = migrations.MIGRATIONS[:n]          # the schema before int8 vectors
db.MIGRATIONS = migrations.MIGRATIONS
con = db.connect(sys.argv[1], vectors=True)
con.execute("INSERT INTO embed_models(fingerprint, provider, model, dimension, input_type) "
            "VALUES ('t|m|3|document|v1', 't', 'm', 3, 'document')")
for i, vec in enumerate(json.loads(sys.argv[2])):
    con.execute("INSERT INTO embeddings(model_id, hash, dim, vector) VALUES (1, ?, 3, ?)",
                (f"h{i}", struct.pack("<3f", *vec)))
con.execute("CREATE VIRTUAL TABLE vec_m1 USING vec0(embedding float[3] distance_metric=cosine)")
con.execute("INSERT INTO vec_m1(rowid, embedding) SELECT id, vector FROM embeddings")
"""


def test_an_older_dbs_float32_vectors_convert_once_and_its_vec0_table_goes(tmp_path):
    """A DB an older recall wrote (float32 rows, a vec0 copy): opened, its vectors are int8 and
    rank as before; the next index pass that loads sqlite-vec drops the vec0 table."""
    import json
    pytest.importorskip("sqlean")
    path = tmp_path / "v.db"
    old = [[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.0, 1.0]]
    run = subprocess.run([sys.executable, "-c", OLD_VECTORS, str(path), json.dumps(old)], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    if "no such module: vec0" in run.stderr:
        pytest.skip("sqlite-vec not loadable here")
    assert run.returncode == 0, run.stderr
    con = _db(tmp_path)
    assert [r[0] for r in con.execute("SELECT length(vector) FROM embeddings ORDER BY id")] == [3, 3, 3]
    for backend in _backends(con):
        got = VectorStore(con, 1, 3, backend).knn([0.9, 0.5, 0.0], 3)
        assert [i for i, _ in got] == [2, 1, 3], backend
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE name='vec_m1'").fetchone()[0] == 1
    with db.transaction(con):
        VectorStore(con, 1, 3).delete_orphans()
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'vec_m1%'").fetchone()[0] == 0
