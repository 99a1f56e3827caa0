"""The local model's vectors of the test corpora (golden/, the dev sets), by chunk text hash, kept
outside the repository between runs: a run embeds only the texts it has not met before. The place is
read at import, before each test gets a HOME of its own; RECALL_TEST_CACHE=DIR moves it, an empty
value turns it off. Vectors are content-addressed (the model's fingerprint and the text's hash), so
a changed chunk or input format is simply embedded again."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

ROWS = "12-bit"    # the stored rows' format: rows of another (int8) are not this one's
VECTOR_CACHE = os.environ.get("RECALL_TEST_CACHE",
                              str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recall-tests"))


def cached_vectors(con, cfg, save: bool) -> None:
    """Copy the vectors the cache holds for this model into the index (before it embeds), or the
    index's into the cache (after). Vectors are content-addressed: a changed chunk is a new hash."""
    if not VECTOR_CACHE:
        return
    from recall import db
    from recall.embed import providers
    fp = providers.fingerprint(cfg.embedding, "document")
    model = f"{fp.key} {ROWS}"
    Path(VECTOR_CACHE).mkdir(parents=True, exist_ok=True)
    cache = sqlite3.connect(Path(VECTOR_CACHE) / "vectors.sqlite", timeout=60)
    try:
        with cache:
            cache.execute("CREATE TABLE IF NOT EXISTS vectors(model TEXT, hash TEXT, dim INTEGER, vector BLOB, "
                          "PRIMARY KEY(model, hash)) WITHOUT ROWID")
        mid = providers.model_id(con, fp)
        if save:
            rows = con.execute("SELECT ?, hash, dim, vector FROM embeddings WHERE model_id=?", (model, mid))
            with cache:
                cache.executemany("INSERT OR IGNORE INTO vectors VALUES (?,?,?,?)", rows.fetchall())
        else:
            rows = cache.execute("SELECT ?, hash, dim, vector FROM vectors WHERE model=?", (mid, model))
            with db.transaction(con):
                con.executemany("INSERT OR IGNORE INTO embeddings(model_id, hash, dim, vector) VALUES (?,?,?,?)",
                                rows.fetchall())
    finally:
        cache.close()
