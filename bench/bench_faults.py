"""What recall's fault handling costs at 10,000 notes: quick_check, the index lock on a no-change
run, `index --full` on a sound DB, and `index --full` that moves a damaged DB aside and rebuilds."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, machine, ms, timed, warm_env, write_section
from gen_notes import generate

NOTES = 10_000


def _recall(env, *args) -> tuple:
    started = time.perf_counter()
    r = subprocess.run([sys.executable, str(REPO / "recall.py"), *args], env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"recall {' '.join(args)} failed: {r.stderr}")
    return time.perf_counter() - started, r


def _damage(path: Path) -> None:
    import sqlite3
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    pages = path.stat().st_size // 4096
    with open(path, "r+b") as fh:
        for page in range(pages // 2, pages // 2 + 40, 2):
            fh.seek(page * 4096)
            fh.write(os.urandom(4096))


def main() -> None:
    from recall.db.repair import quick_check
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root / "notes", NOTES)
        (root / "config.yaml").write_text(f"sources:\n  - name: notes\n    path: {root / 'notes'}\n")
        env = warm_env()
        env.update(RECALL_HOME=str(root / "state"), RECALL_CONFIG=str(root / "config.yaml"))
        build, _ = _recall(env, "index")
        db_path = root / "state" / "recall.db"
        size = sum(p.stat().st_size for p in db_path.parent.glob("recall.db*")) / 1e6
        check = timed(lambda: quick_check(db_path), 3)
        from recall import db
        opens = timed(lambda: db.connect(db_path, readonly=True).close(), 200)   # with the schema check
        again = [_recall(env, "index")[0] * 1000 for _ in range(5)]
        import sqlite3
        holder = sqlite3.connect(db_path)           # an MCP server holding the DB open
        holder.execute("SELECT count(*) FROM files").fetchone()
        full, _ = _recall(env, "index", "--full")
        wal = os.path.getsize(f"{db_path}-wal") / 1e6
        holder.close()
        _damage(db_path)
        healthy = quick_check(db_path)[0]
        repair, r = _recall(env, "index", "--full")
        moved = "moved it to recall.db.broken-" in r.stderr
    rows = [
        ("first index (for scale)", f"{build:.1f} s"),
        ("`PRAGMA quick_check` (p50 / p95 ms of 3; `doctor` and `index --full` pay it)", ms(check)),
        ("`db.connect` read-only, with the schema-version check (p50 / p95 ms of 200)", ms(opens)),
        ("`recall index`, nothing changed, with the index lock (p50 / p95 ms of 5)", ms(again)),
        ("`recall index --full` on a sound DB (quick_check included)", f"{full:.1f} s"),
        ("its WAL after that run, another connection holding the DB open (issue 26: was 54 MB at 40 MB "
         "of notes)", f"{wal:.1f} MB"),
        (f"`recall index --full` on a DB with 20 damaged pages (found: {not healthy}; moved aside: {moved})",
         f"{repair:.1f} s"),
    ]
    table = "\n".join(f"| {what} | {value} |" for what, value in rows)
    write_section("faults", f"""## Faults: what the checks cost (issue 15)

{machine()}, load average {os.getloadavg()[0]:.1f} at the end. A generated tree of {NOTES:,}
markdown files; DB {size:.0f} MB with its WAL. `python3 bench/bench_faults.py`.

| what | result |
|---|---|
{table}
""")
    print(table)
    print("median quick_check ms", statistics.median(check))


if __name__ == "__main__":
    main()
