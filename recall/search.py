"""Query → route → keyword (+ vector) lists → fusion → recency → per-file cap → pins."""
from __future__ import annotations

import time
from datetime import date as _date
from pathlib import Path

from . import terms
from .errors import RecallError
from .records import Record
from .snippets import QueryTerms, mark, point_at_section, snippet, snippet_spans  # noqa: F401 (snippet: re-exported)

MAX_QUERY_CHARS = 2000
PER_FILE = 2
RRF_K = 60
# Recency multiplies relevance (BM25, or the RRF score), never the identifier tier: at a 0.95 floor
# it can lift a newer note only over one less than ~5% more relevant — it breaks near-ties.
RECENCY_FLOOR = 0.95
RECENCY_HALF_LIFE_DAYS = 730
MODES = ("auto", "keyword", "semantic", "hybrid")
NAMED_CHECK = 2000            # identifier hits checked for a file named after the identifier
PHRASE_CHECK = 50             # keyword candidates checked for holding the whole query word for word
FILE_SUPPORT = 0.1            # keyword route: share of a file's next candidates' BM25 added to each chunk
FILE_SUPPORT_N = 2
CRUMB_WEIGHT = 3.0            # BM25 weight of the heading path against the body's 1.0
PATH_WEIGHT = 1.0             # and the file's path (runbooks/restore-etcd.md)
_WEIGHTS = (CRUMB_WEIGHT, 1.0, PATH_WEIGHT)       # chunks_fts's columns: breadcrumb, body, path
_BM25 = f"bm25(chunks_fts, {', '.join(map(str, _WEIGHTS))})"


class Hit(Record):
    FIELDS = {"source": "", "relpath": "", "path": "", "line": 0, "end_line": 0, "breadcrumb": "",
              "snippet": "", "highlights": [], "score": 0.0, "date": "", "chunk_id": 0, "file_id": 0,
              "explain": {}}
    # what a hit shows (--json, MCP, a remote's answer), in this order; the rest is internal
    PUBLIC = ("source", "relpath", "path", "line", "end_line", "breadcrumb", "snippet", "highlights", "score", "date")

    @property
    def read(self) -> str:
        """The `recall read` target of the section this hit points at."""
        return f"{self.source}:{self.relpath}:{self.line}"

    def marked(self) -> str:
        """The snippet with its highlights marked **like this** (the terminal view)."""
        return mark(self.snippet, self.highlights)

    def public(self) -> dict:
        out = {k: getattr(self, k) for k in self.PUBLIC}
        out["highlights"] = [list(span) for span in self.highlights]
        out["read"] = self.read
        out["score"] = round(self.score, 6)
        if self.explain:
            out["explain"] = self.explain
        return out


