"""The database: WAL, busy timeout, private file, migrations recorded once, a clear error when broken."""
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from recall import db
from recall.errors import RecallError
from tests.conftest import REPO


def test_new_db_is_private_wal_and_migrated(tmp_path):
    path = tmp_path / "state" / "recall.db"
    con = db.connect(path)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(path.parent).st_mode & 0o777) == "0o700"
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA busy_timeout").fetchone()[0] == db.BUSY_TIMEOUT_MS
    versions = [r[0] for r in con.execute("SELECT version FROM migrations ORDER BY version")]
    assert versions == list(range(1, len(db.MIGRATIONS) + 1))
    con.close()
    con = db.connect(path)                       # a second open applies nothing again
    assert con.execute("SELECT count(*) FROM migrations").fetchone()[0] == len(db.MIGRATIONS)


def test_loose_db_file_is_tightened(tmp_path):
    path = tmp_path / "recall.db"
    db.connect(path).close()
    path.chmod(0o644)
    db.connect(path).close()
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_only_new_migrations_run_on_an_old_db(tmp_path, monkeypatch):
    path = tmp_path / "recall.db"
    monkeypatch.setattr(db, "MIGRATIONS", db.MIGRATIONS[:1])
    db.connect(path).close()
    monkeypatch.undo()
    con = db.connect(path)
    assert con.execute("SELECT count(*) FROM migrations").fetchone()[0] == len(db.MIGRATIONS)
    assert con.execute("SELECT count(*) FROM secrets").fetchone()[0] == 0     # a later migration's table


def test_pending_migrations_apply_all_or_none_and_a_new_db_starts_compact(tmp_path, monkeypatch):
    """The pending migrations are one transaction: one that fails leaves the DB at the schema it
    had (no half-upgraded file), and a new DB's WAL is cut once they are in (it held 0.5 MB)."""
    path = tmp_path / "recall.db"
    monkeypatch.setattr(db, "MIGRATIONS", db.MIGRATIONS[:2])
    db.connect(path).close()
    monkeypatch.setattr(db, "MIGRATIONS", db.MIGRATIONS[:2] + ["CREATE TABLE later(x)", "CREATE TABLE meta(key)"])
    with pytest.raises(db.BrokenDatabase, match="migration 4 finds table meta already exists"):
        db.connect(path)
    con = sqlite3.connect(path)
    assert con.execute("SELECT max(version) FROM migrations").fetchone()[0] == 2
    assert not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'later'").fetchone()
    con.close()
    monkeypatch.undo()
    fresh = tmp_path / "new.db"
    con = db.connect(fresh)
    assert os.path.getsize(f"{fresh}-wal") == 0 and os.path.getsize(fresh) < 250_000
    con.close()


def test_processes_migrating_at_once_agree(tmp_path):
    # A new file opened by several processes at once: the switch to WAL once answered one of
    # them "database is locked" about one time in a hundred, so race it on many fresh files.
    for round_ in range(12):
        path = tmp_path / f"recall-{round_}.db"
        code = f"import sys; sys.path.insert(0, {str(REPO)!r}); from recall import db; db.connect({str(path)!r})"
        procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE) for _ in range(6)]
        errors = [p.communicate()[1] for p in procs]
        assert all(p.returncode == 0 for p in procs), errors
        con = db.connect(path)
        assert con.execute("SELECT count(*) FROM migrations").fetchone()[0] == len(db.MIGRATIONS)
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        con.close()


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "recall.db"
    path.write_bytes(b"this is not sqlite" * 100)
    path.chmod(0o600)
    with pytest.raises(RecallError, match="recall index --full"):
        db.connect(path)


def test_transaction_rolls_back_on_error(tmp_path):
    con = db.connect(tmp_path / "recall.db")
    with pytest.raises(ZeroDivisionError):
        with db.transaction(con):
            db.set_meta(con, "k", "v")
            raise ZeroDivisionError
    assert db.get_meta(con, "k") is None


