"""Issue 13: the notes-search dev set — index its corpus with recall, write a run file per mode,
score each with the dev set's own scorer (recall@5, MRR@10, nDCG@10 per query type).

usage: bench_devset.py [DEVSET] [--home DIR] [--mode M …] [--provider local|none] [--label TEXT]
                       [--write] [-v]

DEVSET defaults to ../shared/devset beside the repository; the script says so and exits 0 when it
is absent. --home keeps the RECALL_HOME (and so the vectors, keyed by text hash) between runs: the
first local-model run embeds every chunk (minutes on 2 cores), later runs only what changed.
--write puts the table into docs/BENCHMARKS.md (section devset). Nothing from the corpus is copied
into the repository: the run files go to bench/out/devset/.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

from common import OUT, REPO, machine, write_section


def load_scorer(devset: Path):
    spec = importlib.util.spec_from_file_location("devset_baseline", devset / "baseline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def score(scorer, queries: list, runs: dict) -> dict:
    """{qtype: (recall@5, MRR@10, nDCG@10)} plus 'all', and the per-query triples."""
    by_type: dict = {}
    per_query = {}
    for q in queries:
        triple = scorer.score(runs.get(q["id"], []), q["relevant"])
        per_query[q["id"]] = triple
        for t in (q["type"], "all"):
            by_type.setdefault(t, []).append(triple)
    return {t: tuple(sum(v[i] for v in vals) / len(vals) for i in range(3)) for t, vals in by_type.items()}, per_query


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("devset", nargs="?", default=str(REPO.parent / "shared" / "devset"))
    ap.add_argument("--home", default=str(OUT / "home-devset"))
    ap.add_argument("--mode", action="append", help="keyword, semantic, hybrid, auto (default: all four)")
    ap.add_argument("--provider", default="local", choices=["local", "none"])
    ap.add_argument("--include", action="append", help="source include globs (default: recall's own)")
    ap.add_argument("--label", default="", help="a name for this experiment in the output")
    ap.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    ap.add_argument("-v", action="store_true", help="one line per query and mode")
    args = ap.parse_args()
    devset = Path(args.devset)
    if not (devset / "queries.jsonl").exists() or not (devset / "corpus").is_dir():
        print(f"bench_devset: no dev set at {devset}; skipped")
        return 0
    modes = args.mode or (["keyword", "semantic", "hybrid", "auto"] if args.provider != "none" else ["keyword"])
    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    cfg_path = home / "devset.yaml"
    emb = "embedding:\n  provider: local\n" if args.provider == "local" else ""
    include = f"    include: {json.dumps(args.include)}\n" if args.include else ""
    cfg_path.write_text(f"sources:\n  - name: devset\n    path: {devset / 'corpus'}\n{include}{emb}")
    os.environ.update(RECALL_HOME=str(home), RECALL_CONFIG=str(cfg_path))
    sys.path.insert(0, str(REPO))
    from recall import db
    from recall.config import load_config
    from recall.notes.evaluate import ranked_files
    from recall.notes.index import run_index
    from recall.notes.search import search
    from recall.vault import store as vault

    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=args.provider != "none")
    started = time.perf_counter()

    def progress(done, total, what):
        if what == "embedding" and (done == total or done % 256 < 32):
            sys.stderr.write(f"\rembedding {done}/{total}")
    rep = run_index(con, cfg, progress=progress, notify=lambda line: sys.stderr.write(line + "\n"), redactor=vault.redactor)
    sys.stderr.write(f"\nindexed in {time.perf_counter() - started:.1f}s: {rep.new} new, {rep.changed} changed, "
                     f"{rep.embedded} embedded\n")
    chunks = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    files = con.execute("SELECT count(*) FROM files").fetchone()[0]
    queries = [json.loads(line) for line in (devset / "queries.jsonl").read_text().splitlines() if line.strip()]
    scorer = load_scorer(devset)
    outdir = OUT / "devset"
    outdir.mkdir(parents=True, exist_ok=True)
    table, detail = {}, {}
    for mode in modes:
        runs, took = {}, []
        for q in queries:
            t = time.perf_counter()
            runs[q["id"]] = ranked_files(lambda text, m, n: [h.relpath for h in search(
                con, cfg, text, n=n, mode=m, remotes=False).hits], q["query"], mode)
            took.append(time.perf_counter() - t)
        with open(outdir / f"run-{mode}.jsonl", "w") as fh:
            for qid, ranked in runs.items():
                fh.write(json.dumps({"id": qid, "ranked": ranked}) + "\n")
        table[mode], detail[mode] = score(scorer, queries, runs)
        sys.stderr.write(f"{mode}: {sum(took) / len(took) * 1000:.0f} ms/query\n")
    lines = [f"{'type':<11} {'metric':<9} " + " ".join(f"{m:>9}" for m in modes)]
    for qtype in ("identifier", "narrative", "all"):
        for i, metric in enumerate(("recall@5", "MRR@10", "nDCG@10")):
            lines.append(f"{qtype:<11} {metric:<9} " + " ".join(f"{table[m][qtype][i]:>9.3f}" for m in modes))
    text = "\n".join(lines)
    if args.label:
        print(f"== {args.label}")
    print(f"{files} files, {chunks} chunks")
    print(text)
    if args.v:
        for q in queries:
            cells = " ".join(f"{m[:3]} {detail[m][q['id']][0]:.2f}/{detail[m][q['id']][1]:.2f}" for m in modes)
            print(f"{q['id']} {q['type'][:5]} {cells}  {q['query'][:60]}")
    if args.write:
        name = "devset" if devset.name == "devset" else f"devset-{devset.name}"
        write_section(name, f"""
## Dev set `{devset.name}`: recall@5 / MRR@10 / nDCG@10 per mode (issues 13, 24)

{machine()}. `python3 bench/bench_devset.py ../shared/{devset.name} --write`: the dev set's {files} pages
({chunks} chunks) indexed with `embedding.provider: {args.provider}` (all-MiniLM-L6-v2), its {len(queries)}
queries searched per mode (the first 10 distinct files, as `recall eval` ranks them), scored by its own
`baseline.py`.

```
{text}
```
""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