class SearchResult(Record):
    FIELDS = {"query": "", "mode": "", "route": "", "hits": [], "access": [],
              "notices": []}          # notices: one-line remarks — a remote down, no provider …

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
    """[(chunk_id, bm25, info)] best first: chunks holding the query's identifiers exactly come
    first (so INC-10963 beats a note saying "INC 10963"), then BM25 with the breadcrumb weighted.
    The score is BM25 itself (≥ 0), unsquashed, so the recency prior keeps its proportions."""
    tokens = terms.query_tokens(query)
    idents = [t.lower() for t in tokens if terms.is_identifier(t)]
    exact: dict = {}
    for term in dict.fromkeys(idents):
        for (cid,) in con.execute("SELECT chunk_id FROM idents WHERE term=?", (term,)):
            exact[cid] = exact.get(cid, 0) + 1
    bm25: dict = {}
    fq = terms.fts_query(query)
    if fq:
        sql = (f"SELECT rowid, {_BM25} FROM chunks_fts WHERE chunks_fts MATCH ? "
               f"ORDER BY {_BM25} LIMIT ?")
        # Chunks holding every term rank first under BM25 anyway; asking for them first costs a
        # fraction when the terms are common, and the OR query runs only when they are too few.
        fq_and = terms.fts_query(query, "AND")
        # common words: the same top chunks and scores from their precomputed postings (FTS5 would
        # score every chunk holding them all); None when that does not apply. An identifier is
        # rare: FTS5 is quick then.
        fast = None
        phrases = [p[1:-1] for p in fq_and.split(" AND ")]
        plain = not idents and " AND ".join(f'"{p}"' for p in phrases) == fq_and     # "w1" AND "w2" …, no more
        if plain:
            from .common_terms import top_k
            fast = top_k(con, phrases, _WEIGHTS, limit)
        if fast is not None:
            bm25 = dict(fast)
        elif fq_and != fq:
            bm25 = {cid: -r for cid, r in con.execute(sql, (fq_and, limit))}
        if len(bm25) < limit:
            # the OR query: from the postings too when it can be (a word no note has, beside common ones)
            from .common_terms import top_k_any
            fast = top_k_any(con, phrases, _WEIGHTS, limit) if plain and len(phrases) > 1 else None
            bm25 = dict(fast) if fast is not None else {cid: -r for cid, r in con.execute(sql, (fq, limit))}
        missing = [cid for cid in exact if cid not in bm25]
        from .db import in_batches
        for part, marks in in_batches(missing):
            # `+rowid`: one MATCH pass filtered here; a plain `rowid IN` makes FTS5 run the MATCH
            # once per id (11,796 holders of github.com on a 41k-chunk tree: 19 s → 0.4 s)
            rows = con.execute(
                f"SELECT rowid, {_BM25} FROM chunks_fts WHERE chunks_fts MATCH ? "
                f"AND +rowid IN ({marks})", [fq] + part)
            bm25.update({cid: -r for cid, r in rows})
    if exact and len(exact) <= NAMED_CHECK:
        # the page named after the identifier (alerts/RouterErrorRatioTooHigh.md) is about it:
        # above the pages that only mention it
        ids = list(exact)
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            for cid, rel in con.execute("SELECT c.id, f.relpath FROM chunks c JOIN files f ON f.id = c.file_id "
                                        f"WHERE c.id IN ({','.join('?' * len(part))})", part):
                if not set(idents).isdisjoint(terms.identifiers(rel.rsplit("/", 1)[-1])):
                    exact[cid] += 1
    if len(tokens) >= 3 and bm25:
        # a pasted message ("x509: certificate signed by unknown authority"): the candidates that
        # hold it word for word count as holding one identifier more
        # (read here rather than asked of FTS5: a phrase query reads every position of common words)
        part = list(bm25)[:PHRASE_CHECK]
        phrase = " " + " ".join(terms.words(query)) + " "
        for cid, crumb, body in con.execute(f"SELECT id, breadcrumb, body FROM chunks "
                                            f"WHERE id IN ({','.join('?' * len(part))})", part):
            if phrase in " " + " ".join(terms.words(crumb + "\n" + body)) + " ":
                exact[cid] = exact.get(cid, 0) + 1
    ranked = [(cid, max(bm25.get(cid, 0.0), 0.0),
               {"exact_identifiers": exact.get(cid, 0), "bm25": round(bm25.get(cid, 0.0), 4)})
              for cid in set(bm25) | set(exact)]
    ranked.sort(key=lambda x: (-x[2]["exact_identifiers"], -x[1], x[0]))
    return ranked[:max(limit, len(exact))]


# -- fusion and shaping ---------------------------------------------------------------------------

def rrf(lists: dict, k: int = RRF_K, weights: dict | None = None) -> dict:
    """Reciprocal rank fusion: {name: [chunk_id, …]} → {chunk_id: (score, {name: rank})};
    `weights` ({name: w}, default 1) scale each list's contribution."""
    fused: dict = {}
    for name, ids in lists.items():
        w = (weights or {}).get(name, 1.0)
        for rank, cid in enumerate(ids, start=1):
            score, ranks = fused.get(cid, (0.0, {}))
            ranks[name] = rank
            fused[cid] = (score + w / (k + rank), ranks)
    return fused


def _load_chunks(con, ids: list) -> dict:
    from .db import in_batches
    out = {}
    for part, marks in in_batches(ids):
        rows = con.execute(
            "SELECT c.id, c.file_id, c.start_line, c.end_line, c.breadcrumb, c.body, "
            "f.source, f.relpath, f.date FROM chunks c JOIN files f ON f.id = c.file_id "
            f"WHERE c.id IN ({marks})", part)
        out.update({r["id"]: r for r in rows})
    return out


def _gone(con, scored: list) -> bool:
    """Whether a chunk the vector list named (on its own connection) is missing from this
    connection's snapshot of the index."""
    from .db import in_batches
    ids = list(dict.fromkeys(cid for cid, _, info in scored if "vector" in info.get("lists", {})))
    found = sum(con.execute(f"SELECT count(*) FROM chunks WHERE id IN ({marks})", part).fetchone()[0]
                for part, marks in in_batches(ids))
    return found < len(ids)


