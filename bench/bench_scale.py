"""Issue 34.4: keyword search at scale on the tree ../shared/bench/gen_tree.py generates
(10,000 files, ~113k chunks, a small vocabulary: each word in about half the chunks) — in-process
word, identifier and question queries, and whole `recall search` processes (pip-installed, as a
user has it) beside `rg -i -l -e w1 -e w2 …`.

usage: bench_scale.py [--tree DIR] [--home DIR] [--write]
With --home naming an index of that tree already made, it is reused (the full index takes minutes).
Skipped (exit 0) when gen_tree.py is absent.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import OUT, REPO, bare_python, machine, ms, run_ms, scale_tree, warm_env, write_section

WORDS = ["certificate rotation", "database failover", "kafka consumer lag", "terraform state lock drift",
         "jump host vpn"]
IDENTS = ["OPS-77777", "host9999.example.net", "host9999", "OPS-12345"]
# narrative: words in no note of this tree ("after", "upgrade") beside common ones, so the AND is
# empty and FTS5's OR decides
NARRATIVE = ["how did we recover the database after the disk filled up", "certificate rotation after the upgrade",
             "kafka consumer lag on the weekend"]
# the standard library a `recall search` loads (test_search.py keeps the rest of it out)
FLOOR = "import argparse, contextlib, dataclasses, datetime, heapq, pathlib, sqlite3"


def timed_cpu(fn, repeat: int):
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return wall, cpu


def pip_installed(home: Path):
    """`recall` as `pip install .` puts it into a venv of its own (pip's console script; no
    site-packages `.pth` files): the wheel built from a copy of this checkout, made again whenever
    the checkout's recall/ differs from what it holds (an old install would time an old recall)."""
    import hashlib
    venv = home / "pip-venv"
    script = venv / "bin" / "recall"
    made = hashlib.sha256(b"".join(p.read_bytes() for p in sorted((REPO / "recall").rglob("*.py")))).hexdigest()
    if script.exists() and (venv / "made-from").exists() and (venv / "made-from").read_text() == made:
        return str(script)
    shutil.rmtree(venv, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(REPO / "recall", src / "recall", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "pyproject.toml", src)
        steps = [[sys.executable, "-m", "venv", "--without-pip", str(venv)],
                 pip + ["wheel", "--no-deps", "--no-index", "--no-build-isolation", "-w", tmp, str(src)]]
        for step in steps:
            if subprocess.run(step, capture_output=True).returncode != 0:
                return None
        wheel = next(Path(tmp).glob("recall-*.whl"))
        done = subprocess.run(pip + ["--python", str(venv / "bin" / "python"), "install", "--no-deps",
                                     "--no-index", str(wheel)], capture_output=True)
    if done.returncode != 0:
        return None
    (venv / "made-from").write_text(made)
    return str(script)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=str(OUT / "gentree10000"))
    ap.add_argument("--home", default=str(OUT / "home-scale"))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tree, home = Path(args.tree), Path(args.home)
    if not scale_tree(tree, home, "bench_scale"):
        return 0
    from recall import db
    from recall.config import load_config
    from recall.notes.index import run_index
    from recall.notes.search import search
    from recall.vault import store as vault

    cfg = load_config()
    con = db.connect(cfg.db_path)
    t = time.perf_counter()
    rep = run_index(con, cfg, redactor=vault.redactor)
    index_s = time.perf_counter() - t
    chunks = con.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def inproc(queries):
        wall, cpu = [], []
        for q in queries:
            search(con, cfg, q, n=10)
            w, c = timed_cpu(lambda: search(con, cfg, q, n=10), 20)
            wall += w
            cpu += c
        return wall, cpu
    word_wall, word_cpu = inproc(WORDS)
    ident_wall, ident_cpu = inproc(IDENTS)
    narrative_wall, narrative_cpu = inproc(NARRATIVE)
    py = sys.executable
    bare = bare_python(home)      # a venv of its own: none of this machine's site-packages .pth files
    pipped = pip_installed(home)
    env = warm_env()
    from bench_search import ensure_rg
    rg = ensure_rg()
    # every form of each query run in turn, round by round, so the machine's load falls on all alike
    forms = {"pip": (lambda q: [pipped, "search", q]) if pipped else None,
             "cli": lambda q: [py, str(REPO / "recall.py"), "search", q],
             "bare": (lambda q: [bare, str(REPO / "recall.py"), "search", q]) if bare else None,
             "floor": (lambda q: [bare or py, "-c", FLOOR]),
             "rg": (lambda q: [rg, "-i", "-l"] + sum((["-e", w] for w in q.split()), []) + [str(tree)]) if rg else None}
    forms = {k: f for k, f in forms.items() if f}
    got = {k: [] for k in forms}
    for q in WORDS:
        for k, f in forms.items():
            run_ms(f(q), 0, env)                   # untimed: page cache and bytecode warm
            if k in ("pip", "cli", "bare"):         # a recall that fails would time its error
                ran = subprocess.run(f(q), capture_output=True, text=True, env=env)
                if ran.returncode != 0 or not ran.stdout.startswith("1. "):
                    raise SystemExit(f"bench_scale: {k} search {q!r} failed: {ran.stderr.strip()[-300:]}")
        for _ in range(4):
            for k, f in forms.items():
                got[k] += run_ms(f(q), 1, env, warm=False)
    cli_words, bare_words, floor, rg_words = got["cli"], got.get("bare", []), got["floor"], got.get("rg", [])
    pip_words = got.get("pip", [])
    starts = {"python": run_ms([py, "-c", "pass"], 10), "bare venv python": run_ms([bare, "-c", "pass"], 10) if bare else []}
    load = os.getloadavg()[0]
    rg_med = statistics.median(rg_words) if rg_words else float("nan")

    def ratio(samples):
        return f"{statistics.median(samples) / rg_med:.2f}" if samples else "-"
    text = f"""
## Keyword search at scale: the gen_tree.py tree (issues 13.5, 34.4)

{machine()}, load average {load:.1f} (the 2 cores are shared). `python3 bench/bench_scale.py`:
10,000 files from `../shared/bench/gen_tree.py`, {chunks:,} chunks (index: {rep.new:,} new files,
{index_s:.1f} s). In-process `search(n=10)`, 20 runs × each query after one warm-up; p50 / p95 ms.

| what | wall | CPU | target |
|---|---|---|---|
| words ({len(WORDS)} queries: {", ".join(WORDS)}) | {ms(word_wall)} | {ms(word_cpu)} | p95 ≤ 50 |
| identifiers ({", ".join(IDENTS)}) | {ms(ident_wall)} | {ms(ident_cpu)} | p95 ≤ 50 |
| narrative, a word in no note beside common ones ({"; ".join(NARRATIVE)}) | {ms(narrative_wall)} | {ms(narrative_cpu)} | p95 ≤ 100 |

Plain FTS5 answers every query: the chunks holding every word some note holds first, the OR of the
words when those are too few.

Whole processes (each query 4×, page cache warm, bytecode compiled), p50 / p95 ms:

| command | ms | ÷ `rg` (medians) |
|---|---|---|
| `recall search` (words), pip-installed (`pip install .` into a venv of its own, pip's `recall` script) | {ms(pip_words) if pip_words else "no venv"} | **{ratio(pip_words)}** (target ≤ 1.25) |
| `recall search` (words), `recall.py` in a bare venv (no site-packages `.pth` files) | {ms(bare_words) if bare_words else "no venv"} | {ratio(bare_words)} |
| `recall search` (words), `{py}` | {ms(cli_words)} | {ratio(cli_words)} |
| `rg -i -l -e w1 -e w2 …` (the same words, OR form) | {ms(rg_words) if rg_words else "rg not installed"} | 1 |
| `python -c pass`; the same in the bare venv | {ms(starts["python"])}; {ms(starts["bare venv python"]) if starts["bare venv python"] else "-"} | |
| the floor: `python -c "import {FLOOR[7:]}"` in the bare venv (the standard library a search loads, nothing of recall's) | {ms(floor)} | {ratio(floor)} |

Every search runs in its own process and leaves nothing running; `{py}`'s own start-up (its
site-packages `.pth` files) is most of its row. The floor row is what the target cannot go under while
records are dataclasses (STYLE.md; `dataclasses` loads `inspect`, `ast`, `dis` and `tokenize`), the
CLI is argparse and paths are pathlib: recall's own modules, config, DB and search are the rest.
"""
    print(text)
    write_section("scale", text)      # --write is accepted for old scripts; make bench always writes
    return 0


if __name__ == "__main__":
    sys.exit(main())