def test_in_batches_gives_every_value_once_under_the_variable_limit(tmp_path):
    con = db.connect(tmp_path / "recall.db")
    con.execute("CREATE TABLE t(x)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(1203)])
    got = []
    for part, marks in db.in_batches(range(1203)):
        assert len(part) <= 500 and marks.count("?") == len(part)
        got += [r[0] for r in con.execute(f"SELECT x FROM t WHERE x IN ({marks})", part)]
    assert sorted(got) == list(range(1203))


def test_a_second_connection_in_a_process_never_drops_the_firsts_locks(tmp_path):
    """A connect must not open and close the DB file itself: closing any descriptor of a file drops every
    POSIX lock this process holds on it, so another process closing its last connection would take
    itself for the only one and delete the WAL under the first (the MCP server's verify corrupted it)."""
    import subprocess
    import sys

    from recall import db
    from tests.conftest import REPO
    path = tmp_path / "state" / "recall.db"
    first = db.connect(path)
    first.execute("SELECT count(*) FROM meta").fetchone()            # holds the file open, as a server does
    db.connect(path).close()                                          # another thread's call, say
    writer = ("import sys; sys.path.insert(0, sys.argv[2]); from recall import db; "
              "con = db.connect(sys.argv[1]); con.execute(\"INSERT OR REPLACE INTO meta VALUES ('x', 'y')\"); con.close()")
    subprocess.run([sys.executable, "-c", writer, str(path), str(REPO)], check=True, timeout=60)
    assert (tmp_path / "state" / "recall.db-wal").exists()           # the other process saw it was not alone
    first.execute("INSERT OR REPLACE INTO meta VALUES ('z', 'w')")
    assert first.execute("PRAGMA quick_check").fetchone()[0] == "ok"


# -- in proportion to the notes (db.space) ----------------------------------------------------------

def _notes_tree(root, n):
    """n notes of about 2 kB, words from a fixed list: edits reorder them, adding no new word."""
    import random
    rnd = random.Random(11)
    words = ("disk backup restore replica primary certificate expired rollback deploy queue lag node "
             "cluster pager alert night ingress proxy tunnel token rotate vault index search").split()
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        sections = [f"## Part {j}\n\n" + " ".join(rnd.choice(words) for _ in range(90)) for j in range(3)]
        (root / f"n{i:03d}.md").write_text(f"# Note {i}\n\n" + "\n\n".join(sections) + "\n")
    return sorted(root.glob("*.md"))


def _indexed_size(cfg) -> int:
    from recall.notes.index import run_index
    from recall.vault import store as vault
    con = db.connect(cfg.db_path)
    run_index(con, cfg, embed=False, redactor=vault.redactor)
    con.close()
    return os.path.getsize(cfg.db_path) + (os.path.getsize(f"{cfg.db_path}-wal")
                                           if os.path.exists(f"{cfg.db_path}-wal") else 0)


def test_twenty_reindexes_with_edits_do_not_grow_the_db(tmp_path, make_world):
    """FTS5 keeps a changed row's old postings until its segments merge: over 20 rounds of edits
    that add no word, the DB (and its WAL) stays within 30 % of its first size and keeps coming
    back to it (unmerged, it passed 50 % and kept growing)."""
    import random

    from recall.config import load_config
    files = _notes_tree(tmp_path / "many", 150)
    make_world(notes=tmp_path / "many", source="many")
    cfg = load_config()
    first = _indexed_size(cfg)
    rnd = random.Random(3)
    sizes = []
    for _ in range(20):
        for path in rnd.sample(files, 15):
            lines = path.read_text().split("\n")
            words = lines[4].split()
            rnd.shuffle(words)
            path.write_text("\n".join(lines[:4] + [" ".join(words)] + lines[5:]))
        sizes.append(_indexed_size(cfg))
    assert max(sizes) <= 1.3 * first and min(sizes[10:]) <= 1.05 * first, (first, sizes)


def test_the_pages_a_big_deletion_frees_are_given_back(tmp_path, make_world):
    """Two thirds of the notes gone: the file shrinks with them (VACUUM once a quarter of its
    pages are free); without, it kept every page."""
    from recall.config import load_config
    files = _notes_tree(tmp_path / "many", 150)
    make_world(notes=tmp_path / "many", source="many")
    cfg = load_config()
    full = _indexed_size(cfg)
    for path in files[50:]:
        path.unlink()
    assert _indexed_size(cfg) <= 0.7 * full


def test_one_process_opens_a_db_file_through_one_sqlite_library(tmp_path):
    """Two copies of SQLite in one process (stdlib sqlite3, sqlean for sqlite-vec) each take their own
    connections for all there are: closing the last of one drops the other's locks and may delete
    the WAL under it (recall mcp: the watcher's connection beside a semantic search). The first to
    open a file decides the library; a later wish for vectors scans them without sqlite-vec."""
    if db.sqlite_module() is sqlite3:
        pytest.skip("one SQLite library here: nothing to mix")
    path = tmp_path / "recall.db"
    first = db.connect(path)                                       # as the watcher opens it
    with db.transaction(first):
        first.execute("INSERT INTO meta(key, value) VALUES ('written', 'by the watcher')")
    for _ in range(3):
        other = db.connect(path, readonly=True, vectors=True)      # as a semantic search opens it
        assert type(other) is type(first), type(other)
        other.close()
    assert first.execute("SELECT value FROM meta WHERE key = 'written'").fetchone()[0] == "by the watcher"
    assert Path(f"{path}-wal").exists()                            # still the watcher's


def older_db(new, path, monkeypatch) -> None:
    """At `path`, the DB an index run before migration 13 wrote for the notes `new` (a connection
    to a new index) holds: chunks as text and a row per identifier and chunk."""
    every = db.MIGRATIONS
    monkeypatch.setattr(db, "MIGRATIONS", every[:next(i for i, m in enumerate(every) if "ident_chunks" in str(m))])
    old = db.connect(path)
    old.execute("ATTACH ? AS new", (str(new.execute("PRAGMA database_list").fetchone()[2]),))
    with db.transaction(old):
        old.execute("INSERT INTO meta SELECT * FROM new.meta")            # as its last index run left it
        old.execute("INSERT INTO files SELECT * FROM new.files")
        old.execute("INSERT INTO chunks(id, file_id, ord, start_line, end_line, breadcrumb, body, hash, path) "
                    "SELECT id, file_id, ord, start_line, end_line, breadcrumb, body, hash, path FROM new.chunks")
        old.executemany("INSERT INTO idents(term, chunk_id, hits, key) VALUES (?,?,?,?)", _rows_an_older_index_wrote(old))
    old.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    old.close()
    monkeypatch.setattr(db, "MIGRATIONS", every)


def _rows_an_older_index_wrote(con) -> list:
    """The identifier rows an index run wrote before migration 13: one per identifier and chunk,
    its count, and its key where it is a whole token (notes/index.py as it was)."""
    from recall.notes import terms
    rows = []
    for cid, crumb, body, rel in con.execute("SELECT id, breadcrumb, body, path FROM chunks"):
        whole: set = set()
        found = terms.identifiers(crumb + "\n" + body + "\n" + rel.rsplit("/", 1)[-1], whole)
        rows += [(t, cid, n, terms.key(t) if t in whole else None) for t, n in found.items()]
    return rows


SPELLINGS = ["INC-10963", "inc-10963", "INC 10963", "inc10963", "10963", "jump01", "JUMP01", "jump-01",
             "jump01.example.com", "jump011", "pg-prod-03", "PG_PROD_03", "pg-prod-03.db", "pg-prod-04",
             "HighReplicationLag", "high_replication_lag", "cert-manager", "CERT_MANAGER", "certmanager"]


def test_an_older_dbs_identifiers_are_found_as_a_new_index_finds_them(tmp_path, config, notes, monkeypatch):
    """A DB an older recall wrote (a row per identifier and chunk) is converted when opened: every
    spelling finds what a new index finds, the next index run gives the old rows' pages back, and a
    note deleted afterwards takes its identifiers along."""
    from recall.config import load_config
    from recall.db import space
    from recall.notes.index import run_index
    from recall.notes.search import search
    from recall.vault import store as vault
    _notes_tree(notes / "many", 150)
    cfg = load_config()
    new = db.connect(cfg.db_path)
    run_index(new, cfg, redactor=vault.redactor)
    every = db.MIGRATIONS
    older_db(new, tmp_path / "old.db", monkeypatch)
    old = db.connect(tmp_path / "old.db")
    assert old.execute("SELECT count(*) FROM migrations").fetchone()[0] == len(every)

    def found(con):
        return {q: search(con, cfg, q, remotes=False).public() for q in SPELLINGS}
    assert found(old) == found(new)
    assert old.execute("PRAGMA freelist_count").fetchone()[0] > 0      # the old rows' pages
    assert space.reclaim(old)["vacuumed"]                               # given back as an index run ends
    assert old.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert search(old, cfg, "PG_PROD_03", remotes=False).hits[0].relpath == "incidents/2023/INC-10963-db-failover.md"
    for con in (old, new):
        with db.transaction(con):
            con.execute("DELETE FROM files WHERE relpath = 'runbooks/jump-hosts.md'")
    assert found(old) == found(new)
    assert not search(old, cfg, "jump01", remotes=False).hits


def test_a_chunks_texts_are_deflated_in_the_file_and_read_back_whole(config, notes):
    """The DB keeps a chunk's texts deflated (db/texts.py): the note's words are not in the file as
    written, yet search, its identifiers, and the state scans of the tests (world.stored_bytes) see
    them whole."""
    from recall.config import load_config
    from recall.notes.index import run_index
    from recall.notes.search import search
    from recall.vault import store as vault
    from tests.conftest import write_tree
    from tests.world import stored_bytes
    said = "restore the replica from the nightly backup, then check the lag " * 12
    write_tree(notes, {"zebra.md": f"# Zebra runbook\n\n## On zebra-gw-07.example.com\n\n{said}\n"})
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, redactor=vault.redactor)
    body = con.execute("SELECT body FROM chunks WHERE path = 'zebra.md'").fetchone()[0]
    assert body.rstrip().endswith(said.strip()) and "## On zebra-gw-07.example.com" in body
    stored = con.execute("SELECT length(texts) FROM chunk_rows WHERE id = (SELECT id FROM chunks WHERE body = ?)",
                         (body,)).fetchone()[0]
    assert stored < len(body) / 4                          # a repeated sentence deflates well
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert b"nightly backup, then check" not in cfg.db_path.read_bytes()
    assert b"nightly backup, then check" in stored_bytes(cfg.db_path)
    for query in ("zebra-gw-07.example.com", "zebra-gw-07", "nightly backup replica"):
        assert search(con, cfg, query, remotes=False).hits[0].relpath == "zebra.md", query