def _source_roots(cfg) -> dict:
    return {s.name: Path(s.path) for s in getattr(cfg, "sources", [])}


def tier_of(info: dict) -> int:
    """How many of the query's identifiers a candidate holds exactly: the first sort key."""
    if "tier" in info:
        return info["tier"]
    return info.get("lists", {}).get("keyword", {}).get("exact_identifiers", 0)


def final_score(tier: int, relevance: float, factor: float) -> float:
    """The identifier tier, then relevance × recency squashed into [0, 1): one float that sorts
    as (tier, relevance × recency) — recency never lifts a note over one naming the identifier."""
    r = max(relevance, 0.0) * factor
    return tier + r / (1.0 + r)


def file_support(scored: list, rows: dict, share: float) -> dict:
    """{chunk_id: share × the relevance of its file's next best candidates}: a note that answers
    with several sections outranks one that mentions the words once."""
    if not share:
        return {}
    per_file: dict = {}
    for cid, score, _info in scored:
        if cid in rows:
            per_file.setdefault(rows[cid]["file_id"], []).append((score, cid))
    out = {}
    for found in per_file.values():
        if len(found) < 2:
            continue
        found.sort(reverse=True)
        for _score, cid in found:
            others = [s for s, c in found if c != cid][:FILE_SUPPORT_N]
            out[cid] = share * sum(max(s, 0.0) for s in others)
    return out


def shape(con, cfg, query: str, scored: list, n: int, explain: bool, file_share: float = 0.0) -> list:
    """Apply recency to each candidate's relevance, sort, keep at most PER_FILE chunks per file,
    build Hits. `scored` is [(chunk_id, relevance, info)]; the tier comes from info."""
    rows = _load_chunks(con, [cid for cid, _, _ in scored])
    roots = _source_roots(cfg)
    today = _date.today()
    qt = QueryTerms(query)
    support = file_support(scored, rows, file_share)
    final = []
    for cid, score, info in scored:
        row = rows.get(cid)
        if row is None:
            continue
        factor = recency_factor(row["date"], today)
        if support.get(cid):
            info = dict(info, file_support=round(support[cid], 6))
        final.append((final_score(tier_of(info), score + support.get(cid, 0.0), factor), factor, cid, info, row))
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
                  score=score, date=row["date"] or "", chunk_id=cid, file_id=row["file_id"])
        body = point_at_section(hit, row["body"], qt)
        hit.snippet, hit.highlights = snippet_spans(body, query, terms_=qt)
        if explain:
            hit.explain = dict(info, recency=round(factor, 4), rank=len(hits) + 1)
        hits.append(hit)
        if len(hits) >= n:
            break
    return hits


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
           explain: bool = False, vector_search=None, remotes: bool = True, ask_remotes=None,
           pins=None, require_open=None, load_values=None) -> SearchResult:
    """Search the notes. `vector_search(query, limit) -> [(chunk_id, similarity)]` is supplied by
    the caller when a provider is configured, so keyword-only searches never load it. The faces
    pass in `pins(con, cfg, result)` (inventory.pin_access: the access blocks first) and the
    vault's `require_open(con, cfg)` (a vault that holds values but cannot be opened here: nothing
    is shown) and `load_values` (a Voyage key kept in the vault)."""
    query = check_query(query)
    if n < 1:
        raise RecallError("-n must be at least 1")
    if require_open is not None:
        require_open(con, cfg)
    provider = getattr(getattr(cfg, "embedding", None), "provider", "none")
    route = route_for(mode, query, provider)
    # remotes: `ask_remotes(cfg, query, n, mode)` (remote.ask_remotes, passed in by the faces) starts
    # asking them now, in the background; its job merges their hits in at the end. Bad input asks nobody.
    remote_job = ask_remotes(cfg, query, n, mode) if remotes and ask_remotes is not None else None
    started = time.perf_counter()
    notices: list = []
    if not route.startswith("keyword") and vector_search is None:
        vector_search = vector_searcher(con, cfg, notices, load_values)
    # a search reads its lists and the chunks they name in one snapshot: an index run committing in
    # between (a note rewritten, its chunks under new ids) cannot leave a list naming chunks gone. The
    # vector list reads (and writes its query's vector) on a connection of its own: chunks it names
    # that this snapshot lacks mean an index run came between the two, and the search is read again.
    # (A rerank writes its paid request to the ledger on this connection, so it reads as before.)
    own = not con.in_transaction and not rerank and (
        route.startswith("keyword") or getattr(vector_search, "own_connection", False))
    for attempt in (1, 2):
        if own:
            con.execute("BEGIN")
        try:
            got = ranked_hits(con, cfg, query, route, n, explain=explain, rerank=rerank, vector_search=vector_search,
                              notices=notices, auto=mode == "auto", load_values=load_values)
            again = own and attempt == 1 and not got[0].startswith("keyword") and _gone(con, got[2])
        finally:
            if own:
                con.execute("COMMIT")
        if not again:
            break
    route, hits, scored = got
    result = SearchResult(query=query, mode=mode, route=route, hits=hits, notices=notices)
    if pins is not None:
        pins(con, cfg, result)
    if remote_job is not None:
        remote_job.merge_into(result, n)
    if explain:
        result.notices.append(f"route: {route}; {len(scored)} candidates; "
                              f"{(time.perf_counter() - started) * 1000:.1f} ms")
    return result


