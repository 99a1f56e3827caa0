"""Issues 27 and 37: what following the sources costs a search and a core while idle, and how soon a
saved note is found — on the tree ../shared/bench/gen_tree.py generates (10,000 files), keyword search
in the process that runs the watcher (as `recall mcp` does), with no watcher, the stat poll and watchdog.

usage: bench_watch.py [--tree DIR] [--home DIR]   (`make bench` runs it; its section of BENCHMARKS.md is rewritten)
Reuses bench_scale's tree and index when they exist. Skipped (exit 0) when gen_tree.py is absent.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from common import OUT, machine, ms, pct, scale_tree, write_section

QUERIES = ["OPS-77777", "certificate rotation", "kafka consumer lag"]
IDLE_S = 20                # the watcher alone, nothing changing: its CPU time over this long


def searches(con, cfg, repeat: int) -> list:
    from recall.notes.search import search
    out = []
    for q in QUERIES:
        search(con, cfg, q, n=10)
        for _ in range(repeat):
            t = time.perf_counter()
            search(con, cfg, q, n=10)
            out.append((time.perf_counter() - t) * 1000)
    return out


def found_after(con, cfg, tree: Path, n: int) -> list:
    """Seconds from a note's save to the first keyword search that finds it."""
    from recall.notes.search import search
    out = []
    for i in range(n):
        ident = f"WATCH-{os.getpid()}{i:03}"
        path = tree / "area00" / f"watch-{i}.md"
        path.write_text(f"# Saved now\n\nTicket {ident} raised.\n")
        t = time.perf_counter()
        while not search(con, cfg, ident, n=1).hits and time.perf_counter() - t < 30:
            time.sleep(0.05)
        out.append(time.perf_counter() - t)
        path.unlink()
        time.sleep(1.5)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=str(OUT / "gentree10000"))
    ap.add_argument("--home", default=str(OUT / "home-scale"))
    args = ap.parse_args()
    tree, home = Path(args.tree), Path(args.home)
    if not scale_tree(tree, home, "bench_watch"):
        return 0
    from recall import db
    from recall.config import load_config
    from recall.notes import walk, watch
    from recall.notes.index import run_index
    from recall.vault import store as vault
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, redactor=vault.redactor)
    rows = {"none": searches(con, cfg, 30)}
    behind_ms = []
    for _ in range(50):            # the CLI's check before each search: folder mtimes, bounded at 5 ms
        t = time.perf_counter()
        walk.behind(con, cfg)
        behind_ms.append((time.perf_counter() - t) * 1000)
    fresh, idle = {}, {}
    for how in ("poll", "auto"):
        os.environ["RECALL_WATCH"] = how
        w = watch.Watcher(cfg, redactor=vault.redactor)
        if how == "auto" and w.how != "watchdog":
            continue
        w.start()
        while w.passes < 1 and w.thread.is_alive():     # its first pass: nothing changed, every file checked
            time.sleep(0.1)
        time.sleep(2)                                   # then idle: a poll round or two
        cpu = time.process_time()
        time.sleep(IDLE_S)                               # this thread asleep: the CPU is the watcher's
        idle[w.how] = (time.process_time() - cpu) / IDLE_S * 100
        rows[w.how] = searches(con, cfg, 30)
        fresh[w.how] = found_after(con, cfg, tree, 5)
        w.stop()
    base = statistics.median(rows["none"])

    def row(name, label):
        if name not in rows:
            return f"| {label} | not installed | | | |"
        s = rows[name]
        added = statistics.median(s) - base
        found = fresh.get(name)
        return (f"| {label} | {ms(s)} | {added:+.1f} | "
                + (f"{statistics.median(found):.2f} / {max(found):.2f}" if found else "—")
                + (f" | {idle[name]:.1f} |" if name in idle else " | — |"))
    text = f"""
## Fresh results: what following the sources costs (issues 27, 37)

{machine()}, load average {os.getloadavg()[0]:.1f}. `python3 bench/bench_watch.py`: the 10,000-file
gen_tree.py tree, keyword search in the process that follows the sources (as `recall mcp` does),
{len(QUERIES)} queries × 30 after a warm-up ({", ".join(QUERIES)}); then 5 notes saved one at a time,
each searched every 50 ms until found. Idle: the process's CPU time over {IDLE_S} s with nothing changing
and nothing searched, as a share of one core.

| watcher | search p50 / p95 ms | p50 added (target ≤ 5) | save → found, s, median / max (target ≤ 2) | idle CPU, % of a core (target < 5) |
|---|---|---|---|---|
{row("none", "none (`RECALL_WATCH=off`)")}
{row("poll", "stat poll (`RECALL_WATCH=poll`, the fallback)")}
{row("watchdog", "watchdog (inotify; the default when installed)")}

p95 of the search with the poll running: {pct(rows.get("poll", rows["none"]), 95):.1f} ms.
The CLI's own check that it is behind (`walk.behind`: folder mtimes, stopped at 5 ms), before each
`recall search`: {ms(behind_ms)} ms (target ≤ 5).
"""
    print(text)
    write_section("watch", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
