"""The keyword list: BM25 over the chunks (heading path weighted), and which chunks hold the query's
identifiers or the whole query word for word."""
from __future__ import annotations

import re
from dataclasses import replace

from ..db import in_batches
from . import terms
from .query import Query

NAMED_CHECK = 2000            # identifier hits checked for a file named after the identifier
PHRASE_CHECK = 50             # keyword candidates checked for holding the whole query word for word
SPELLED = 3                   # tokens in a query short enough to look its identifiers up in any spelling
CRUMB_WEIGHT = 3.0            # BM25 weight of the heading path against the body's 1.0
PATH_WEIGHT = 1.0             # and the file's path (runbooks/restore-etcd.md)
WEIGHTS = (CRUMB_WEIGHT, 1.0, PATH_WEIGHT)       # chunks_fts's columns: breadcrumb, body, path
BM25 = f"bm25(chunks_fts, {', '.join(map(str, WEIGHTS))})"
_MATCH = f"SELECT rowid, {BM25} FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY {BM25} LIMIT ?"
_HELD = "SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT 1"
_HOLDERS = "SELECT rowid FROM idents_fts WHERE idents_fts MATCH ? ORDER BY rowid"
# the terms of a key met as a whole token (terms.token) in a chunk held now
_SPELLED = "SELECT term FROM idents_vocab WHERE term > ? AND term < ? AND doc > 0 ORDER BY term"


def bm25_list(con, q: Query, limit: int) -> dict:
    """{chunk_id: BM25 (≥ 0 is better)}: the best `limit` chunks for the OR of the query's phrases."""
    if not q.phrases:
        return {}
    # the chunks holding every term the notes hold first (a word in no note adds to no score): when
    # they are enough, the OR (which scores every chunk holding any of them) is not run
    held = [p for p in q.phrases if con.execute(_HELD, (f'"{p}"',)).fetchone()] if len(q.phrases) > 1 else []
    if len(held) > 1:
        found = con.execute(_MATCH, (" AND ".join(f'"{p}"' for p in held), limit)).fetchall()
        if len(found) >= limit:
            return {cid: -r for cid, r in found}
    return {cid: -r for cid, r in con.execute(_MATCH, (q.fts("OR"), limit))}


def spellings(con, q: Query) -> Query:
    """A short query read as the index spells its identifiers: a token held in another case or
    joined otherwise (MAXSURGE, max_surge for maxSurge; kubepodcrashlooping; "inc 10963" for
    INC-10963) stands for those spellings. Made of identifiers and at most one other word (an
    error code and the word beside it), it is then a lookup, as typed as written; else unchanged."""
    if len(q.tokens) > SPELLED or not q.tokens:
        return q
    found, words = [], 0
    for token in q.tokens:
        spelled = _spelled(con, token)
        found += spelled
        words += not spelled
    if not found and len(q.tokens) > 1:
        found, words = _spelled(con, "".join(q.tokens)), 0
    if not found or words > 1:
        return q
    phrases = [" ".join(terms.words(t)) for t in found]
    return replace(q, identifiers=tuple(dict.fromkeys(q.identifiers + tuple(found))),
                   phrases=tuple(dict.fromkeys(q.phrases + tuple(p for p in phrases if p))),
                   lookup=q.lookup or "identifier")


def _spelled(con, token: str) -> list:
    """The index's spellings of `token`: an identifier as typed when the index holds it so, else
    the whole tokens of its key (a host name's dotted prefixes have none: "ceph" of ceph.conf is
    a word)."""
    term = token.lower().strip("-.")
    if terms.is_identifier(token.strip("-.")) and _holding(con, term, limit=1):
        return [term]
    k = terms.key(token)
    return [t.split("~", 1)[1] for (t,) in con.execute(_SPELLED, (f"{k}~", f"{k}\x7f"))] if len(k) >= 3 else []