# -- the vector list, fusion, the reranker ---------------------------------------------------------

# Notes and vectors: the vector list leads (it reads paraphrases), the keyword list confirms. On the
# dev set (docs/BENCHMARKS.md) equal weights at k=60 fused below the vector list alone.
FUSION_WEIGHTS = {"vector": 1.0, "keyword": 0.3}
FUSION_K = 20
RERANK_POOL = 30              # shaped candidates the reranker sees
QUERY_CACHE_MAX = 5000        # cached query vectors kept per DB


def fuse(kw: list, vec: list, k: int | None = None, weights: dict | None = None) -> list:
    """Keyword [(cid, score, info)] and vector [(cid, similarity)] lists → [(cid, relevance, info)]
    candidates, each with its rank and score in every list it came from. Relevance is the RRF
    score, except that a chunk holding the query's identifiers exactly stays above the rest,
    ordered as in the keyword list (its keyword score is its relevance): a neighbour in meaning
    must not outrank the note that names INC-10963."""
    lists = {"vector": [c for c, _ in vec]}
    if kw:
        lists["keyword"] = [c for c, _, _ in kw]
    kw_at = {cid: (rank, score, info) for rank, (cid, score, info) in enumerate(kw, start=1)}
    vec_at = {cid: (rank, sim) for rank, (cid, sim) in enumerate(vec, start=1)}
    scored = []
    for cid, (score, _ranks) in rrf(lists, k or FUSION_K, FUSION_WEIGHTS if weights is None else weights).items():
        per_list = {}
        if cid in kw_at:
            rank, s, info = kw_at[cid]
            per_list["keyword"] = dict(info, rank=rank, score=round(s, 4))
        if cid in vec_at:
            rank, sim = vec_at[cid]
            per_list["vector"] = {"rank": rank, "similarity": round(sim, 4)}
        info = {"lists": per_list, "rrf": round(score, 6)}
        scored.append((cid, kw_at[cid][1] if tier_of(info) else score, info))
    scored.sort(key=lambda x: (-tier_of(x[2]), -x[1], x[0]))
    return scored


def keyword_first(kw: list, vec: list) -> list:
    """A query made only of identifiers, asked in hybrid mode: the keyword list as it stands, then
    the vector list's other chunks after it (relevance 0) — neighbours in meaning never displace it."""
    vec_at = {cid: (rank, sim) for rank, (cid, sim) in enumerate(vec, start=1)}
    scored = []
    for rank, (cid, s, info) in enumerate(kw, start=1):
        lists = {"keyword": dict(info, rank=rank, score=round(s, 4))}
        if cid in vec_at:
            lists["vector"] = {"rank": vec_at[cid][0], "similarity": round(vec_at[cid][1], 4)}
        scored.append((cid, s, {"lists": lists}))
    held = {cid for cid, _, _ in kw}
    scored += [(cid, 0.0, {"lists": {"vector": {"rank": rank, "similarity": round(sim, 4)}}})
               for cid, (rank, sim) in vec_at.items() if cid not in held]
    return scored


