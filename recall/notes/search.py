"""Query → route → keyword (+ vector) lists → fusion → recency → per-file cap → hits → rerank → pins."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from datetime import date as _date
from pathlib import Path

from .. import db
from ..config import counted
from ..errors import RecallError
from . import fusion
from .fusion import final_score, recency_factor
from .keyword import holders, keyword_ranked, names, spellings
from .query import Query, Route, parse_query, route_for
from .snippets import QueryTerms, mark, point_at_section, snippet_spans

RERANK_POOL = 30              # shaped candidates the reranker sees
SHORT_QUERY = 2               # words in a query short enough to lean on the keyword list
QUERY_CACHE_MAX = 1000        # cached query vectors kept per DB (the latest embedded; 4.6 MB at 384
                              # dimensions, each row spilling to a page of its own)


@dataclass
class Hit:
    source: str = ""
    relpath: str = ""
    path: str = ""
    line: int = 0
    end_line: int = 0
    breadcrumb: str = ""
    snippet: str = ""
    highlights: list = field(default_factory=list)
    score: float = 0.0
    date: str = ""
    chunk_id: int = 0
    explain: dict = field(default_factory=dict)
    remote: bool = False          # a remote's hit: its relpath already starts with the remote's name
    # what a hit shows (--json, MCP, a remote's answer), in this order; the rest is internal
    PUBLIC = ("source", "relpath", "path", "line", "end_line", "breadcrumb", "snippet", "highlights", "score", "date")

    @property
    def read(self) -> str:
        """The `recall read` target of the section this hit points at."""
        return f"{self.relpath}:{self.line}" if self.remote else f"{self.source}:{self.relpath}:{self.line}"

    def marked(self) -> str:
        """The snippet with its highlights marked **like this** (the terminal view)."""
        return mark(self.snippet, self.highlights)

    def public(self) -> dict:
        out = {k: getattr(self, k) for k in self.PUBLIC}
        out.update(highlights=[list(span) for span in self.highlights], read=self.read, score=round(self.score, 6))
        if self.explain:
            out["explain"] = self.explain
        return out


@dataclass
class SearchResult:
    query: str = ""
    mode: str = ""
    route: Route = field(default_factory=lambda: Route("keyword"))
    hits: list = field(default_factory=list)
    access: list = field(default_factory=list)
    notices: list = field(default_factory=list)     # one-line remarks — a remote down, no provider …

    def public(self) -> dict:
        return {"query": self.query, "mode": self.mode, "route": str(self.route), "access": self.access,
                "hits": [h.public() for h in self.hits], "notices": self.notices}


@dataclass(frozen=True)
class SearchHooks:
    """What the faces wire in: `ask_remotes(cfg, query, n, mode)` (a `merge(result)` of the remotes'
    hits), `pins(con, cfg, result)`, the vault's `require_open(con, cfg)` and `load_values`."""
    ask_remotes: object = None
    pins: object = None
    require_open: object = None
    load_values: object = None


@dataclass(frozen=True)
class VectorList:
    """`run(query text, limit) -> [(chunk_id, similarity)]`; `heads(query text, file ids) ->
    {file_id: similarity}` of the files' own vectors (None: no file vectors); `own_connection`: it
    reads on a connection of its own, so it can run beside the keyword list."""
    run: object
    own_connection: bool = False
    heads: object = None


def _load_chunks(con, ids: list) -> dict:
    out = {}
    for part, marks in db.in_batches(ids):
        rows = con.execute(
            "SELECT c.id, c.file_id, c.start_line, c.end_line, c.breadcrumb, c.body, "
            "f.source, f.relpath, f.date FROM chunks c JOIN files f ON f.id = c.file_id "
            f"WHERE c.id IN ({marks})", part)
        out.update({r["id"]: r for r in rows})
    return out


