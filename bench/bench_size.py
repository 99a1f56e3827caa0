"""Issue 36 (point 4): the DB in proportion to the notes — its size (file + WAL) over the bytes of the
notes it indexed, keyword-only and with the local model, on golden/ and the two dev sets; then 20
re-index rounds with edits (words moved within a line, none added) on a copy of golden/.

    python3 bench/bench_size.py        # the local model's homes are kept in bench/out/size-*:
                                       # the first run embeds each set once (minutes on 2 cores)

Those homes hold what `recall index` writes only: a search run against one adds its query vectors
(a cache of the latest 1,000, 0.3 MB for the dev set's queries), which is not the index's size."""
from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path

from common import OUT, REPO, machine, write_section

SETS = [("golden", REPO / "golden" / "notes"), ("devset", REPO.parent / "shared" / "devset" / "corpus"),
        ("devset2", REPO.parent / "shared" / "devset2" / "corpus")]
ROUNDS, EDITS = 20, 15


def use(home: Path, tree: Path, provider: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    emb = f"embedding:\n  provider: {provider}\n" if provider != "none" else ""
    (home / "size.yaml").write_text(f"sources:\n  - name: devset\n    path: {tree}\n{emb}")   # bench_devset's name: its homes serve
    os.environ.update(RECALL_HOME=str(home), RECALL_CONFIG=str(home / "size.yaml"), HF_HUB_OFFLINE="1")


def index(home: Path, tree: Path, provider: str) -> tuple:
    """(DB bytes with its WAL, notes bytes indexed, vectors) after `recall index` in `home`."""
    from recall import db
    from recall.config import load_config
    from recall.notes.index import run_index
    from recall.vault import store as vault
    use(home, tree, provider)
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=provider != "none")
    run_index(con, cfg, embed=provider != "none", redactor=vault.redactor,
              notify=lambda line: print(line, file=sys.stderr))
    notes = con.execute("SELECT COALESCE(SUM(size), 0) FROM files").fetchone()[0]
    vectors = con.execute("SELECT count(*) FROM embeddings").fetchone()[0]
    con.close()
    wal = Path(f"{cfg.db_path}-wal")
    return os.path.getsize(cfg.db_path) + (wal.stat().st_size if wal.exists() else 0), notes, vectors


def rounds(work: Path) -> list:
    """DB bytes after the first index and after each of ROUNDS rounds of EDITS edited notes."""
    tree = work / "notes"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(REPO / "golden" / "notes", tree)
    files = sorted(tree.rglob("*.md"))
    rnd = random.Random(3)
    sizes = [index(work / "home", tree, "none")[0]]
    for _ in range(ROUNDS):
        for path in rnd.sample(files, EDITS):
            lines = path.read_text().split("\n")
            i = max(range(len(lines)), key=lambda n: len(lines[n]))     # its longest line
            words = lines[i].split(" ")
            rnd.shuffle(words)
            lines[i] = " ".join(words)
            path.write_text("\n".join(lines))
        sizes.append(index(work / "home", tree, "none")[0])
    return sizes


def main() -> None:
    sys.path.insert(0, str(REPO))
    rows = []
    for name, tree in SETS:
        if not tree.is_dir():
            print(f"bench_size: no {tree}; {name} skipped")
            continue
        shutil.rmtree(OUT / f"size-{name}-keyword", ignore_errors=True)
        words, notes, _ = index(OUT / f"size-{name}-keyword", tree, "none")
        local, _, vectors = index(OUT / f"size-{name}-local", tree, "local")
        rows.append(f"| {name} | {notes / 1e6:.2f} MB | {words / 1e6:.2f} MB | **{words / notes:.2f}×** | "
                    f"{local / 1e6:.2f} MB ({vectors:,} vectors) | **{local / notes:.2f}×** |")
        print(rows[-1], flush=True)
    # the seed's scale (bench_search's generated notes, ~45k chunks): keyword-only (embedding it
    # with the local model would take half an hour on 2 cores)
    from bench_search import FILES
    from gen_notes import generate
    seed = OUT / f"notes{FILES}-v2"
    if not seed.exists():
        generate(seed, FILES)
    shutil.rmtree(OUT / "size-seed-keyword", ignore_errors=True)
    words, notes, _ = index(OUT / "size-seed-keyword", seed, "none")
    rows.append(f"| generated, {FILES:,} notes (bench_search) | {notes / 1e6:.2f} MB | {words / 1e6:.2f} MB | "
                f"**{words / notes:.2f}×** | — | — |")
    print(rows[-1], flush=True)
    sizes = rounds(OUT / "size-rounds")
    trail = ", ".join(f"{s / 1e6:.2f}" for s in sizes)
    table = "\n".join(rows)
    write_section("size", f"""
## The DB in proportion to the notes (issue 36.4)

{machine()}. `python3 bench/bench_size.py`: the DB file and its WAL after `recall index`, over the bytes
of the notes it indexed, keyword-only and with the local model (all-MiniLM-L6-v2: one vector of
576 bytes, 12 bits a dimension, per text or 128-token window). Targets ≤ 2× keyword-only, ≤ 4× with the local model.

| notes | indexed | keyword-only DB | ratio | with the local model | ratio |
|---|---|---|---|---|---|
{table}

golden/ is the one set over the targets: 0.31 MB of notes dense with identifiers, beside the fixed
pages of 37 tables and indexes (a new DB is 0.17 MB).

{ROUNDS} re-index rounds on a copy of golden/, {EDITS} notes edited a round (the words of a line moved, none
added), DB MB after the first index and each round: {trail} (first {sizes[0] / 1e6:.2f}, largest
{max(sizes) / 1e6:.2f}, last {sizes[-1] / 1e6:.2f}).
""")
    print(open(REPO / "docs" / "BENCHMARKS.md").read().split("<!-- bench:size -->")[1].split("<!--")[0])


if __name__ == "__main__":
    main()
