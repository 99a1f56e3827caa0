"""The exact top-k of FTS5's bm25() for an AND (or an OR) of common words, from their postings
(postings.py) rather than by scoring every chunk that holds them all (or any)."""
from __future__ import annotations

import heapq
import math
import sys
from array import array

# bm25()'s column weights the postings are built with (keyword.py's WEIGHTS: a test holds them
# equal; were they not, the search would ask FTS5 until they are)
WEIGHTS = (3.0, 1.0, 1.0)
K1, B = 1.2, 0.75           # FTS5's bm25() constants (fts5_aux.c)
SMALL = 128                 # a branch holding this few chunks is scored chunk by chunk
LIST_AT = 256               # … and this few is carried as a list of ids rather than a bitmap
FILTER_MAX = 400            # ids filtered one by one rather than a bitmap scanned
IDF_FLOOR = 1e-6            # FTS5's idf for a term in more than half the rows
MAX_TERMS = 32              # a longer query (a pasted message) is left to FTS5
ANY_MAX = 4                 # an OR of more common words (2**n - 1 ANDs) is left to FTS5
STATS = {"served": 0}       # fast-path answers given (tests check the path is taken)

_NONZERO = bytes([0] + [1] * 255)      # a translation table: each non-zero byte → 1
_BITS = [tuple(i for i in range(8) if byte >> i & 1) for byte in range(256)]


# -- bitmaps and FTS5's own numbers (shared with postings.py) ------------------------------------

def set_bits(bits: int) -> list:
    """The set bits of `bits`, ascending; the non-zero bytes found by bytes.find over a translated
    copy (memchr speed, where a regex scan costs the same however few bits are set)."""
    raw = bits.to_bytes((bits.bit_length() + 7) >> 3, "little")
    flags = raw.translate(_NONZERO)
    out = []
    pos = flags.find(1)
    while pos >= 0:
        base = pos << 3
        out.extend(base + b for b in _BITS[raw[pos]])
        pos = flags.find(1, pos + 1)
    return out


_BIT_COUNT = hasattr(0, "bit_count")


def bit_count(bits: int) -> int:
    return bits.bit_count() if _BIT_COUNT else bin(bits).count("1")


def unpack(blob: bytes) -> int:
    return int.from_bytes(blob, "little")


