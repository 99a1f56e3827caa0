"""`recall eval`: recall@5, MRR@10 and nDCG@10 per query type over a golden JSONL file."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..errors import InputError

DEPTH = 10            # files a query is scored on (MRR@10, nDCG@10)
MAX_CHUNKS = 1280     # hits asked for at most, to find them


@dataclass
class EvalRow:
    mode: str
    qtype: str
    queries: int
    recall5: float
    mrr10: float
    ndcg10: float
    misses: list = field(default_factory=list)   # queries with nothing relevant in the top 10


def load_golden(path: str) -> list:
    out = []
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    with fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise InputError(path, n, f"not JSON: {exc}") from None
            if not isinstance(item, dict) or not item.get("query") or not isinstance(item.get("relevant"), list):
                raise InputError(path, n, "each line needs 'query' and a 'relevant' list")
            out.append(item)
    return out


def _metrics(ranked: list, relevant: set):
    """(recall@5, MRR@10, nDCG@10) of one query's ranked files."""
    recall5 = len(set(ranked[:5]) & relevant) / len(relevant) if relevant else 0.0
    mrr = next((1.0 / i for i, r in enumerate(ranked[:10], start=1) if r in relevant), 0.0)
    dcg = sum(1.0 / math.log2(i + 1) for i, r in enumerate(ranked[:10], start=1) if r in relevant)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(relevant), 10) + 1))
    return recall5, mrr, (dcg / ideal if ideal else 0.0)


def ranked_files(run_query, query: str, mode: str) -> list:
    """The first DEPTH distinct files of a query's hits, best first: the search is asked for as
    many chunks as that takes (a file's chunks count once), or all it has."""
    n = 2 * DEPTH
    while True:
        rels = run_query(query, mode, n)
        files = list(dict.fromkeys(rels))
        if len(files) >= DEPTH or len(rels) < n or n >= MAX_CHUNKS:
            return files[:DEPTH]
        n *= 4


def evaluate(golden: list, run_query, mode: str) -> list:
    """`run_query(query, mode, n) -> [relpath …]`: the relpaths of the query's first `n` hits,
    best first; each query is scored on its first DEPTH distinct files (ranked_files)."""
    per_type: dict = {}
    for item in golden:
        scores = _metrics(ranked_files(run_query, item["query"], mode), set(item["relevant"]))
        per_type.setdefault(item.get("type", "all"), []).append((*scores, item["query"]))
    return [EvalRow(mode, qtype, len(vals), *(sum(v[i] for v in vals) / len(vals) for i in range(3)),
                    [v[3] for v in vals if v[1] == 0.0]) for qtype, vals in sorted(per_type.items())]


def judged_not_indexed(con, golden: list) -> tuple:
    """(judged files the index does not hold, all judged files): a golden file scored against
    other notes measures nothing."""
    judged = {rel for item in golden for rel in item["relevant"]}
    indexed = {row[0] for row in con.execute("SELECT relpath FROM files")}
    return sorted(judged - indexed), len(judged)
