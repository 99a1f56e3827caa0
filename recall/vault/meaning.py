"""Secrets found by meaning: each one's metadata text (never a value) embedded at sync, and ranked by
cosine against a `secret find` query. Imported only when a provider is configured."""
from __future__ import annotations

import hashlib
import json

from .. import db
from ..embed import providers as embed
from ..embed.vectors import normalize, pack, unpack
from ..errors import RecallError
from ..notes.search import query_vector
from .store import load_values, redactor

SIMILAR_WITHIN = 0.15     # a secret matched by meaning has a cosine within this of the best one's


def _metadata_texts(con) -> dict:
    """{secret id: (hash, text)} of what is searchable (and embedded) about each: metadata, never a value."""
    out = {}
    for row in con.execute("SELECT id, meta, tags FROM secrets"):
        meta = json.loads(row["meta"])
        parts = [row["id"], *(meta.get(k, "") for k in ("service", "environment", "kind", "username", "url")),
                 " ".join(json.loads(row["tags"])), meta.get("notes", ""), meta.get("use", "")]
        text = "\n".join(p for p in parts if p)
        out[row["id"]] = (hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest(), text)
    return out


def embed_metadata(con, cfg) -> int:
    """Embed each secret's metadata text that has no vector for the configured model (redacted all the same)."""
    fp = embed.fingerprint(cfg.embedding, "document")
    with db.transaction(con):
        mid = embed.model_id(con, fp)
    texts = dict(_metadata_texts(con).values())
    have = {r[0] for r in con.execute("SELECT hash FROM secret_vectors WHERE model_id=?", (mid,))}
    todo = [h for h in texts if h not in have]
    if not todo:
        return 0
    redact = redactor(con, cfg)
    provider = embed.provider_for(cfg, con, load_values)
    inputs = redact.many([texts[h] for h in todo])
    vectors, _ = embed.paid_call(con, cfg, provider, "document", inputs,
                                 lambda: provider.embed(inputs, "document"))
    with db.transaction(con):
        con.executemany("INSERT OR REPLACE INTO secret_vectors VALUES (?,?,?)",
                        [(mid, h, pack(v)) for h, v in zip(todo, vectors)])
    return len(todo)


def by_meaning(con, cfg, query: str, limit: int) -> list:
    """Secret ids ranked by cosine similarity of their metadata to the query, those within SIMILAR_WITHIN of
    the best and at least half of it; [] when unavailable."""
    try:
        mid = embed.model_id(con, embed.fingerprint(cfg.embedding, "document"), create=False)
        if mid is None:
            return []
        stored = {r[0]: unpack(r[1]) for r in con.execute(
            "SELECT hash, vector FROM secret_vectors WHERE model_id=?", (mid,))}
        if not stored:
            return []
        q = normalize(query_vector(con, cfg, query, load_values=load_values))
    except RecallError:
        return []
    scored = sorted(((sum(a * b for a, b in zip(q, normalize(stored[h]))), sid)
                     for sid, (h, _text) in _metadata_texts(con).items() if h in stored), reverse=True)
    best = scored[0][0] if scored else 0.0
    floor = max(best - SIMILAR_WITHIN, best / 2)       # a best below 0 is no likeness: nothing passes
    return [sid for cos, sid in scored[:limit] if cos >= floor]
