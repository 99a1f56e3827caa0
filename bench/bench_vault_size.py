"""Issue 36 point 3: what the vault's size costs a note. `recall index` of one
new note (wall, CPU, peak RSS) and a watched save until a search finds it,
with no vault, 20 PEM-sized secrets, and values of 1 MB in all; and the
masker's build time by value size, which sets the size sync refuses.

usage: bench_vault_size.py [--repo DIR] [--label TEXT] [--vault NAME…]   (--repo:
the recall checkout to measure, e.g. an older one for the before row)
"""
from __future__ import annotations

import argparse
import base64
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, machine, write_section

VAULTS = {       # name: [(how many, bytes each, multi-line?)]
    "no vault": [],
    "20 PEM-sized (1.7–3.2 KB)": [(10, 1700, True), (10, 3200, True)],
    "1 MB: 64 × 16 KiB PEM-like": [(64, 15800, True)],
    "1 MB: 64 × 16 KiB tokens": [(64, 16000, False)],
    "one 1 MB token": [(1, 1 << 20, False)],
}


def value(rnd, size: int, lines: bool) -> str:
    """A random base64 value of `size` bytes; a PEM block when `lines`."""
    body = base64.b64encode(rnd.randbytes(size * 3 // 4)).decode()[:size]
    if not lines:
        return body
    rows = [body[i:i + 64] for i in range(0, len(body) - 60, 64)]
    return "-----BEGIN PRIVATE KEY-----\n" + "\n".join(rows) + "\n-----END PRIVATE KEY-----\n"


def world(tmp: Path, spec: list) -> dict:
    """Notes, a secrets file of `spec` values, a config; the env for recall."""
    rnd = random.Random(36)
    (tmp / "notes").mkdir(parents=True)
    for i in range(20):
        (tmp / "notes" / f"note{i}.md").write_text(f"# Note {i}\n\nabout postgres failover {i}\n")
    text, n = "", 0
    for count, size, lines in spec:
        for _ in range(count):
            body = value(rnd, size, lines).replace("\n", "\n    ")
            text += f"- id: s{n}\n  value: |\n    {body.rstrip()}\n"
            n += 1
    secrets = tmp / "secrets.yaml"
    secrets.write_text(text)
    secrets.chmod(0o600)
    config = tmp / "config.yaml"
    config.write_text(f"sources:\n  - name: notes\n    path: {tmp / 'notes'}\n"
                      + (f"secrets: [{secrets}]\n" if spec else "") + "embedding: {provider: none}\n")
    return {**os.environ, "RECALL_CONFIG": str(config), "RECALL_HOME": str(tmp / "state")}


def measured(repo: Path, env: dict, *argv) -> tuple:
    """(wall s, CPU s, peak RSS MB, exit code) of one `recall ARGV` process."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(repo / "recall.py"), *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, use = os.wait4(proc.pid, 0)
    return (time.perf_counter() - t, use.ru_utime + use.ru_stime, use.ru_maxrss / 1024,
            os.waitstatus_to_exitcode(status))


WATCHED = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from recall import api, db
from recall.config import load_config
cfg = load_config()
watcher = api.watcher(cfg).start()
con = db.connect(cfg.db_path)
while watcher.passes < 1:
    time.sleep(0.05)
for n in range(2):
    time.sleep(1.5)
    with open(os.path.join(sys.argv[2], f"saved{n}.md"), "w") as f:
        f.write(f"# Saved\\n\\nticket WATCH-{n} raised\\n")
    t = time.perf_counter()
    while not con.execute("SELECT 1 FROM files WHERE relpath=?", (f"saved{n}.md",)).fetchone():
        time.sleep(0.02)
    print(f"{time.perf_counter() - t:.2f}")
watcher.stop()
"""


def watched_save(repo: Path, env: dict, tmp: Path) -> str:
    """Seconds from a save to its row in the index, the first save and the next, while a watcher
    (the stat poll, as `recall mcp` runs it) follows the notes: in a process of its own."""
    out = subprocess.run([sys.executable, "-c", WATCHED, str(repo), str(tmp / "notes")], timeout=600,
                         env={**env, "RECALL_WATCH": "poll"}, capture_output=True, text=True).stdout
    return " / ".join(out.split()) or "failed"


def index_rows(repo: Path, names: list) -> list:
    rows = []
    for name, spec in VAULTS.items():
        if not any(name.startswith(n) for n in names):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            env = world(Path(tmp), spec)
            if spec and measured(repo, env, "secret", "sync")[3] != 0:
                rows.append(f"| {name} | refused at sync | | | |")
                continue
            measured(repo, env, "index")
            (Path(tmp) / "notes" / "new.md").write_text("# New\n\na note saved just now\n")
            wall, cpu, rss, _ = measured(repo, env, "index")
            found = watched_save(repo, env, Path(tmp))
            rows.append(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {found} |")
    return rows


def build_rows() -> list:
    """The exec masker's build CPU by value size (every child's masker builds every value's forms)."""
    from recall.vault.mask import Masker
    rnd, rows = random.Random(7), []
    for size in (4096, 16384, 65536):
        cells = []
        for lines in (True, False):
            secrets = {"v": [value(rnd, size, lines)]}
            t = time.process_time()
            Masker(secrets).stream().feed(b"x" * 65536)     # a child's output: the table of every form
            cells.append(f"{time.process_time() - t:.2f}")
        rows.append(f"| {size // 1024} KiB | {' | '.join(cells)} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=str(REPO))
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--vault", action="append", help="measure only the vaults named so (a prefix)")
    args = ap.parse_args()
    repo = Path(args.repo)
    sys.path.insert(0, str(repo))           # the watcher and the masker of the checkout measured
    load = os.getloadavg()[0]
    rows = index_rows(repo, args.vault or list(VAULTS))
    text = f"""## The vault's size: what a new note costs (issue 36 point 3)

{machine()}, load average {load:.1f}, {args.label}. `python3 bench/bench_vault_size.py`: 20 notes
indexed, then one new note: `recall index` (wall s, CPU s, peak RSS MB; target < 1 s, < 150 MB);
then a watcher (the stat poll, as `recall mcp` runs it) follows the notes and a note is saved, then
another: seconds until the index holds each (target ≤ 2 s; the poll looks once a second while
nothing changes; the watcher works out the redactor's forms after its first pass, not at the first
save). A note's texts are read by one look at the forms they share (docs/DESIGN.md, "A vault's
size"), never the table of every form.

| vault | index one note, s | CPU s | peak RSS MB | save → found, s (first / next) |
|---|---|---|---|---|
{chr(10).join(rows)}

The size `secret sync` refuses (16 KiB a value) is set by what each child's masker costs to
build — every `secret exec` / `access exec` works out the forms of every vault value, and a child's
output builds the table of all their windows — CPU seconds for one value:

| value | PEM-like (64-character lines) | one-line token |
|---|---|---|
{chr(10).join(build_rows())}
"""
    print(text)
    if args.repo == str(REPO) and not args.vault:       # a whole run of this checkout
        write_section("vault_size", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