def varints(blob: bytes) -> list:
    """SQLite's big-endian varints (FTS5's averages record and docsize rows)."""
    out, i, n = [], 0, len(blob)
    while i < n:
        v = 0
        for k in range(9):
            byte = blob[i]
            i += 1
            if k == 8:
                v = (v << 8) | byte
                break
            v = (v << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(v)
    return out


def totals(con) -> tuple:
    """(rows, tokens over all columns) from FTS5's averages record: what bm25() reads."""
    row = con.execute("SELECT block FROM chunks_fts_data WHERE id=1").fetchone()
    if not row or not row[0]:
        return 0, 0
    vals = varints(bytes(row[0]))
    return vals[0], sum(vals[1:])


def tokenizer_clause(con) -> str:
    """`, tokenize="…"` as chunks_fts was made with (read without a regex: compiling one costs a new process)."""
    sql = con.execute("SELECT sql FROM sqlite_master WHERE name='chunks_fts'").fetchone()[0]
    at = sql.find("tokenize")
    if at < 0:
        return ""
    rest = sql[at + len("tokenize"):].lstrip().lstrip("=").lstrip()
    end = rest.find(rest[:1], 1) if rest[:1] in ("'", '"') else -1
    return f", tokenize={rest[:end + 1]}" if end > 0 else ""


def state_key(weights) -> str:
    """What the postings depend on besides the index: the weights, and the byte order of the
    arrays stored (a DB copied to another machine is rebuilt rather than misread)."""
    return ",".join(repr(float(w)) for w in weights) + ";" + sys.byteorder


def load_lengths(blob: bytes):
    """A read-only view of the stored lengths (no copy), indexed by chunk id."""
    return memoryview(blob)[1:].cast(blob[:1].decode())


# -- the query ------------------------------------------------------------------------------------

def _stems(con, words: list) -> list:
    """Each query word as the index holds it (the same tokenizer: porter, diacritics …), or []
    when one is not a single term there."""
    con.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.recall_stem USING fts5(x{tokenizer_clause(con)})")
    con.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.recall_stem_v USING fts5vocab(temp, recall_stem, instance)")
    con.execute("INSERT INTO temp.recall_stem(rowid, x) VALUES " + ",".join("(?,?)" for _ in words),
                [v for i, w in enumerate(words, start=1) for v in (i, w)])
    got: dict = {}
    for doc, term in con.execute("SELECT doc, term FROM temp.recall_stem_v"):
        got.setdefault(doc, []).append(term)
    con.execute("DELETE FROM temp.recall_stem")
    out = [got.get(i, []) for i in range(1, len(words) + 1)]
    return [t[0] for t in out] if all(len(t) == 1 for t in out) else []


def top_k(con, phrases: list, weights, limit: int, any_of: bool = False):
    """[(chunk_id, score)] best first (ties by id), exactly what `SELECT rowid, bm25(…) … MATCH
    '"p1" AND "p2" …' ORDER BY bm25 LIMIT limit` gives (score = −bm25; `any_of`: the OR), or None when
    this path does not apply: a phrase of several words, a term without postings, chunks changed since
    the postings were made, fewer than `limit` chunks holding every term (AND), more than ANY_MAX (OR)."""
    if not phrases or len(phrases) > MAX_TERMS or not all(p.isalnum() for p in phrases):
        return None                          # a phrase of several words, a prefix, any FTS5 syntax
    own = not con.in_transaction
    if own:
        con.execute("BEGIN")                 # the postings, the pending list and FTS5's totals: one snapshot
    try:
        return _top_k(con, phrases, [float(w) for w in weights], limit, any_of)
    finally:
        if own:
            con.execute("COMMIT")


def top_k_any(con, phrases: list, weights, limit: int):
    """top_k for the OR query `"p1" OR "p2" …`: every subset's AND, a chunk's best; a term no chunk
    holds adds nothing to any score, so it is left out."""
    return top_k(con, phrases, weights, limit, any_of=True)


def _top_k(con, phrases, weights, limit, any_of):
    state = con.execute("SELECT rows, weights, lengths FROM common_state WHERE id=1").fetchone()
    if state is None or state[1] != state_key(weights):
        return None
    if con.execute("SELECT 1 FROM common_dirty LIMIT 1").fetchone():
        return None
    stems = _stems(con, phrases)
    if len(stems) != len(phrases) or len(set(stems)) != len(stems):
        return None
    rows, tokens = totals(con)
    if rows != state[0] or rows == 0:
        return None
    avgdl = tokens / rows
    terms = []                              # per phrase: idf, [(f, [blobs], dmin)] by f descending
    for phrase, stem in zip(phrases, stems):
        groups = con.execute("SELECT f, n, dmin, bits, ids FROM common_postings WHERE term=? ORDER BY f DESC",
                             (stem,)).fetchall()
        if any_of and not groups and not _held(con, phrase):
            continue                        # in no chunk: nothing to an OR's scores
        if len(groups) < 2 or groups[-1][0] != 0.0:
            return None
        union = groups.pop()
        df = sum(g[1] for g in groups)
        idf = math.log((rows - df + 0.5) / (df + 0.5))
        terms.append(_Term(idf if idf > 0.0 else IDF_FLOOR, groups, union[3]))
    if any_of and len(terms) > ANY_MAX:
        return None
    found = (_best_of_any if any_of else _best)(terms, load_lengths(state[2]), avgdl, limit)
    if found is not None:
        STATS["served"] += 1
    return found


def _held(con, word: str) -> bool:
    """Whether any chunk holds the word (as FTS5 matches it: the same tokenizer)."""
    return con.execute("SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT 1", (f'"{word}"',)).fetchone() is not None


def _best_of_any(terms: list, lengths, avgdl: float, limit: int) -> list:
    """The OR's top `limit`: the best of each subset's AND, scored on its own terms. A chunk's full
    score is its AND over exactly the terms it holds; one that is not in that AND's top `limit` has
    `limit` chunks above it there, each scoring at least as much in the OR, so it is not in the OR's."""
    from itertools import combinations
    # each term's highest part (its highest frequency at its shortest chunk): a subset's chunks score
    # at most their sum, so the subsets go highest first, and stop once one cannot reach the list
    tops = [t.idf * _part(t.groups[0][0], min(g[2] for g in t.groups), avgdl) for t in terms]
    subsets = sorted((s for size in range(1, len(terms) + 1) for s in combinations(range(len(terms)), size)),
                     key=lambda s: -sum(tops[i] for i in s))
    best: dict = {}
    for subset in subsets:
        if len(best) >= limit and sum(tops[i] for i in subset) * (1 + 1e-9) < heapq.nlargest(limit, best.values())[-1]:
            break
        for cid, score in _best([terms[i] for i in subset], lengths, avgdl, limit, short=True):
            if score > best.get(cid, -1.0):
                best[cid] = score
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))[:limit]


def _part(f: float, d: float, avgdl: float) -> float:
    return (f * (K1 + 1.0)) / (f + K1 * (1 - B + B * d / avgdl))


class _Term:
    """One query term's frequency groups (f descending), unpacked as they are first needed."""

    def __init__(self, idf: float, groups: list, union: bytes):
        self.idf, self.groups = idf, groups          # [(f, n, dmin, packed bitmap, packed ids or None)]
        self.union_raw = bytes(union)                # every chunk holding the term
        self.by_size = sorted(range(len(groups)), key=lambda j: -groups[j][1])
        self.raw = [bytes(g[3]) for g in groups]     # each group's bitmap bytes (SQLite gives bytes: no copy)
        self._int: dict = {}
        self._ids: dict = {}
        self._union = None

    def bits(self, j: int) -> int:
        got = self._int.get(j)
        if got is None:
            got = self._int[j] = int.from_bytes(self.raw[j], "little")
        return got

    def ids(self, j: int):
        """The group's chunk ids when it keeps them (a group of few), else None."""
        if self.groups[j][4] is None:
            return None
        got = self._ids.get(j)
        if got is None:
            got = self._ids[j] = array("I")
            got.frombytes(self.groups[j][4])
        return got

    def union(self) -> int:
        if self._union is None:
            self._union = unpack(self.union_raw)
        return self._union

    def group_of(self, cid: int):
        """The index of the group holding the chunk, or None (the chunk lacks the term)."""
        pos, bit = cid >> 3, 1 << (cid & 7)
        if pos >= len(self.union_raw) or not self.union_raw[pos] & bit:
            return None
        for j in self.by_size:
            raw = self.raw[j]
            if pos < len(raw) and raw[pos] & bit:
                return j
        return None