def test_the_state_scan_reads_deflated_text_in_pages_no_query_sees(config, notes):
    """tests/world.stored_bytes, which every test's scan of recall's files for a value goes
    through, inflates each blob of each page: a chunk's old text kept in the file's page while a
    reader's snapshot holds the checkpoint back (the new page only in the WAL) is seen, though no
    query returns it and the file's bytes hold it only deflated."""
    from recall.config import load_config
    from recall.notes.index import run_index
    from recall.vault import store as vault
    from tests.conftest import write_tree
    from tests.world import stored_bytes
    said, then = "the quokka sentinel lines up beside the pager", "the wombat watch lines up beside the pager"
    write_tree(notes, {"zoo.md": f"# Zoo\n\n{said}.\n"})
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, redactor=vault.redactor)
    reader = sqlite3.connect(cfg.db_path)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM files").fetchone()      # a snapshot from before the edit
    write_tree(notes, {"zoo.md": f"# Zoo\n\n{then}.\n"})
    run_index(con, cfg, redactor=vault.redactor)
    assert [r[0] for r in con.execute("SELECT body FROM chunks WHERE path = 'zoo.md'")] == [f"# Zoo\n\n{then}."]
    raw = b"".join(p.read_bytes() for p in cfg.home.glob("recall.db*"))
    scanned = b"".join(stored_bytes(p) for p in cfg.home.glob("recall.db*"))
    assert said.encode() not in raw and said.encode() in scanned
    assert then.encode() not in raw and then.encode() in scanned
    reader.close()