def shape(cfg, q: Query, got: Candidates, n: int, explain: bool, snippets: bool = True) -> list:
    """The files by tier, then relevance × recency; each shows its best section (and its next, when
    close): up to `n` Hits, with no snippet when `snippets` is false (a scorer needs only files)."""
    roots = {s.name: Path(s.path) for s in cfg.sources}
    today = _date.today()
    qt = QueryTerms(q)
    final = []
    for r in got.files:
        row = got.rows[r.sections[0][0]]
        factor = recency_factor(row["date"], today) if got.recency else 1.0
        final.append((final_score(r.tier, r.relevance, factor), factor, r))
    final.sort(key=lambda x: -x[0])        # stable: the fusion's order among equals
    hits = []
    for rank, (score, factor, r) in enumerate(final, start=1):
        for cid in fusion.shown_sections(r.sections):
            if len(hits) >= n:
                return hits
            row = got.rows[cid]
            root = roots.get(row["source"])
            hit = Hit(source=row["source"], relpath=row["relpath"],
                      path=str(root / row["relpath"]) if root else row["relpath"],
                      line=row["start_line"], end_line=row["end_line"], breadcrumb=row["breadcrumb"],
                      score=score, date=row["date"] or "", chunk_id=cid)
            if snippets:
                hit.snippet, hit.highlights = snippet_spans(point_at_section(hit, row["body"], qt), qt)
            if explain:
                hit.explain = {"lists": r.lists, "scaled": round(r.relevance, 6), "recency": round(factor, 4),
                               "rank": rank}
            hits.append(hit)
    return hits


def search(con, cfg, query: str | Query, *, n: int = 10, mode: str = "auto", rerank: bool = False,
           explain: bool = False, remotes: bool = True, hooks: SearchHooks | None = None,
           vector_search: VectorList | None = None, snippets: bool = True) -> SearchResult:
    """Search the notes. `vector_search` stands in for the provider's vector list (tests); else it
    is built only when the route reads vectors. `snippets=False` leaves each hit's snippet empty
    (`recall eval` scores files only)."""
    hooks = hooks or SearchHooks()
    q = query if isinstance(query, Query) else parse_query(query)
    if n < 1:
        raise RecallError("-n must be at least 1")
    if hooks.require_open is not None:
        hooks.require_open(con, cfg)
    q = spellings(con, q)
    route = route_for(mode, q, cfg.embedding.provider)
    # the remotes are asked now, in the background, and merged in at the end; bad input asks nobody
    merge_remotes = hooks.ask_remotes(cfg, q.text, n, mode) if remotes and hooks.ask_remotes is not None else None
    started = time.perf_counter()
    notices: list = []
    if route.vectors and vector_search is None:
        vector_search = vector_searcher(con, cfg, hooks.load_values)
    # the lists and the chunks they name are read in one snapshot; the vector list reads on its own
    # connection, so a chunk it names that this snapshot lacks (an index run between) reads again.
    # A rerank writes its paid request to the ledger on this connection: no snapshot then.
    own = not con.in_transaction and not rerank and (not route.vectors or vector_search.own_connection)
    for attempt in (1, 2):
        if own:
            con.execute("BEGIN")
        try:
            hits, got = ranked_hits(con, cfg, q, route, n, explain, rerank, vector_search, notices,
                                    mode == "auto", hooks.load_values, snippets=snippets)
            again = own and attempt == 1 and any(cid not in got.rows for cid in got.vector_ids)
        finally:
            if own:
                con.execute("COMMIT")
        if not again:
            break
    result = SearchResult(query=q.text, mode=mode, route=got.route, hits=hits, notices=notices)
    if hooks.pins is not None:
        hooks.pins(con, cfg, result)
    if merge_remotes is not None:
        merge_remotes(result)
    if explain:
        result.notices.append(f"route: {got.route}; {counted(len(got.files), 'file')}; "
                              f"{(time.perf_counter() - started) * 1000:.1f} ms")
    return result


@dataclass
class Candidates:
    """A route's lists fused into files: the route taken (a hybrid search may turn keyword-first),
    the files [fusion.Ranked], the chunk rows they name, the vector list's chunk ids, whether the
    lists ran out, and whether recency weighs."""
    route: Route
    files: list
    rows: dict
    vector_ids: list
    exhausted: bool
    recency: bool


def candidates(con, q: Query, route: Route, pool: int, vector_search: VectorList | None) -> Candidates:
    """The route's lists, read `pool` deep and fused into files. A hybrid search whose keyword list
    holds a lookup's match (or the whole query word for word) is keyword-first."""
    if not route.vectors:
        kw, vec = keyword_ranked(con, q, pool), []
    elif route.kind == "hybrid" and vector_search.own_connection:
        vec, kw = _side_by_side(con, q, pool, vector_search)
    else:
        vec = vector_search.run(q.text, pool)
        kw = keyword_ranked(con, q, pool) if route.kind == "hybrid" else []
    rows = _load_chunks(con, list(dict.fromkeys([c for c, _, _ in kw] + [c for c, _ in vec])))
    file_of = {cid: r["file_id"] for cid, r in rows.items()}
    exhausted = len(kw) < pool and len(vec) < pool
    ids = [c for c, _ in vec]
    first = _keyword_first(con, q, kw) if route.kind == "hybrid" else ""
    if first or not route.vectors:
        route = Route("hybrid", first) if first else route
        return Candidates(route, fusion.keyword_first(kw, vec, file_of), rows, ids, exhausted, True)
    heads = vector_search.heads(q.text, sorted(set(file_of.values()))) if vector_search.heads else {}
    return Candidates(route, fusion.fuse(kw, vec, file_of, heads), rows, ids, exhausted, False)


