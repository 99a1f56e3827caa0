"""Query → route → keyword (+ vector) lists → fusion → recency → per-file cap → pins."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import date as _date
from pathlib import Path

from . import terms
from .errors import RecallError

MAX_QUERY_CHARS = 2000
PER_FILE = 2
RRF_K = 60
RECENCY_FLOOR = 0.85          # the oldest note keeps 85% of its score
RECENCY_HALF_LIFE_DAYS = 730
MODES = ("auto", "keyword", "semantic", "hybrid")


@dataclass
class Hit:
    source: str
    relpath: str
    path: str
    line: int
    end_line: int
    breadcrumb: str
    snippet: str
    score: float
    date: str
    chunk_id: int = 0
    file_id: int = 0
    explain: dict = field(default_factory=dict)

    def public(self) -> dict:
        keys = ("source", "relpath", "path", "line", "end_line", "breadcrumb", "snippet", "score", "date")
        out = {k: getattr(self, k) for k in keys}
        out["score"] = round(self.score, 6)
        if self.explain:
            out["explain"] = self.explain
        return out


@dataclass
class SearchResult:
    query: str
    mode: str
    route: str
    hits: list
    access: list = field(default_factory=list)
    notices: list = field(default_factory=list)   # one-line remarks: a remote down, no provider …

    def public(self) -> dict:
        return {"query": self.query, "mode": self.mode, "route": self.route,
                "access": self.access, "hits": [h.public() for h in self.hits],
                "notices": self.notices}


def check_query(query: str) -> str:
    query = (query or "").strip()
    if not query:
        raise RecallError("empty query", "say what to look for, e.g. recall search 'INC-10963'")
    if len(query) > MAX_QUERY_CHARS:
        raise RecallError(f"the query is {len(query):,} characters; the limit is {MAX_QUERY_CHARS:,}",
                          "search for its most distinctive words or identifiers")
    return query


def recency_factor(date: str, today: _date | None = None) -> float:
    """A small multiplicative prior: 1.0 today, sliding toward RECENCY_FLOOR with age."""
    try:
        then = _date.fromisoformat(str(date)[:10])
    except ValueError:
        return RECENCY_FLOOR
    age = max(0, ((today or _date.today()) - then).days)
    return RECENCY_FLOOR + (1 - RECENCY_FLOOR) * 0.5 ** (age / RECENCY_HALF_LIFE_DAYS)


# -- the keyword list -----------------------------------------------------------------------------

def keyword_ranked(con, query: str, limit: int) -> list:
    """[(chunk_id, score, info)] best first: chunks holding the query's identifiers exactly come
    first (so INC-10963 beats a note saying "INC 10963"), then BM25 with the breadcrumb weighted."""
    idents = [t.lower() for t in terms.query_tokens(query) if terms.is_identifier(t)]
    exact: dict = {}
    for term in dict.fromkeys(idents):
        for (cid,) in con.execute("SELECT chunk_id FROM idents WHERE term=?", (term,)):
            exact[cid] = exact.get(cid, 0) + 1
    bm25: dict = {}
    fq = terms.fts_query(query)
    if fq:
        sql = ("SELECT rowid, bm25(chunks_fts, 3.0, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ? "
               "ORDER BY bm25(chunks_fts, 3.0, 1.0) LIMIT ?")
        # Chunks holding every term rank first under BM25 anyway; asking for them first costs a
        # fraction when the terms are common, and the OR query runs only when they are too few.
        fq_and = terms.fts_query(query, "AND")
        if fq_and != fq:
            bm25 = {cid: -r for cid, r in con.execute(sql, (fq_and, limit))}
        if len(bm25) < limit:
            bm25 = {cid: -r for cid, r in con.execute(sql, (fq, limit))}
        missing = [cid for cid in exact if cid not in bm25]
        for i in range(0, len(missing), 500):
            part = missing[i:i + 500]
            rows = con.execute(
                f"SELECT rowid, bm25(chunks_fts, 3.0, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ? "
                f"AND rowid IN ({','.join('?' * len(part))})", [fq] + part)
            bm25.update({cid: -r for cid, r in rows})
    ranked = []
    for cid in set(bm25) | set(exact):
        s = max(bm25.get(cid, 0.0), 0.0)
        ranked.append((cid, exact.get(cid, 0) + s / (1.0 + s),
                       {"exact_identifiers": exact.get(cid, 0), "bm25": round(bm25.get(cid, 0.0), 4)}))
    ranked.sort(key=lambda x: -x[1])
    return ranked[:max(limit, len(exact))]


# -- fusion and shaping ---------------------------------------------------------------------------

def rrf(lists: dict, k: int = RRF_K) -> dict:
    """Reciprocal rank fusion: {name: [chunk_id, …]} → {chunk_id: (score, {name: rank})}."""
    fused: dict = {}
    for name, ids in lists.items():
        for rank, cid in enumerate(ids, start=1):
            score, ranks = fused.get(cid, (0.0, {}))
            ranks[name] = rank
            fused[cid] = (score + 1.0 / (k + rank), ranks)
    return fused


def _load_chunks(con, ids: list) -> dict:
    out = {}
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        rows = con.execute(
            "SELECT c.id, c.file_id, c.start_line, c.end_line, c.breadcrumb, c.body, "
            "f.source, f.relpath, f.date FROM chunks c JOIN files f ON f.id = c.file_id "
            f"WHERE c.id IN ({','.join('?' * len(part))})", part)
        out.update({r["id"]: r for r in rows})
    return out


def snippet(text: str, query: str, width: int = 220) -> str:
    """A window of `text` around the first query term, terms marked **like this**."""
    words = [re.escape(t) for t in terms.query_tokens(query)
             if t.lower() not in terms.STOPWORDS and len(t) > 1]
    words += [re.escape(w) for w in terms.words(query) if w not in terms.STOPWORDS and len(w) > 2]
    flat = " ".join(text.split())
    if not words:
        return flat[:width]
    pattern = re.compile(r"(?<![\w-])(" + "|".join(sorted(set(words), key=len, reverse=True)) + r")",
                         re.IGNORECASE)
    m = pattern.search(flat)
    start = 0 if m is None else max(0, m.start() - width // 3)
    if start:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < m.start() else start
    window = flat[start:start + width]
    marked = pattern.sub(lambda x: f"**{x.group(1)}**", window)
    return ("…" if start else "") + marked + ("…" if start + width < len(flat) else "")


def _source_roots(cfg) -> dict:
    return {s.name: Path(s.path) for s in getattr(cfg, "sources", [])}


def shape(con, cfg, query: str, scored: list, n: int, explain: bool) -> list:
    """Apply recency, sort, keep at most PER_FILE chunks per file, build Hits."""
    rows = _load_chunks(con, [cid for cid, _, _ in scored])
    roots = _source_roots(cfg)
    today = _date.today()
    final = []
    for cid, score, info in scored:
        row = rows.get(cid)
        if row is None:
            continue
        factor = recency_factor(row["date"], today)
        final.append((score * factor, factor, cid, info, row))
    final.sort(key=lambda x: -x[0])
    per_file: dict = {}
    hits = []
    for score, factor, cid, info, row in final:
        if per_file.get(row["file_id"], 0) >= PER_FILE:
            continue
        per_file[row["file_id"]] = per_file.get(row["file_id"], 0) + 1
        root = roots.get(row["source"])
        hit = Hit(source=row["source"], relpath=row["relpath"],
                  path=str(root / row["relpath"]) if root else row["relpath"],
                  line=row["start_line"], end_line=row["end_line"], breadcrumb=row["breadcrumb"],
                  snippet=snippet(row["body"], query), score=score, date=row["date"] or "",
                  chunk_id=cid, file_id=row["file_id"])
        if explain:
            hit.explain = dict(info, recency=round(factor, 4), rank=len(hits) + 1)
        hits.append(hit)
        if len(hits) >= n:
            break
    return hits


def pin_access(con, cfg, result: SearchResult) -> None:
    """Entries the query names go first, as access blocks; a broken inventory is a notice, not a failure."""
    if not getattr(cfg, "inventory", None):
        return
    from . import inventory
    try:
        entries = inventory.load_inventory(cfg, con)
    except RecallError as exc:
        result.notices.append(f"inventory not loaded: {exc}")
        return
    result.access = [inventory.describe(con, e) for e in inventory.mentioned(entries, result.query)]


def route_for(mode: str, query: str, provider: str) -> str:
    if mode not in MODES:
        raise RecallError(f"unknown mode '{mode}'", "use one of: " + ", ".join(MODES))
    if mode == "keyword":
        return "keyword"
    if mode in ("semantic", "hybrid"):
        if provider == "none":
            raise RecallError(f"--mode {mode} needs an embedding provider, and none is configured",
                              "set embedding.provider to voyage or local in the config, "
                              "then run 'recall index'")
        return mode
    if terms.is_identifier_query(query):
        return "keyword (identifier)"
    return "keyword (no embedding provider)" if provider == "none" else "hybrid"


def search(con, cfg, query: str, *, n: int = 10, mode: str = "auto", rerank: bool = False,
           explain: bool = False, vector_search=None) -> SearchResult:
    """Search the notes. `vector_search(query, limit) -> [(chunk_id, similarity)]` is supplied by
    the caller when a provider is configured, so keyword-only searches never load it."""
    query = check_query(query)
    if n < 1:
        raise RecallError("-n must be at least 1")
    provider = getattr(getattr(cfg, "embedding", None), "provider", "none")
    route = route_for(mode, query, provider)
    pool = max(50, n * 5)
    started = time.perf_counter()
    if route.startswith("keyword"):
        scored = keyword_ranked(con, query, pool)
    else:
        if vector_search is None:
            raise RecallError("vector search is not available in this process")
        lists, infos = {}, {}
        vec = vector_search(query, pool)
        lists["vector"] = [cid for cid, _ in vec]
        if route == "hybrid":
            kw = keyword_ranked(con, query, pool)
            lists["keyword"] = [cid for cid, _, _ in kw]
        fused = rrf(lists)
        scored = [(cid, s, {"ranks": ranks}) for cid, (s, ranks) in fused.items()]
        scored.sort(key=lambda x: -x[1])
    hits = shape(con, cfg, query, scored, n, explain)
    result = SearchResult(query=query, mode=mode, route=route, hits=hits)
    pin_access(con, cfg, result)
    if explain:
        result.notices.append(f"route: {route}; {len(scored)} candidates; "
                              f"{(time.perf_counter() - started) * 1000:.1f} ms")
    return result