def ranked_hits(con, cfg, query: str, route: str, n: int, *, explain=False, rerank=False,
                vector_search=None, notices=None, auto=False, load_values=None):
    """(route, hits, candidates): the keyword list alone, or keyword + vector lists fused by RRF;
    then recency and the per-file cap, over-fetching until the page is full; then the reranker.
    A vector route needs `vector_search` (search() builds it before its snapshot starts)."""
    notices = notices if notices is not None else []
    want = max(n, RERANK_POOL) if rerank else n
    pool = max(50, want * 5)
    ident_query = terms.is_identifier_query(query)
    while True:
        if route.startswith("keyword"):
            kw = keyword_ranked(con, query, pool)
            scored = [(cid, s, {"lists": {"keyword": dict(info, rank=i, score=round(s, 4))}})
                      for i, (cid, s, info) in enumerate(kw, start=1)]
            exhausted = len(kw) < pool
        else:
            try:
                if route == "hybrid" and getattr(vector_search, "own_connection", False):
                    vec, kw = _side_by_side(con, query, pool, vector_search)
                else:
                    vec = vector_search(query, pool)
                    kw = keyword_ranked(con, query, pool) if route == "hybrid" else []
            except RecallError as exc:
                if not auto:
                    raise
                notices.append(f"keyword results only: {exc}")
                route = "keyword (vector search unavailable)"
                continue
            exhausted = len(vec) < pool and len(kw) < pool
            if route == "hybrid" and ident_query:
                scored = keyword_first(kw, vec)
            else:
                scored = fuse(kw, vec)
        hits = shape(con, cfg, query, scored, want, explain,
                     FILE_SUPPORT if route.startswith("keyword") or (route == "hybrid" and ident_query) else 0.0)
        if len(hits) >= want or exhausted:
            break
        from .vectors import VEC_K_MAX  # only when over-fetching: a keyword search never loads vectors
        if pool >= VEC_K_MAX:
            break
        pool = min(pool * 4, VEC_K_MAX)       # the per-file cap thinned the page: fetch deeper
    if rerank and hits:
        hits = rerank_hits(con, cfg, query, hits, explain, load_values)
    hits = hits[:n]
    if explain:
        for h in hits:
            h.explain["route"] = route
    return route, hits, scored


def _side_by_side(con, query: str, pool: int, vector_search):
    """The vector list in a thread (on its own connection: SQLite and numpy release the GIL)
    while this thread runs the keyword list — the two costs overlap instead of adding up."""
    import threading
    box: dict = {}

    def work():
        try:
            box["vec"] = vector_search(query, pool)
        except BaseException as exc:        # noqa: BLE001 — re-raised in the caller's thread
            box["err"] = exc
    worker = threading.Thread(target=work, name="recall-vectors", daemon=True)
    worker.start()
    kw = keyword_ranked(con, query, pool)
    worker.join()
    if "err" in box:
        raise box["err"]
    return box["vec"], kw


def _own_connection(con):
    """A second connection to the same DB file, through the same SQLite library; None for :memory:."""
    from . import db
    from .vectors import has_vec
    path = next((r[2] for r in con.execute("PRAGMA database_list") if r[1] == "main"), "")
    if not path:
        return None
    # the same SQLite library as `con`: two libraries on one file in one process break its locks
    side = db.connect(path, readonly=True, vectors=has_vec(con) or type(con).__module__.startswith("sqlean"))
    side.execute("PRAGMA mmap_size=1073741824")      # sqlite-vec scans every vector: map, don't copy
    return side


def vector_searcher(con, cfg, notices=None, load_values=None):
    """`(query, limit) -> [(chunk id, similarity)]` over the configured model's vectors; the query
    is embedded (or read from the cache) only once vectors are known to exist. It works on its
    own connection, so it can run beside the keyword list."""
    memo: dict = {}
    side = _own_connection(con)
    con_ = side or con

    def run(query: str, limit: int) -> list:
        from . import embed
        from .vectors import VEC_K_MAX, VectorStore
        fp = embed.fingerprint(cfg.embedding, "document")
        mid = embed.model_id(con_, fp, create=False)
        row = con_.execute("SELECT dim FROM embeddings WHERE model_id=? LIMIT 1", (mid,)).fetchone() \
            if mid is not None else None
        if row is None:
            raise RecallError(f"no vectors for {fp.provider}/{fp.model} yet", "run 'recall index' to embed the notes")
        if query not in memo:
            memo[query] = query_vector(con_, cfg, query, notices, load_values)
        store = VectorStore(con_, mid, row[0])
        k = limit
        while True:         # a long chunk has a vector per window: look deeper until `limit` chunks
            near = store.knn(memo[query], k)
            found = store.chunks_for(near)
            if len(found) >= limit or len(near) < k or k >= VEC_K_MAX:
                return found
            k = min(k * 2, VEC_K_MAX)
    run.own_connection = side is not None
    return run