def _keyword_first(con, q: Query, kw: list) -> str:
    """Why a hybrid search keeps the keyword list's order (vectors' other files after it), or "":
    a lookup, a note holding the whole query word for word, or a query of one or two words naming
    the keyword list's first note (weak similarities of so few words never push it down)."""
    if q.lookup:
        return q.lookup
    if any("word_for_word" in info for _, _, info in kw):
        return "word for word"
    if kw and len(q.tokens) <= SHORT_QUERY and names(con, q, kw[0][0]):
        return "short query"
    return ""


def ranked_hits(con, cfg, q: Query, route: Route, n: int, explain, rerank, vector_search, notices, auto,
                load_values, *, snippets: bool = True) -> tuple:
    """(hits, Candidates): the fused files shaped — the lists read fusion.DEPTH deep whatever `n`
    (deeper only when the page is not full), so every page size ranks alike — then reranked."""
    want = max(n, RERANK_POOL) if rerank else n
    pool = fusion.DEPTH
    while True:
        try:
            got = candidates(con, q, route, pool, vector_search)
        except RecallError as exc:
            if not auto or not route.vectors:
                raise
            notices.append(f"keyword results only: {exc}")
            route = Route("keyword", "vector search unavailable")
            continue
        route = got.route
        hits = shape(cfg, q, got, want, explain, snippets)
        if len(hits) >= want or got.exhausted:
            break
        from ..embed.vectors import VEC_K_MAX  # only when over-fetching: a keyword search never loads vectors
        if pool >= VEC_K_MAX:
            break
        pool = min(pool * 4, VEC_K_MAX)
    if rerank and hits:
        hits = rerank_hits(con, cfg, q, hits, explain, load_values)
    hits = hits[:n]
    if explain:
        for h in hits:
            h.explain["route"] = str(got.route)
    return hits, got


def _side_by_side(con, q: Query, pool: int, vector_search: VectorList):
    """The vector list in a thread (its own connection; SQLite and numpy release the GIL) while
    this thread runs the keyword list."""
    import threading
    box: dict = {}

    def work():
        try:
            box["vec"] = vector_search.run(q.text, pool)
        except BaseException as exc:        # noqa: BLE001 — re-raised in the caller's thread
            box["err"] = exc
    worker = threading.Thread(target=work, name="recall-vectors", daemon=True)
    worker.start()
    kw = keyword_ranked(con, q, pool)
    worker.join()
    if "err" in box:
        raise box["err"]
    return box["vec"], kw


