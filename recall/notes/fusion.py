"""Ranking the candidates: the keyword and vector lists fused, the identifier lift, per-file support,
recency. Every constant here was chosen on both dev sets (docs/BENCHMARKS.md, "Ranking on both dev sets")."""
from __future__ import annotations

from datetime import date as _date

PER_FILE = 2                  # chunks of one file on a page of hits
RRF_K = 60                    # plain RRF: the baseline every fusion change was measured against
FUSION = "convex"             # each list's scores scaled into [0, 1] and summed; "rrf": reciprocal ranks
FUSION_K = 60                 # RRF's k, when FUSION is "rrf"
FUSION_WEIGHTS = {"vector": 1.0, "keyword": 0.2, "identifiers": 1.0}
CONVEX_IDENT = 0.1            # a chunk holding one of a question's identifiers: a bounded lift, not a tier
FILE_SUPPORT = 0.1            # keyword route: share of a file's next candidates' BM25 added to each chunk
FILE_SUPPORT_N = 2
FUSED_FILE_SUPPORT = 0.0      # the same in a fused question: lost MRR on dev set 1
# Recency multiplies relevance (BM25), never the identifier tier: at a 0.95 floor it can lift a newer
# note only over one less than ~5% more relevant — it breaks near-ties.
RECENCY_FLOOR = 0.95
RECENCY_HALF_LIFE_DAYS = 730
FUSED_RECENCY = False         # on a fused score: level with score fusion, and it reorders RRF's near-ties


def recency_factor(date: str, today: _date | None = None) -> float:
    """A small multiplicative prior: 1.0 today, sliding toward RECENCY_FLOOR with age."""
    try:
        then = _date.fromisoformat(str(date)[:10])
    except ValueError:
        return RECENCY_FLOOR
    age = max(0, ((today or _date.today()) - then).days)
    return RECENCY_FLOOR + (1 - RECENCY_FLOOR) * 0.5 ** (age / RECENCY_HALF_LIFE_DAYS)


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


def final_score(tier: int, relevance: float, factor: float) -> float:
    """The identifier tier, then relevance × recency squashed into [0, 1): one float that sorts
    as (tier, relevance × recency) — recency never lifts a note over one naming the identifier."""
    r = max(relevance, 0.0) * factor
    return tier + r / (1.0 + r)


def _per_list(kw: list, vec: list):
    """({chunk_id: its keyword list entry}, {chunk_id: its vector list entry}), ranks from 1."""
    return ({cid: dict(info, rank=rank, score=round(s, 4)) for rank, (cid, s, info) in enumerate(kw, start=1)},
            {cid: {"rank": rank, "similarity": round(sim, 4)} for rank, (cid, sim) in enumerate(vec, start=1)})


def _lists(cid, kw_at: dict, vec_at: dict) -> dict:
    lists = {"keyword": kw_at[cid]} if cid in kw_at else {}
    if cid in vec_at:
        lists["vector"] = vec_at[cid]
    return lists


def fuse(kw: list, vec: list, k: int | None = None, weights: dict | None = None) -> list:
    """Keyword [(cid, score, info)] and vector [(cid, similarity)] lists → [(cid, relevance, info)]:
    the lists' scaled scores weighted and summed (FUSION "rrf": the RRF of the vector list, the
    keyword list and its identifier holders); an identifier in a question is one bounded signal."""
    weights = FUSION_WEIGHTS if weights is None else weights
    lists = {"vector": [c for c, _ in vec]}
    if kw:
        lists["keyword"] = [c for c, _, _ in kw]
        held = [c for c, _, info in kw if info["exact_identifiers"]]
        if held:
            lists["identifiers"] = held
    kw_at, vec_at = _per_list(kw, vec)
    scaled = _convex(kw, vec, weights) if FUSION == "convex" else None
    scored = []
    for cid, (score, _ranks) in rrf(lists, k or FUSION_K, weights).items():
        relevance = score if scaled is None else scaled[cid]
        scored.append((cid, relevance, {"lists": _lists(cid, kw_at, vec_at),
                                        ("rrf" if scaled is None else "scaled"): round(relevance, 6)}))
    scored.sort(key=lambda x: (-x[1], x[0]))
    return scored


def _unit(pairs: list) -> dict:
    """{id: score min-max scaled into [0, 1] over its list}."""
    if not pairs:
        return {}
    lo, hi = min(s for _, s in pairs), max(s for _, s in pairs)
    return {c: (s - lo) / (hi - lo) if hi > lo else 1.0 for c, s in pairs}


def _convex(kw: list, vec: list, weights: dict) -> dict:
    """{chunk_id: the lists' scores scaled into [0, 1], weighted and summed, + CONVEX_IDENT × its
    weight for an identifier holder}."""
    v = _unit(list(vec))
    b = _unit([(c, s) for c, s, _ in kw])
    held = {c for c, _, info in kw if info["exact_identifiers"]}
    return {cid: weights.get("vector", 1.0) * v.get(cid, 0.0) + weights.get("keyword", 1.0) * b.get(cid, 0.0)
            + weights.get("identifiers", 1.0) * CONVEX_IDENT * (cid in held) for cid in set(v) | set(b)}


def keyword_first(kw: list, vec: list) -> list:
    """The keyword list as it stands (its identifier holders first), then the vector list's other
    chunks (relevance 0): neighbours in meaning never displace an exact match."""
    kw_at, vec_at = _per_list(kw, vec)
    scored = [(cid, s, {"tier": info["exact_identifiers"], "lists": _lists(cid, kw_at, vec_at)})
              for cid, s, info in kw]
    return scored + [(cid, 0.0, {"lists": {"vector": entry}}) for cid, entry in vec_at.items() if cid not in kw_at]


def file_support(scored: list, file_of: dict, share: float) -> dict:
    """{chunk_id: share × the relevance of its file's next best candidates}: a note that answers
    with several sections outranks one that mentions the words once."""
    if not share:
        return {}
    per_file: dict = {}
    for cid, score, _info in scored:
        if cid in file_of:
            per_file.setdefault(file_of[cid], []).append((score, cid))
    out = {}
    for found in per_file.values():
        if len(found) < 2:
            continue
        found.sort(reverse=True)
        for _score, cid in found:
            others = [s for s, c in found if c != cid][:FILE_SUPPORT_N]
            out[cid] = share * sum(max(s, 0.0) for s in others)
    return out