def _holding(con, term: str, limit: int = -1) -> list:
    """The chunks holding identifier `term`, whole or as a host name's dotted prefix."""
    query = terms.held(term)
    return [cid for (cid,) in con.execute(f"{_HOLDERS} LIMIT {limit}", (query,))] if query else []


def holders(con, q: Query) -> dict:
    """{chunk_id: how many of the query's identifiers it holds exactly (spellings of one count
    once)}."""
    held: dict = {}
    for term in q.identifiers:
        for cid in _holding(con, term):
            held.setdefault(cid, set()).add(terms.key(term))
    return {cid: len(keys) for cid, keys in held.items()}


def _named_after(con, q: Query, exact: dict) -> None:
    """A page whose name holds the identifier counts as holding one identifier more than pages that
    only mention it, and one more again when its name starts with it (INC-10963-db-failover.md, the
    incident's own page, before meetings/…-review-INC-10963.md)."""
    if not q.identifiers:
        return
    wanted = re.compile("|".join(rf"(?<![a-z0-9]){re.escape(i)}(?![a-z0-9])" for i in q.identifiers))
    for part, marks in in_batches(list(exact)):
        for cid, rel in con.execute(f"SELECT c.id, f.relpath FROM chunks c JOIN files f ON f.id = c.file_id "
                                    f"WHERE c.id IN ({marks})", part):
            found = wanted.search(rel.rsplit("/", 1)[-1].lower())
            if found:
                exact[cid] += 1 + (found.start() == 0)


def names(con, q: Query, chunk_id: int) -> bool:
    """Whether every word of the query is in the chunk's heading path or its file's path: the
    query names the note ("ops" → ops/ops-handbook.md)."""
    if not q.phrases:
        return False
    match = f"{{breadcrumb path}} : ({q.fts('AND')})"
    return con.execute("SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid = ?",
                       (match, chunk_id)).fetchone() is not None


def word_for_word(con, q: Query, candidates: list) -> set:
    """The candidates holding the whole query word for word (a pasted message), read here: an FTS5
    phrase query reads every position of common words."""
    if len(q.tokens) < 3 or not candidates:
        return set()
    part = candidates[:PHRASE_CHECK]
    phrase = " " + " ".join(q.words) + " "
    rows = con.execute(f"SELECT id, breadcrumb, body FROM chunks WHERE id IN ({','.join('?' * len(part))})", part)
    return {cid for cid, crumb, body in rows if phrase in " " + " ".join(terms.words(crumb + "\n" + body)) + " "}


def keyword_ranked(con, q: Query, limit: int) -> list:
    """[(chunk_id, bm25 ≥ 0, info)] best first: the holders of the query's identifiers (or of the
    whole query word for word) first — INC-10963 beats "INC 10963" — then BM25. `info` holds
    `exact_identifiers`, `bm25` and `word_for_word`."""
    exact = holders(con, q)
    bm25 = bm25_list(con, q, limit)
    missing = [cid for cid in exact if cid not in bm25] if q.phrases else []
    for part, marks in in_batches(missing):
        # `+rowid`: one MATCH pass filtered here; a plain `rowid IN` makes FTS5 run the MATCH once per id
        rows = con.execute(f"SELECT rowid, {BM25} FROM chunks_fts WHERE chunks_fts MATCH ? "
                           f"AND +rowid IN ({marks})", [q.fts("OR")] + part)
        bm25.update({cid: -r for cid, r in rows})
    if exact and len(exact) <= NAMED_CHECK:
        _named_after(con, q, exact)
    whole = word_for_word(con, q, list(bm25))
    for cid in whole:
        exact[cid] = exact.get(cid, 0) + 1
    ranked = [(cid, max(bm25.get(cid, 0.0), 0.0),
               {"exact_identifiers": exact.get(cid, 0), "bm25": round(bm25.get(cid, 0.0), 4),
                **({"word_for_word": True} if cid in whole else {})})
              for cid in set(bm25) | set(exact)]
    ranked.sort(key=lambda x: (-x[2]["exact_identifiers"], -x[1], x[0]))
    return ranked[:max(limit, len(exact))]