def _filter(ids, raw: bytes) -> list:
    """The ids whose bit is set in the bitmap bytes `raw`."""
    n = len(raw)
    return [c for c in ids if (c >> 3) < n and raw[c >> 3] >> (c & 7) & 1]


def _extract(bits: int, hint) -> list:
    """The chunk ids in `bits`: filtered from `hint` (the ids of a small group all of them are
    in) when that is cheaper than scanning the bitmap."""
    if hint is not None and len(hint) <= FILTER_MAX:
        return _filter(hint, bits.to_bytes((bits.bit_length() + 7) >> 3, "little"))
    return set_bits(bits)


def _best(terms: list, lengths, avgdl: float, limit: int, short: bool = False):
    """Branch and bound over the terms, highest idf first: a node is one frequency group per term so
    far (the AND of their bitmaps), bounded by those frequencies plus each other term's highest at the
    shortest length; a node bounded below the limit-th score is cut with its lower siblings, one of
    few chunks is scored chunk by chunk. A term at FTS5's idf floor only filters, never branches."""
    m = len(terms)
    dlow = max(min(g[2] for g in t.groups) for t in terms)
    ub = [[t.idf * _part(g[0], dlow, avgdl) for g in t.groups] for t in terms]
    order = sorted((i for i in range(m) if terms[i].idf > IDF_FLOOR), key=lambda i: -terms[i].idf)
    if not order:
        order = list(range(m))           # only the floor's terms: they decide, so they branch
    root = -1
    for i in range(m):
        if i not in order:
            root &= terms[i].union()
    mb = len(order)
    rest = [0.0] * (mb + 1)
    for depth in range(mb - 1, -1, -1):
        rest[depth] = rest[depth + 1] + ub[order[depth]][0]
    floor = sum(ub[i][0] for i in range(m) if i not in order)
    top: list = []                     # min-heap of (score, -id): the best `limit` so far

    def score(ids, fixed: dict) -> None:
        known = [(terms[i].idf, terms[i].groups[j][0]) for i, j in fixed.items()]
        known += [(terms[i].idf, terms[i].groups[0][0]) for i in range(m) if i not in fixed]   # their highest
        for cid in ids:
            d = lengths[cid]
            if len(top) == limit:      # a chunk that cannot reach the list is not looked up further
                kd = K1 * (1 - B + B * d / avgdl)
                est = 0.0
                for idf, f in known:
                    est += idf * ((f * (K1 + 1.0)) / (f + kd))
                if est * (1 + 1e-9) < top[0][0]:
                    continue
            s = 0.0
            for i, t in enumerate(terms):
                j = fixed.get(i)
                if j is None:
                    j = t.group_of(cid)
                    if j is None:
                        break          # a chunk without every term is not in the AND
                f = t.groups[j][0]
                s += t.idf * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * d / avgdl)))
            else:
                item = (s, -cid)
                if len(top) < limit:
                    heapq.heappush(top, item)
                elif item > top[0]:
                    heapq.heapreplace(top, item)

    def visit(depth: int, node, bound: float, fixed: dict, hint, cap: int) -> None:
        i = order[depth]
        t = terms[i]
        last = depth + 1 == mb
        for j in range(len(t.groups)):
            b = bound + ub[i][j]
            if len(top) == limit and (b + rest[depth + 1] + floor) * (1 + 1e-9) < top[0][0]:
                break                  # the lower frequencies bound lower still
            fixed[i] = j
            if isinstance(node, list):     # few chunks: filter them by the group's bytes
                child = _filter(node, t.raw[j])
                if child:
                    if last or len(child) <= SMALL:
                        score(child, fixed)
                    else:
                        visit(depth + 1, child, b, fixed, None, len(child))
            else:
                child = node & t.bits(j)
                if child:
                    ids = t.ids(j)
                    h = ids if ids is not None and (hint is None or len(ids) < len(hint)) else hint
                    # before 3.10 no int.bit_count: a bound on the size decides (as well, a bit later)
                    c = bit_count(child) if _BIT_COUNT else min(cap, t.groups[j][1])
                    if last or c <= SMALL:
                        score(_extract(child, h), fixed)
                    else:
                        visit(depth + 1, _extract(child, h) if c <= LIST_AT else child, b, fixed, h, c)
            del fixed[i]

    visit(0, root, 0.0, {}, None, 1 << 62)
    if len(top) < limit and not short:
        return None                   # fewer chunks hold every term: the caller's OR query decides
    return [(-nid, s) for s, nid in sorted(top, reverse=True)]