def query_key(query: str) -> str:
    """What the query-vector cache is keyed by: a hash, so a query holding something the user
    pasted by mistake (a token) is not kept in the DB as text."""
    import hashlib
    return hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()


def query_vector(con, cfg, query: str, notices=None, load_values=None) -> list:
    """The query's vector: from the DB cache when this model embedded it before (no model load,
    no request), else from the provider — then cached."""
    from . import db, embed
    from .vectors import pack, unpack
    fp = embed.fingerprint(cfg.embedding, "query")
    mid = embed.model_id(con, fp, create=False)
    if mid is not None:
        row = con.execute("SELECT vector FROM query_vectors WHERE model_id=? AND query=?",
                          (mid, query_key(query))).fetchone()
        if row is not None:
            return unpack(row[0])
    provider = embed.provider_for(cfg, con, load_values)
    vectors, _ = embed.paid_call(con, cfg, provider, "query", [query], lambda: provider.embed([query], "query"))
    seconds = getattr(provider, "load_seconds", 0.0)
    if seconds > 0.5 and notices is not None and not getattr(provider, "load_noticed", False):
        provider.load_noticed = True
        notices.append(f"loading the local embedding model took {seconds:.1f}s; a repeated query is "
                       "answered from the cache, and 'recall mcp' keeps the model loaded")
    try:
        with db.transaction(con):
            mid = embed.model_id(con, fp)
            con.execute("INSERT OR REPLACE INTO query_vectors VALUES (?,?,?,?)",
                        (mid, query_key(query), pack(vectors[0]), time.time()))
            con.execute("DELETE FROM query_vectors WHERE used_at < (SELECT used_at FROM query_vectors "
                        "ORDER BY used_at DESC LIMIT 1 OFFSET ?)", (QUERY_CACHE_MAX,))
    except Exception as exc:        # the cache is an optimisation; a busy DB must not fail a search
        if not db.is_sqlite_error(exc):
            raise
    return vectors[0]


def rerank_hits(con, cfg, query: str, hits: list, explain: bool, load_values=None) -> list:
    """Reorder shaped hits by Voyage's reranker (one paid request, checked against the cap)."""
    from . import embed
    provider = embed.reranker_for(cfg, con, load_values)
    rows = _load_chunks(con, [h.chunk_id for h in hits])
    docs = [embed.document_text(rows[h.chunk_id]["breadcrumb"], rows[h.chunk_id]["body"])[:8000] for h in hits]
    order, _ = embed.paid_call(con, cfg, provider, "rerank", [query] * len(docs) + docs,
                               lambda: provider.rerank(query, docs, len(docs)), model=provider.rerank_model)
    scores = dict(order)
    exact = _holding_identifiers(con, query, [h.chunk_id for h in hits])
    for i, h in enumerate(hits):
        h.score = scores.get(i, 0.0)
        if explain:
            h.explain["rerank"] = {"score": round(h.score, 4), "before": i + 1}
    # as in fusion: the notes naming the query's identifiers stay first, reranked among themselves
    return [hits[i] for i in sorted(range(len(hits)),
                                    key=lambda i: (hits[i].chunk_id not in exact, -scores.get(i, -1.0), i))]


def _holding_identifiers(con, query: str, chunk_ids: list) -> set:
    idents = list(dict.fromkeys(t.lower() for t in terms.query_tokens(query) if terms.is_identifier(t)))
    if not idents or not chunk_ids:
        return set()
    rows = con.execute(f"SELECT DISTINCT chunk_id FROM idents WHERE term IN ({','.join('?' * len(idents))}) "
                       f"AND chunk_id IN ({','.join('?' * len(chunk_ids))})", idents + list(chunk_ids))
    return {r[0] for r in rows}


def needs_vectors(cfg, query: str, mode: str) -> bool:
    """Whether this search takes the vector path (so the caller opens the DB for sqlite-vec)."""
    provider = getattr(getattr(cfg, "embedding", None), "provider", "none")
    try:
        return not route_for(mode, (query or "").strip(), provider).startswith("keyword")
    except RecallError:
        return False
