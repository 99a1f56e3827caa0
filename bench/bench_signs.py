"""The pure-Python vector list's sign pass on real vectors: each dev set indexed with the local model,
then searched with the pure-Python backend twice — every row scored, and the rows nearest by sign
(SIGN_POOL × k) scored — in semantic and auto modes, each scored by the dev set's own baseline.py.

usage: bench_signs.py [DEVSET ...]   (default: ../shared/devset and ../shared/devset2)
A dev set that is absent is skipped. The vectors come from the tests' cache (tests/vector_cache.py)
when it holds them, else the local model embeds them once.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from bench_devset import load_scorer, score
from common import OUT, REPO, machine, write_section

MODES = ("semantic", "auto")


def figures(devset: Path, pools: tuple) -> tuple:
    """(rows, {pool: {mode: {type: (recall@5, MRR@10, nDCG@10)}}}) for one dev set."""
    from recall import db
    from recall.config import load_config
    from recall.embed import vectors
    from recall.notes.evaluate import ranked_files
    from recall.notes.index import run_index
    from recall.notes.search import search
    from recall.vault import store as vault
    from tests.vector_cache import cached_vectors
    home = OUT / "signs" / devset.name
    home.mkdir(parents=True, exist_ok=True)
    (home / "c.yaml").write_text(f"sources:\n  - name: devset\n    path: {devset / 'corpus'}\n"
                                 "embedding:\n  provider: local\n")
    os.environ.update(RECALL_HOME=str(home), RECALL_CONFIG=str(home / "c.yaml"), HF_HUB_OFFLINE="1")
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=False)
    cached_vectors(con, cfg, save=False)
    run_index(con, cfg, redactor=vault.redactor)
    cached_vectors(con, cfg, save=True)
    queries = [json.loads(line) for line in (devset / "queries.jsonl").read_text().splitlines() if line.strip()]
    scorer = load_scorer(devset)
    vectors.available_backend = lambda con: "python"        # as a core install has it
    got = {}
    for pool in pools:
        vectors.SIGN_POOL = pool
        got[pool] = {}
        for mode in MODES:
            runs = {q["id"]: ranked_files(lambda text, m, n: [h.relpath for h in search(
                con, cfg, text, n=n, mode=m, remotes=False, snippets=False).hits], q["query"], mode)
                for q in queries}
            got[pool][mode] = score(scorer, queries, runs)[0]
    rows = con.execute("SELECT count(*) FROM embeddings").fetchone()[0]
    con.close()
    return rows, got


def main() -> int:
    sys.path.insert(0, str(REPO))
    from recall.embed.vectors import SIGN_POOL
    sets = [Path(a) for a in sys.argv[1:]] or [REPO.parent / "shared" / n for n in ("devset", "devset2")]
    for absent in [s for s in sets if not (s / "queries.jsonl").exists()]:
        print(f"bench_signs: no dev set at {absent}; skipped")
        sets.remove(absent)
    if not sets:
        return 0
    every = 10 ** 9
    lines = []
    for devset in sets:
        rows, got = figures(devset, (every, SIGN_POOL))
        for label, pool in (("every row scored", every), (f"the sign pass ({SIGN_POOL} × k)", SIGN_POOL)):
            cells = " | ".join(" / ".join(f"{x:.3f}" for x in got[pool][m][t]) for m in MODES
                               for t in ("narrative", "identifier"))
            lines.append(f"| {devset.name} ({rows:,} rows) | {label} | {cells} |")
        print("\n".join(lines[-2:]), flush=True)
    text = f"""
## The pure-Python vector list's sign pass on real vectors

{machine()}. `python3 bench/bench_signs.py`: each dev set indexed with the local model
(all-MiniLM-L6-v2, 384 dimensions), searched with the pure-Python backend, every row scored and then
the rows nearest by the signs of their high planes; recall@5 / MRR@10 / nDCG@10 by the dev set's own
`baseline.py`.

| set | vector list | semantic, narrative | semantic, identifier | auto, narrative | auto, identifier |
|---|---|---|---|---|---|
{chr(10).join(lines)}
"""
    print(text)
    write_section("signs", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
