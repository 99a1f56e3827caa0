"""Ranking files: each list's best chunk per file, a file's own vector beside its best window, the
lists scaled over a fixed depth and fused, the identifier lift, file support, recency. Every constant
here was chosen on both dev sets (docs/BENCHMARKS.md, "Ranking files on both dev sets")."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date as _date

DEPTH = 100                   # chunks each list is read to and scaled over, whatever the page size
PER_FILE = 2                  # sections of one file on a page of hits
SECOND_SHARE = 0.5            # a file's second section is shown when it scores at least this share of its best
RRF_K = 60                    # reciprocal rank fusion's k (the vault's find, remotes' hits)
FUSION_WEIGHTS = {"vector": 1.0, "keyword": 0.2}
IDENT_LIFT = 0.1              # a file holding one of a question's identifiers: a bounded lift, not a tier
HEAD_WEIGHT = 0.25            # a file's own vector's share of its vector score; its best window, the rest
FILE_SUPPORT = 0.1            # keyword route: share of a file's next sections' BM25 added to its best
FILE_SUPPORT_N = 2
# Recency multiplies relevance (BM25, keyword route), never the identifier tier: at a 0.95 floor it
# can lift a newer note only over one less than ~5% more relevant — it breaks near-ties.
RECENCY_FLOOR = 0.95
RECENCY_HALF_LIFE_DAYS = 730


@dataclass
class Ranked:
    """A file the lists found: its tier (identifiers held, keyword route), relevance, its sections
    [(chunk_id, score)] best first, and what each list said of it."""
    file_id: int
    tier: int
    relevance: float
    sections: list
    lists: dict = field(default_factory=dict)


def recency_factor(date: str, today: _date | None = None) -> float:
    """A small multiplicative prior: 1.0 today, sliding toward RECENCY_FLOOR with age."""
    try:
        then = _date.fromisoformat(str(date)[:10])
    except ValueError:
        return RECENCY_FLOOR
    age = max(0, ((today or _date.today()) - then).days)
    return RECENCY_FLOOR + (1 - RECENCY_FLOOR) * 0.5 ** (age / RECENCY_HALF_LIFE_DAYS)


def rrf(lists: dict) -> dict:
    """Reciprocal rank fusion: {name: [id, …]} → {id: (score, {name: rank})}."""
    fused: dict = {}
    for name, ids in lists.items():
        for rank, cid in enumerate(ids, start=1):
            score, ranks = fused.get(cid, (0.0, {}))
            ranks[name] = rank
            fused[cid] = (score + 1.0 / (RRF_K + rank), ranks)
    return fused


def final_score(tier: int, relevance: float, factor: float) -> float:
    """The identifier tier, then relevance × recency squashed into [0, 1): one float that sorts
    as (tier, relevance × recency) — recency never lifts a note over one naming the identifier."""
    r = max(relevance, 0.0) * factor
    return tier + r / (1.0 + r)


def _scale(values: dict, within: set) -> dict:
    """{id: value min-max scaled by the bounds of the ids `within` (the list's first DEPTH), in [0, 1]}."""
    inside = [values[i] for i in within] or list(values.values())
    lo, hi = min(inside, default=0.0), max(inside, default=0.0)
    return {i: min(1.0, max(0.0, (v - lo) / (hi - lo))) if hi > lo else 1.0 for i, v in values.items()}


def _per_file(pairs: list, file_of: dict):
    """({file: [(chunk_id, score)] as listed}, {file: its rank among the list's files}, the files
    whose best chunk is within the list's first DEPTH)."""
    found: dict = {}
    within = set()
    for rank, (cid, score) in enumerate(pairs, start=1):
        f = file_of.get(cid)
        if f is not None:
            if f not in found and rank <= DEPTH:
                within.add(f)
            found.setdefault(f, []).append((cid, score))
    return found, {f: i for i, f in enumerate(found, start=1)}, within


def fuse(kw: list, vec: list, file_of: dict, heads: dict | None = None) -> list:
    """Keyword [(cid, bm25, info)] and vector [(cid, similarity)] lists → [Ranked], best first: each
    list's best chunk per file (a file's vector score mixed with its own vector's, `heads`
    {file: similarity}), each scaled over the files of the list's first DEPTH chunks, weighted and
    summed; a file holding one of the query's identifiers gains IDENT_LIFT."""
    heads = heads or {}
    kw_at, kw_rank, kw_in = _per_file([(c, max(s, 0.0)) for c, s, _ in kw], file_of)
    vec_at, vec_rank, vec_in = _per_file(vec, file_of)
    held = {file_of[c] for c, _, info in kw if info["exact_identifiers"] and c in file_of}
    bm25 = {f: max(s for _, s in found) for f, found in kw_at.items()}
    best = {f: max(s for _, s in found) for f, found in vec_at.items()}
    floor = min((best[f] for f in vec_in), default=0.0)       # for a file none of whose windows is listed
    near = {f: (1 - HEAD_WEIGHT) * best.get(f, floor) + HEAD_WEIGHT * heads[f] if f in heads else best[f]
            for f in set(best) | (set(bm25) & set(heads))}
    v = _scale(near, vec_in | ((set(near) - set(best)) & kw_in))
    b = _scale(bm25, kw_in)
    section = _section_scores(kw, vec)
    wv, wk = FUSION_WEIGHTS["vector"], FUSION_WEIGHTS["keyword"]
    out = []
    for f in set(v) | set(b):
        chunks = dict.fromkeys([c for c, _ in kw_at.get(f, [])] + [c for c, _ in vec_at.get(f, [])])
        sections = sorted(((c, section[c]) for c in chunks), key=lambda x: (-x[1], x[0]))
        lists = {}
        if f in bm25:
            lists["keyword"] = {"rank": kw_rank[f], "score": round(bm25[f], 4), "exact_identifiers": int(f in held)}
        if f in near:
            lists["vector"] = {"rank": vec_rank.get(f, 0), "similarity": round(best.get(f, floor), 4),
                               **({"head": round(heads[f], 4)} if f in heads else {})}
        relevance = wv * v.get(f, 0.0) + wk * b.get(f, 0.0) + IDENT_LIFT * (f in held)
        out.append(Ranked(f, 0, relevance, sections, lists))
    # ties (files below both lists' depth scale to 0) by what the lists said, then by id
    out.sort(key=lambda r: (-r.relevance, -near.get(r.file_id, -2.0), -bm25.get(r.file_id, 0.0), r.file_id))
    return out


def _section_scores(kw: list, vec: list) -> dict:
    """{chunk_id: its lists' scores, each scaled over its list's first DEPTH, weighted as files are}."""
    sv = _scale(dict(vec), {c for c, _ in vec[:DEPTH]})
    sb = _scale({c: max(s, 0.0) for c, s, _ in kw}, {c for c, _, _ in kw[:DEPTH]})
    wv, wk = FUSION_WEIGHTS["vector"], FUSION_WEIGHTS["keyword"]
    return {c: wv * sv.get(c, 0.0) + wk * sb.get(c, 0.0) for c in set(sv) | set(sb)}


def keyword_first(kw: list, vec: list, file_of: dict) -> list:
    """[Ranked] in the keyword list's order — its identifier holders first, then BM25 plus FILE_SUPPORT
    × the file's next sections — then the vector list's other files (relevance 0): neighbours in
    meaning never displace an exact match."""
    found: dict = {}
    for cid, score, info in kw:
        if cid in file_of:
            found.setdefault(file_of[cid], []).append((info["exact_identifiers"], max(score, 0.0), cid))
    vec_at, vec_rank, _ = _per_file(vec, file_of)
    out = []
    for f, chunks in found.items():
        chunks.sort(key=lambda x: (-x[0], -x[1], x[2]))
        tier, score, _ = chunks[0]
        support = FILE_SUPPORT * sum(s for _, s, _ in chunks[1:1 + FILE_SUPPORT_N])
        sections = [(c, t + s / (1 + s)) for t, s, c in chunks]
        out.append(Ranked(f, tier, score + support, sections, {"keyword": {"score": round(score, 4),
                                                                           "exact_identifiers": tier}}))
    out.sort(key=lambda r: (-r.tier, -r.relevance, r.file_id))
    out += [Ranked(f, 0, 0.0, [(found_[0][0], 0.0)], {}) for f, found_ in vec_at.items() if f not in found]
    for rank, r in enumerate(out, start=1):
        if "keyword" in r.lists:
            r.lists["keyword"]["rank"] = rank
        if r.file_id in vec_at:
            r.lists["vector"] = {"rank": vec_rank[r.file_id], "similarity": round(vec_at[r.file_id][0][1], 4)}
    return out


def shown_sections(sections: list) -> list:
    """A file's sections on the page: its best, and its next when that scores SECOND_SHARE of it."""
    best = sections[0][1]
    return [c for i, (c, s) in enumerate(sections[:PER_FILE]) if i == 0 or s >= SECOND_SHARE * best]