def vector_searcher(con, cfg, load_values=None) -> VectorList:
    """The configured model's vector list, on a connection of its own (None for :memory:); the
    query is embedded (or read from the cache) only once vectors are known to exist."""
    path = next((r[2] for r in con.execute("PRAGMA database_list") if r[1] == "main"), "")
    side = None
    if path:
        # the same SQLite library as `con`: two libraries on one file in one process break its locks
        side = db.connect(path, readonly=True, vectors=db.has_vec(con) or type(con).__module__.startswith("sqlean"))
        side.execute("PRAGMA mmap_size=1073741824")      # sqlite-vec scans every vector: map, don't copy
    con_ = side or con

    def model() -> tuple:
        """(model id, dimension) of the configured model's vectors; an error when there are none."""
        from ..embed import providers as embed
        fp = embed.fingerprint(cfg.embedding, "document")
        mid = embed.model_id(con_, fp, create=False)
        row = con_.execute("SELECT dim FROM embeddings WHERE model_id=? LIMIT 1", (mid,)).fetchone()
        if row is None:
            raise RecallError(f"no vectors for {fp.provider}/{fp.model} yet", "run 'recall index' to embed the notes")
        return mid, row[0]

    @functools.cache
    def vector(query: str) -> list:
        return query_vector(con_, cfg, query, load_values)

    def run(query: str, limit: int) -> list:
        from ..embed.vectors import VEC_K_MAX, VectorStore
        mid, dim = model()
        store = VectorStore(con_, mid, dim)
        k = limit
        while True:         # a long chunk has a vector per window: look deeper until `limit` chunks
            near = store.knn(vector(query), k)
            found = store.chunks_for(near)
            if len(found) >= limit or len(near) < k or k >= VEC_K_MAX:
                return found
            k = min(k * 2, VEC_K_MAX)

    def heads(query: str, file_ids: list) -> dict:
        from ..embed.vectors import cosines
        mid, _ = model()
        q = vector(query)
        found = []
        # a subquery a file: as a join, SQLite may scan the model's every vector for the files
        sql = ("SELECT f.id, (SELECT e.vector FROM embeddings e WHERE e.model_id=? AND e.hash = f.head_hash) "
               "FROM files f WHERE f.id IN ({})")
        for part, marks in db.in_batches(file_ids):
            found += [(fid, blob) for fid, blob in con_.execute(sql.format(marks), [mid, *part]) if blob is not None]
        return dict(zip((fid for fid, _ in found), cosines(q, [blob for _, blob in found]))) if found else {}
    return VectorList(run, own_connection=side is not None, heads=heads)


def query_key(query: str) -> str:
    """The query-vector cache's key: a hash, so a token pasted by mistake is not kept as text."""
    import hashlib
    return hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()


def query_vector(con, cfg, query: str, load_values=None) -> list:
    """The query's vector: from the DB cache when this model embedded it before, else from the
    provider — then cached."""
    from ..embed import providers as embed
    from ..embed.vectors import pack, unpack
    fp = embed.fingerprint(cfg.embedding, "query")
    mid = embed.model_id(con, fp, create=False)
    if mid is not None:
        row = con.execute("SELECT vector FROM query_vectors WHERE model_id=? AND query=?",
                          (mid, query_key(query))).fetchone()
        if row is not None:
            return unpack(row[0])
    provider = embed.provider_for(cfg, con, load_values)
    vectors, _ = embed.paid_call(con, cfg, provider, "query", [query], lambda: provider.embed([query], "query"))
    try:
        with db.waiting_at_most(con), db.transaction(con):     # a cache: another writer's moment skips it
            mid = embed.model_id(con, fp)
            con.execute("INSERT OR REPLACE INTO query_vectors VALUES (?,?,?,?)",
                        (mid, query_key(query), pack(vectors[0]), time.time()))
            con.execute("DELETE FROM query_vectors WHERE used_at < (SELECT used_at FROM query_vectors "
                        "ORDER BY used_at DESC LIMIT 1 OFFSET ?)", (QUERY_CACHE_MAX - 1,))
    except Exception as exc:        # the cache is an optimisation; a busy DB must not fail a search
        if not db.is_sqlite_error(exc):
            raise
    return vectors[0]


def rerank_hits(con, cfg, q: Query, hits: list, explain: bool, load_values=None) -> list:
    """Reorder shaped hits by Voyage's reranker (one paid request, checked against the cap)."""
    from ..embed import providers as embed
    provider = embed.reranker_for(cfg, con, load_values)
    rows = _load_chunks(con, [h.chunk_id for h in hits])
    docs = [embed.document_text(rows[h.chunk_id]["breadcrumb"], rows[h.chunk_id]["body"])[:8000] for h in hits]
    order, _ = embed.paid_call(con, cfg, provider, "rerank", [q.text] * len(docs) + docs,
                               lambda: provider.rerank(q.text, docs, len(docs)), model=provider.rerank_model)
    scores = dict(order)
    exact = holders(con, q)
    for i, h in enumerate(hits):
        h.score = scores.get(i, 0.0)
        if explain:
            h.explain["rerank"] = {"score": round(h.score, 4), "before": i + 1}
    # as in fusion: the notes naming the query's identifiers stay first, reranked among themselves
    return [hits[i] for i in sorted(range(len(hits)),
                                    key=lambda i: (hits[i].chunk_id not in exact, -scores.get(i, -1.0), i))]


def needs_vectors(cfg, query: Query, mode: str) -> bool:
    """Whether this search takes the vector path (so the caller opens the DB for sqlite-vec)."""
    try:
        return route_for(mode, query, cfg.embedding.provider).vectors
    except RecallError:
        return False
