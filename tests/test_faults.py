"""Faults: odd file names, unreadable folders, racing runs, broken storage — one line, never a loss."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from recall import db
from recall.config import load_config
from recall.notes.index import run_index
from recall.vault import store as vault
from tests.conftest import CANARY, NOTES, REPO, free_port, give_to_nobody, run_recall
from tests.test_index import _as_nobody
from tests.world import build

LATIN1 = os.fsencode("latin1-") + b"\xe9.md"          # 'latin1-é.md' written by an old latin-1 system


def _relpaths(con):
    return sorted(r[0] for r in con.execute("SELECT relpath FROM files"))


def test_a_name_that_is_not_utf8_is_indexed_shown_with_a_replacement_char(config, notes):
    with open(os.path.join(os.fsencode(notes), LATIN1), "wb") as fh:
        fh.write(b"# Caf\xc3\xa9 menu\n\nThe espresso machine is in room 4711.\n")
    r = run_recall("index")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and r.stdout.startswith("indexed: 5 new")
    assert "latin1-\ufffd.md: the name is not valid UTF-8" in r.stderr
    r = run_recall("search", "espresso")
    assert r.returncode == 0 and "latin1-\ufffd.md:1" in r.stdout
    r = run_recall("read", "latin1-\ufffd.md")                        # the shown name reads the file
    assert r.returncode == 0 and "room 4711" in r.stdout
    for typed in (os.fsdecode(LATIN1), f"notes:{os.fsdecode(LATIN1)}:3", os.fsdecode(notes / os.fsdecode(LATIN1))):
        r = run_recall("read", typed)                                  # and so does the name as it is
        assert r.returncode == 0 and "room 4711" in r.stdout, r.stderr
    con = db.connect(load_config().db_path)
    assert con.execute("SELECT rawpath FROM files WHERE relpath LIKE 'latin1-%'").fetchone()[0] == LATIN1
    r = run_recall("--json", "index")                                 # nothing to do the second time
    assert r.returncode == 0 and json.loads(r.stdout)["unchanged"] == 5


def test_two_names_that_show_the_same_are_one_indexed_one_skipped(config, notes):
    for tail in (b"\xe8", b"\xe9"):
        with open(os.path.join(os.fsencode(notes), os.fsencode("x-") + tail + b".md"), "wb") as fh:
            fh.write(b"# twin " + tail.hex().encode() + b"\n")
    r = run_recall("index")
    assert r.returncode == 0 and "5 new" in r.stdout and "1 skipped" in r.stdout, r.stderr
    assert "its name shows the same as another file's" in r.stderr
    r = run_recall("index")
    assert r.returncode == 0 and "0 new, 0 changed, 0 removed, 5 unchanged" in r.stdout


def test_an_unreadable_folder_is_reported_once_and_its_notes_are_kept(monkeypatch):
    base = Path(tempfile.mkdtemp(prefix="recall-unreadable-"))       # a tree 'nobody' can reach
    try:
        os.chmod(base, 0o755)
        world = build(base, notes=NOTES)
        notes = world.notes
        monkeypatch.setenv("RECALL_CONFIG", str(world.config))
        monkeypatch.setenv("RECALL_HOME", str(base / "state"))
        cfg = load_config()
        run_index(db.connect(cfg.db_path), cfg, redactor=vault.redactor)
        (notes / "incidents").chmod(0)
        (notes / "meetings/2024-01-15-standup.md").unlink()           # a real removal still counts

        def again():
            con = db.connect(cfg.db_path)
            rep = run_index(con, cfg, redactor=vault.redactor)
            return {"skipped": rep.skipped, "removed": rep.removed, "relpaths": _relpaths(con)}
        if os.geteuid() == 0:                        # root lists every folder: run as 'nobody'
            give_to_nobody(base)
            seen = _as_nobody(again)
        else:
            seen = again()
        assert seen["skipped"] == [[str(notes / "incidents") + "/", "unreadable folder: Permission denied"]]
        assert "incidents/2023/INC-10963-db-failover.md" in seen["relpaths"]
        assert seen["removed"] == 1 and "meetings/2024-01-15-standup.md" not in seen["relpaths"]
    finally:
        (base / "notes" / "incidents").chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


# -- the vault is never emptied by accident ----------------------------------------------------

def _secrets(n, prefix="svc"):
    return "".join(f"- id: {prefix}-{i}\n  service: s{i}\n  value: '{prefix}-{i}-{CANARY}'\n" for i in range(n))


def _vault_ids(con):
    return sorted(r[0] for r in con.execute("SELECT id FROM secrets"))


def test_an_emptied_or_cut_short_secrets_file_does_not_empty_the_vault(config, tmp_path, cli):
    pytest.importorskip("cryptography")
    main, extra = tmp_path / "secrets.yaml", tmp_path / "more.yaml"     # by hand: two secrets files (build makes one)
    main.write_text(_secrets(6))
    extra.write_text(_secrets(2, "ci"))
    for f in (main, extra):
        f.chmod(0o600)
    config(f"secrets: [{main}, {extra}]\n")
    assert cli("secret", "sync")[0] == 0
    con = db.connect(load_config().db_path)
    stored = _vault_ids(con)
    assert len(stored) == 8
    main.write_text("")                                    # an editor crash left it empty
    code, out, err = cli("secret", "sync")
    assert code == 1 and out == ""
    assert err == (f"recall: secret sync would remove 6 of 8 stored secrets (all the secrets of {main}); "
                   "nothing was changed — check the secrets files (an empty or cut-short file?), or run "
                   "'recall secret sync --prune' if they are meant to go\n")
    assert _vault_ids(con) == stored
    main.write_text(_secrets(6))
    extra.write_text("")                                   # 2 of 8, but every one of that file's
    code, _, err = cli("secret", "sync")
    assert code == 1 and f"all the secrets of {extra}" in err and _vault_ids(con) == stored
    extra.write_text(_secrets(2, "ci"))
    main.write_text(_secrets(2))                           # cut short: 4 of 8 would go, half is allowed
    assert cli("secret", "sync")[0] == 0 and len(_vault_ids(con)) == 4
    main.write_text(_secrets(6))
    assert cli("secret", "sync")[0] == 0
    main.write_text(_secrets(1))                           # 5 of 8: more than half
    code, _, err = cli("secret", "sync")
    assert code == 1 and "would remove 5 of 8 stored secrets (more than half the vault)" in err
    code, out, _ = cli("secret", "sync", "--prune")        # meant: say so, and it goes
    assert code == 0 and "5 removed" in out and len(_vault_ids(con)) == 3


@pytest.mark.parametrize("broken", ["secrets", "inventory"])
@pytest.mark.parametrize("text", ["42\n", "id: x\nvalue: y\n", "just a sentence\n"])
def test_a_secrets_or_inventory_file_that_is_not_a_list_is_a_file_1_error_in_every_verb(
        make_world, cli, broken, text):
    w = make_world(secrets=_secrets(1), inventory="- id: bastion\n  kind: host\n  access: ssh bastion.example.com\n")
    files = {"secrets": w.secrets, "inventory": w.inventory}
    files[broken].write_text(text)                      # by hand: the one malformed file of this world
    verbs = [("access", "find", "bastion"), ("access", "show", "bastion"), ("verify", "--dry-run"),
             ("access", "exec", "bastion", "--", "true")]
    if broken == "secrets":
        verbs.append(("secret", "sync"))
    for verb in verbs:
        code, out, err = cli(*verb)
        assert code == 1 and err.startswith(f"recall: {files[broken]}:1: ") and "list of entries" in err, (verb, err)
    code, out, err = cli("search", "bastion")                # search says so, and still searches
    assert code == 0 and f"{files['inventory'] if broken == 'inventory' else files['secrets']}:1:" in err


# -- two index runs at once ---------------------------------------------------------------------

def test_two_index_runs_at_once_both_finish(config, notes):
    """A cron job beside a manual run, both finding new files: the second waits for the first."""
    import subprocess
    import sys

    from tests.conftest import REPO
    for i in range(4000):                                   # long enough to commit several times
        (notes / f"bulk/{i // 100}").mkdir(parents=True, exist_ok=True)
        (notes / f"bulk/{i // 100}/note-{i}.md").write_text(f"# Note {i}\n\nhost-{i}.example.com is rack {i}.\n")
    runs = [subprocess.Popen([sys.executable, str(REPO / "recall.py"), "index"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [r.communicate(timeout=120) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], outs
    assert not any("Traceback" in err for _, err in outs), outs
    waited = [i for i, (_, err) in enumerate(outs) if "waiting for another index run" in err]
    assert len(waited) == 1, outs                             # they really overlapped
    other = runs[1 - waited[0]].pid
    assert f"recall: waiting for another index run (pid {other})\n" in outs[waited[0]][1]
    assert "4004 new" in outs[1 - waited[0]][0] and "0 new" in outs[waited[0]][0]
    con = db.connect(load_config().db_path)
    assert con.execute("SELECT count(*), count(DISTINCT relpath) FROM files").fetchone()[:] == (4004, 4004)



def test_two_full_rebuilds_at_once_keep_the_db_and_the_vault(make_world):
    """Two `index --full` at once: the second waits, then writes beside the first's tidying (its
    VACUUM), which read as "no such table": it moved a sound DB aside and emptied the vault."""
    pytest.importorskip("cryptography")      # the vault they keep
    w = make_world(notes=REPO / "golden" / "notes", secrets=f"- id: tok\n  value: {CANARY}\n")
    assert run_recall("secret", "sync").returncode == 0
    for _ in range(3):
        runs = [subprocess.Popen([sys.executable, str(REPO / "recall.py"), "index", "--full"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [r.communicate(timeout=120) for r in runs]
        assert [r.returncode for r in runs] == [0, 0], outs
        assert not any("damaged" in err or "vault in the new index is empty" in err for _, err in outs), outs
    assert not list(load_config(str(w.config)).db_path.parent.glob("recall.db.broken-*"))
    assert '"id": "tok"' in run_recall("secret", "find", "--json").stdout


def test_ctrl_c_inside_a_notes_text_read_is_an_interrupt_not_damage(make_world):
    """Ctrl-C lands in SQLite's call of chunk_text (the delete triggers of `index --full` read every
    old text): SQLite swallows it as "user-defined function raised exception", which read as a
    damaged DB: the run went on, moved a sound DB aside and emptied the vault."""
    pytest.importorskip("cryptography")      # the vault they keep
    make_world(secrets=f"- id: tok\n  value: {CANARY}\n")
    assert run_recall("secret", "sync").returncode == 0 and run_recall("index").returncode == 0
    stop_inside = ("import os, signal, sys; from recall.db import texts; from recall.cli import main\n"
                   "read = texts.text\n"
                   "def text(blob, n):\n"
                   "    os.kill(os.getpid(), signal.SIGINT)     # a real Ctrl-C, delivered inside the read\n"
                   "    return read(blob, n)\n"
                   "texts.text = text\n"
                   "sys.exit(main(['index', '--full']))\n")
    r = subprocess.run([sys.executable, "-c", stop_inside], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert (r.returncode, r.stderr) == (130, "recall: interrupted\n")
    assert not list(load_config().db_path.parent.glob("recall.db.broken-*"))
    assert '"id": "tok"' in run_recall("secret", "find", "--json").stdout
    assert run_recall("search", "INC-10963").stdout.startswith("1. incidents/2023/INC-10963-db-failover.md")

# -- storage faults: one line, and recall repairs its own cache --------------------------------

NOBODY = 65534


def _bulk(notes, n=400):
    for i in range(n):
        (notes / f"bulk/{i // 100}").mkdir(parents=True, exist_ok=True)
        (notes / f"bulk/{i // 100}/note-{i}.md").write_text(
            f"# Note {i}\n\nhost-{i}.example.com sits in rack {i} " + "filler words " * 40 + "\n")


def _one_line(r, start):
    """The run failed with exactly one stderr line, starting with `start`; no traceback."""
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(start), r.stderr


def _damage(path, pages):
    """Overwrite these 4 KiB pages of the DB with noise, after moving the WAL into the file."""
    import sqlite3
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    size = os.path.getsize(path) // 4096
    with open(path, "r+b") as fh:
        for page in pages:
            fh.seek((page if page >= 0 else size + page) * 4096)
            fh.write(os.urandom(4096))


def _as_user(uid, *args):
    """recall's main() in a forked child that has become another user (root reads and writes
    everything; the interpreter's own folder may be closed to that user, so no exec)."""
    import subprocess
    import sys
    import traceback
    out, err = (tempfile.TemporaryFile(mode="w+") for _ in range(2))
    pid = os.fork()
    if pid == 0:                                      # pragma: no cover (the child)
        code = 70
        try:
            sys.stdout = open(os.dup(out.fileno()), "w")      # not pytest's capture
            sys.stderr = open(os.dup(err.fileno()), "w")
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            from recall.cli import main
            code = main(list(args))
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    out.seek(0)
    err.seek(0)
    return subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), out.read(), err.read())


def test_a_full_disk_is_one_line_and_loses_nothing_committed(config, notes):
    """SQLITE_FULL shim: the DB may not grow past 40 pages (where a small tmpfs cannot be mounted)."""
    import subprocess
    import sys

    from tests.conftest import REPO
    _bulk(notes)
    shim = ("import sys; sys.path.insert(0, sys.argv[1]); from recall import db; connect = db.connect\n"
            "def small(*a, **k):\n    con = connect(*a, **k); con.execute('PRAGMA max_page_count=40'); return con\n"
            "db.connect = small; sys.argv[1:] = ['index']\nfrom recall.cli import run; run()\n")
    r = subprocess.run([sys.executable, "-c", shim, str(REPO)], capture_output=True, text=True, timeout=60)
    _one_line(r, f"recall: the disk holding {load_config().db_path} is full (database or disk is full) — "
                 "free some space")
    from recall.db.repair import quick_check
    assert quick_check(load_config().db_path)[0]               # what was committed is a sound index
    r = run_recall("index")                                   # space again: it finishes
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    con = db.connect(load_config().db_path)
    assert con.execute("SELECT count(*) FROM files").fetchone()[0] == 404
    assert run_recall("search", "host-399.example.com").stdout.startswith("1. bulk/3/note-399.md:1")


def test_a_full_tmpfs_is_one_line(config, notes, tmp_path, monkeypatch):
    import subprocess
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (test_a_full_disk_is_one_line… uses the shim)")
    try:
        monkeypatch.setenv("RECALL_HOME", str(mnt / "state"))
        _bulk(notes, 1500)
        r = run_recall("index")
        _one_line(r, f"recall: the disk holding {mnt / 'state' / 'recall.db'} is full")
        r = run_recall("search", "rack")                      # what was committed still answers
        assert r.returncode == 0 and "Traceback" not in r.stderr
    finally:
        subprocess.run(["umount", str(mnt)])


def test_a_migration_the_disk_cannot_hold_is_said_and_leaves_the_db_as_it_was(config, notes, tmp_path, monkeypatch):
    """Opening an index an older recall wrote on a disk with no room for its migration (the chunks
    rewritten deflated): one line about the full disk, not "damaged, rebuild it"; the DB keeps its
    schema and its notes, and the migration runs once there is room."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    from tests.test_db import older_db
    _bulk(notes, 600)
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, redactor=vault.redactor)
    older = tmp_path / "older.db"
    older_db(con, older, monkeypatch)                         # as a recall before migrations 13 and 14 left it
    files = con.execute("SELECT count(*) FROM files").fetchone()[0]
    version = db.look(older).execute("SELECT max(version) FROM migrations").fetchone()[0]
    size = older.stat().st_size
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size // 1024 + 96}k", "tmpfs",
                                            str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        state = mnt / "state"
        state.mkdir(mode=0o700)
        shutil.copy(older, state / "recall.db")
        monkeypatch.setenv("RECALL_HOME", str(state))
        r = run_recall("search", "rack")
        _one_line(r, f"recall: the disk holding {state / 'recall.db'} is full")
        look = db.look(state / "recall.db")
        assert look.execute("SELECT max(version) FROM migrations").fetchone()[0] == version < len(db.MIGRATIONS)
        assert look.execute("SELECT count(*) FROM files").fetchone()[0] == files
        look.close()
        shutil.move(str(state / "recall.db"), str(tmp_path / "moved.db"))     # room again: elsewhere
        monkeypatch.setenv("RECALL_HOME", str(tmp_path / "roomy"))
        (tmp_path / "roomy").mkdir(mode=0o700)
        shutil.move(str(tmp_path / "moved.db"), str(tmp_path / "roomy" / "recall.db"))
        r = run_recall("search", "host-599.example.com")
        assert r.returncode == 0 and r.stdout.startswith("1. bulk/5/note-599.md"), r.stderr
    finally:
        subprocess.run(["umount", "-l", str(mnt)])           # -l: even with a file still open there


def _owned_tree():
    """The notes world in a folder another user can reach (tmp_path is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="recall-faults-"))
    os.chmod(base, 0o755)
    return build(base, notes=NOTES)


def test_a_read_only_db_and_an_unreadable_home_are_one_line(monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root to run recall as another user")
    world = _owned_tree()
    base = world.root
    try:
        state = base / "state"
        monkeypatch.setenv("RECALL_CONFIG", str(world.config))
        monkeypatch.setenv("RECALL_HOME", str(state))
        assert run_recall("index").returncode == 0
        give_to_nobody(base)
        (state / "recall.db").chmod(0o400)                    # read-only: search still works
        r = _as_user(NOBODY, "search", "jump01")
        assert r.returncode == 0 and "jump-hosts.md" in r.stdout, r.stderr
        _one_line(_as_user(NOBODY, "index"), f"recall: {state / 'recall.db'} is read-only (attempt to write "
                                              "a readonly database) — make it and")
        state.chmod(0)                                        # an unreadable home folder
        for verb in (["search", "jump01"], ["index"], ["secret", "sync"]):
            _one_line(_as_user(NOBODY, *verb), f"recall: cannot open {state / 'recall.db'} (Permission denied)")
    finally:
        (base / "state").chmod(0o700)
        shutil.rmtree(base, ignore_errors=True)


def _doctor(cli, monkeypatch) -> str:
    """`recall doctor`'s output (in-process: an exception would fail the test)."""
    return cli("doctor")[1]


def test_damaged_pages_are_one_line_and_index_full_moves_the_file_aside(config, notes, cli, monkeypatch):
    _bulk(notes)
    assert run_recall("index").returncode == 0
    path = load_config().db_path
    con = db.connect(path)
    con.execute("INSERT INTO embed_ledger(at, provider, model, kind, state, estimate, tokens, items, pid, run) "
                "VALUES (1, 'voyage', 'voyage-3.5', 'document', 'billed', 900, 812, 3, 1, 'r')")
    con.close()
    import sqlite3
    raw = sqlite3.connect(path)                                # every third page of the chunks
    chunk_pages = [r[0] - 1 for r in raw.execute("SELECT pageno FROM dbstat WHERE name = 'chunk_rows'")][::3]   # 1-based
    raw.close()
    _damage(path, chunk_pages)
    r = run_recall("search", "rack")
    _one_line(r, f"recall: {path} is damaged (")
    assert r.stderr.rstrip().endswith("it is a cache: run 'recall index --full': it moves the file aside "
                                      "(recall.db.broken-<time>) and rebuilds it, keeping the vault key")
    shown = _doctor(cli, monkeypatch)
    assert "NO  database integrity" in shown and "damaged (" in shown
    r = run_recall("index", "--full")
    assert r.returncode == 0 and "404 new" in r.stdout, r.stderr
    broken = sorted(p.name for p in path.parent.glob("recall.db.broken-*"))
    assert broken and broken[0].startswith("recall.db.broken-2")
    assert f"recall: {path} was damaged (" in r.stderr and f"moved it to {broken[0]} and rebuilding" in r.stderr
    assert "recall: carried over the token ledger (1 request)" in r.stderr
    con = db.connect(path)
    assert con.execute("SELECT tokens FROM embed_ledger").fetchall()[0][0] == 812
    assert run_recall("search", "host-17.example.com").stdout.startswith("1. bulk/0/note-17.md:1")
    assert "ok  database integrity" in _doctor(cli, monkeypatch)


@pytest.mark.parametrize("damage, said", [
    ("UPDATE chunks_fts_data SET block = randomblob(length(block)) WHERE id > 10", "database disk image is malformed"),
    ("UPDATE chunk_rows SET texts = randomblob(length(texts))", "a note's stored text cannot be read")])
def test_damage_that_quick_check_cannot_see_is_one_line_and_index_full_rebuilds(config, cli, monkeypatch, damage, said):
    """Noise inside FTS5's segment blobs, or inside the chunks' deflated texts: every b-tree is sound
    (quick_check ok), yet searches and the re-index's deletes fail (the trigger hands FTS5 the old
    texts); it is said in one line, and 'index --full' rebuilds (it must not answer 'run index
    --full' forever; the texts' noise was a traceback, 'user-defined function raised exception')."""
    import sqlite3
    assert run_recall("index").returncode == 0
    path = load_config().db_path
    con = sqlite3.connect(path)
    con.execute(damage)
    con.commit()
    con.close()
    assert "ok  database integrity" in _doctor(cli, monkeypatch)
    _one_line(run_recall("search", "failover"), f"recall: {path} is damaged ({said})")
    r = run_recall("index", "--full")
    assert r.returncode == 0 and "4 new" in r.stdout, r.stderr
    assert f"recall: {path} was damaged ({said}): moved it to recall.db.broken-" in r.stderr
    assert run_recall("search", "failover").stdout.startswith("1. incidents/2023/INC-10963-db-failover.md")


def test_a_rebuild_after_damage_the_check_raises_on_names_the_file_once(config):
    """Pages noised where `PRAGMA quick_check` raises rather than lists: 'index --full' said "recall.db
    was /…/recall.db is damaged (…)"."""
    assert run_recall("index").returncode == 0
    path = load_config().db_path
    data = bytearray(path.read_bytes())
    data[8192:12192] = b"\x55" * 4000
    path.write_bytes(bytes(data))
    r = run_recall("index", "--full")
    assert r.returncode == 0 and "4 new" in r.stdout, r.stderr
    assert f"recall: {path} was damaged (database disk image is malformed): moved it to recall.db.broken-" in r.stderr


def test_the_agent_hears_a_storage_fault_as_one_sentence_too(config):
    """Over MCP a damaged DB was a logged page of Python and 'Error executing tool' for the agent."""
    import sqlite3
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from recall import mcp_server
    assert run_recall("index").returncode == 0
    path = load_config().db_path
    con = sqlite3.connect(path)
    con.execute("UPDATE chunks_fts_data SET block = randomblob(length(block)) WHERE id > 10")
    con.commit()
    con.close()

    async def ask():
        async with Client(mcp_server.build_server()) as client:
            return await client.call_tool("recall_search", {"query": "failover"})
    r = anyio.run(ask)
    state = Path(os.environ["RECALL_HOME"]).resolve()      # the server's; the user's shell has it not
    assert r.is_error and r.content[0].text == (
        f"{path} is damaged (database disk image is malformed) — it is a "
        f"cache: ask the user to run 'RECALL_HOME={state} recall index --full': it moves the file aside "
        "(recall.db.broken-<time>) and rebuilds it, keeping the vault key")


def test_a_db_from_a_newer_recall_is_refused_then_rebuilt_keeping_the_vault_key(make_world):
    pytest.importorskip("cryptography")
    make_world(secrets=_secrets(2))
    assert run_recall("index").returncode == 0 and run_recall("secret", "sync").returncode == 0
    cfg = load_config()
    key = (cfg.home / "vault.key").read_bytes()
    con = db.connect(cfg.db_path)
    con.execute("INSERT INTO migrations VALUES (99, 0)")
    con.close()
    newer = f"{len(db.MIGRATIONS)}"
    for verb in (["search", "jump01"], ["index"], ["secret", "find", "svc"]):
        _one_line(run_recall(*verb), f"recall: {cfg.db_path} is from a newer recall (schema 99; this one "
                                     f"knows {newer}) — upgrade recall to use it; or, to use this recall, "
                                     "run 'recall index --full': it moves the file aside")
    r = run_recall("index", "--full")
    assert r.returncode == 0 and "4 new" in r.stdout
    assert "the vault in the new index is empty: run 'recall secret sync' again (the vault key is kept)" in r.stderr
    assert (cfg.home / "vault.key").read_bytes() == key
    assert run_recall("secret", "sync").returncode == 0                # the same key opens what it writes
    assert run_recall("secret", "show", "svc-1").returncode == 0


def test_another_programs_database_is_not_written_into(config):
    import sqlite3
    path = load_config().db_path
    path.parent.mkdir(parents=True)
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE photos(id INTEGER PRIMARY KEY, name TEXT)")
    other.commit()
    other.close()
    _one_line(run_recall("index"), f"recall: {path} is not a recall index (its tables are another program's)")
    r = run_recall("index", "--full")
    assert r.returncode == 0 and "4 new" in r.stdout
    assert "token ledger could not be read" not in r.stderr and "secret sync" not in r.stderr


def _world(make_world, tmp_path):
    """Notes indexed, two secrets synced, one inventory entry, a golden file: every verb has work."""
    make_world(secrets=_secrets(2), inventory="- id: bastion\n  kind: host\n  access: ssh bastion.example.com\n")
    golden = tmp_path / "golden.jsonl"
    golden.write_text('{"query": "jump01", "type": "identifier", "relevant": ["runbooks/jump-hosts.md"]}\n')
    assert run_recall("index").returncode == 0
    assert run_recall("secret", "sync").returncode == 0
    return golden


EVERY_VERB = [
    ["index"], ["search", "jump01"], ["search", "--mode", "keyword", "failover", "rollback"],
    ["read", "runbooks/jump-hosts.md:3"], ["secret", "sync"], ["secret", "find", "svc"],
    ["secret", "show", "svc-0"], ["secret", "command", "svc-0", "--", "env"],
    ["secret", "exec", "svc-0", "--", "true"], ["secret", "get", "svc-0"], ["secret", "log"],
    ["secret", "rotate-key"], ["access", "find", "bastion"], ["access", "show", "bastion"],
    ["access", "exec", "bastion", "--", "true"], ["verify", "--dry-run"], ["verify"],
    ["instructions"], ["eval", "GOLDEN"], ["--json", "search", "jump01"],
]


@pytest.mark.parametrize("damage", ["header", "pages", "late pages"])
def test_every_verb_with_a_corrupt_db_says_one_line_never_a_traceback(make_world, tmp_path, cli, monkeypatch,
                                                                       damage):
    pytest.importorskip("cryptography")
    golden = _world(make_world, tmp_path)
    path = load_config().db_path
    _damage(path, {"header": [0], "pages": range(2, 60, 2), "late pages": range(-12, 0)}[damage])
    failed = 0
    for verb in EVERY_VERB:
        r = run_recall(*[str(golden) if w == "GOLDEN" else w for w in verb])
        lines = (r.stdout + r.stderr).splitlines()
        assert not any(line.startswith("Traceback") for line in lines), (verb, r.stderr)
        assert CANARY not in r.stdout + r.stderr
        assert r.returncode in (0, 1), (verb, r.returncode, r.stderr)
        if r.returncode == 1:
            failed += 1
            assert r.stderr.startswith("recall: ") and r.stderr.count("\n") == 1, (verb, r.stderr)
    # the damage really was in the way: of every verb that opens the DB, or of some queries
    assert failed >= (1 if damage == "late pages" else len(EVERY_VERB) - 1), failed
    _doctor(cli, monkeypatch)                                  # in-process: a raise would fail the test
    r = run_recall("index", "--full")                          # and the way out works
    assert r.returncode == 0 and "moved it to recall.db.broken-" in r.stderr, r.stderr
    assert CANARY not in r.stdout + r.stderr
    assert "the vault in the new index is empty: run 'recall secret sync' again" in r.stderr
    if damage == "header":                                     # nothing of the old file can be read
        assert "recall: the token ledger could not be read from it: the embedding cap counts from 0 again" \
            in r.stderr
    assert run_recall("search", "jump01").stdout.startswith("1. runbooks/jump-hosts.md")


@pytest.mark.parametrize("message, start", [
    ("database or disk is full", "the disk holding /h/recall.db is full"),
    ("attempt to write a readonly database", "/h/recall.db is read-only"),
    ("unable to open database file", "cannot open /h/recall.db"),
    ("database disk image is malformed", "/h/recall.db is damaged"),
    ("file is not a database", "/h/recall.db is damaged"),
    ("disk I/O error", "a disk I/O error on /h/recall.db"),
    ("database is locked", "/h/recall.db stayed locked by another process"),
])
def test_storage_faults_are_told_by_their_text_too(message, start):
    """Before Python 3.11 an SQLite error has no sqlite_errorname: its text decides."""
    import sqlite3

    from recall.db.repair import explain
    assert str(explain(sqlite3.OperationalError(message), "/h/recall.db")).startswith(start)


def test_a_bug_keeps_its_traceback():
    import sqlite3

    from recall.db.repair import explain
    assert explain(sqlite3.IntegrityError("UNIQUE constraint failed: files.source")) is None
    assert explain(ValueError("x")) is None and explain(OSError(2, "No such file or directory", "/x")) is None


def test_a_home_that_is_a_file_is_one_line(config, tmp_path, monkeypatch):
    home = tmp_path / "not-a-folder"
    home.write_text("x")
    monkeypatch.setenv("RECALL_HOME", str(home))
    for verb in (["index"], ["secret", "sync"], ["access", "find", "x"]):
        r = run_recall(*verb)
        assert r.returncode == 1 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    _one_line(run_recall("index"), f"recall: cannot make {home / 'recall.db'} (File exists: {home}) — "
                                   "RECALL_HOME (or 'home:' in the config) must name a folder")


def test_a_100000_character_id_is_echoed_as_a_short_prefix_by_mcp_and_cli(make_world, cli):
    """The id came back whole in the error (100,105 characters against the 16,000 bound)."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from recall import mcp_server
    make_world(inventory="- id: jump01\n  kind: host\n")
    long_id = "a" * 30 + "x" * 99_970

    async def ask():
        async with Client(mcp_server.build_server()) as client:
            return [await client.call_tool(name, {"id": long_id})
                    for name in ("recall_access_show", "recall_secret_show", "recall_verify")]
    for r in anyio.run(ask):
        text = r.content[0].text
        assert r.is_error and len(text) < 500, len(text)
        assert "a" * 30 + "x" * 10 + "…" in text and "x" * 41 not in text, text
    code, out, err = cli("access", "show", long_id)
    assert code == 1 and len(err) < 500 and "x" * 10 + "…" in err, err[:300]


# -- issue 26: walk, lock, migrations, output, prerequisites, files recall does not own ----------

def remove_tree(top) -> None:
    """Remove a tree of any depth without recursion: shutil.rmtree (and so pytest's clean-up of
    old tmp_path folders) recurses once per level and stops in a RecursionError."""
    here = os.getcwd()
    os.chdir(top)
    stack = []
    try:
        while True:
            subdirs = []
            for entry in os.scandir("."):
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                else:
                    os.unlink(entry.name)
            if subdirs:
                stack.append(subdirs[0])
                os.chdir(subdirs[0])
            elif stack:
                os.chdir("..")
                os.rmdir(stack.pop())
            else:
                break
    finally:
        os.chdir(here)
    os.rmdir(top)


def test_a_source_nested_1200_folders_deep_is_indexed_and_searched(tmp_path, monkeypatch):
    deep = tmp_path / "deep"
    deep.mkdir()
    here = os.getcwd()
    try:
        os.chdir(deep)
        for _ in range(1200):                  # relative mkdirs: each step stays short
            os.mkdir("d")
            os.chdir("d")
        Path("bottom.md").write_text("# Bottom\n\nthe quokka sleeps at the very bottom\n")
        os.chdir(here)
        monkeypatch.setenv("RECALL_CONFIG", str(build(tmp_path, notes=deep, source="deep").config))
        r = run_recall("index", "--no-embed")
        assert r.returncode == 0 and r.stdout.startswith("indexed: 1 new"), r.stderr[-500:]
        r = run_recall("search", "quokka")
        assert r.returncode == 0 and "d/d/bottom.md:1" in r.stdout, r.stderr[-500:]
    finally:
        os.chdir(here)
        remove_tree(deep)


def test_an_index_lock_that_is_a_folder_is_one_line(config):
    (load_config().home / "index.lock").mkdir(parents=True)
    _one_line(run_recall("index"), f"recall: {load_config().home / 'index.lock'} is a folder, where recall "
                                   "keeps a file of its own; nothing was changed — move it out of the way")


def test_a_migration_record_behind_its_tables_is_one_line_and_index_full_rebuilds(config):
    assert run_recall("index").returncode == 0
    cfg = load_config()
    con = db.connect(cfg.db_path)
    con.execute("DELETE FROM migrations WHERE version = ?", (len(db.MIGRATIONS),))
    con.close()
    behind = f"{cfg.db_path} is not what its migration record says (schema {len(db.MIGRATIONS) - 1}, but"
    for verb in (["search", "jump01"], ["index"], ["read", "runbooks/jump-hosts.md"]):
        _one_line(run_recall(*verb), f"recall: {behind}")
        assert "run 'recall index --full'" in run_recall(*verb).stderr
    r = run_recall("index", "--full")
    assert r.returncode == 0 and "4 new" in r.stdout, r.stderr
    assert behind.split(" is ", 1)[1] in r.stderr and "moved it to recall.db.broken-" in r.stderr
    assert "jump-hosts.md" in run_recall("search", "jump01").stdout


def test_a_full_stdout_is_said_as_output_not_as_a_full_disk(make_world):
    make_world()
    assert run_recall("index").returncode == 0
    verbs = [["search", "jump01"], ["--json", "search", "jump01"], ["read", "runbooks/jump-hosts.md"]]
    try:
        import cryptography  # noqa: F401
        make_world(secrets=_secrets(1))
        assert run_recall("secret", "sync").returncode == 0
        verbs.append(["secret", "exec", "svc-0", "--", "echo", "a child's output"])   # copied by the runner
    except ImportError:
        pass
    for verb in verbs:
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, str(REPO / "recall.py"), *verb], stdout=full,
                               stderr=subprocess.PIPE, text=True)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("recall: could not write the output (No space left on device)"), r.stderr
        assert "disk holding" not in r.stderr and CANARY not in r.stderr


@pytest.mark.parametrize("typed", ["me@analytics-box", "db01.example.com"])
def test_remote_install_behind_a_down_prerequisite_exits_69_however_the_host_is_named(tmp_path, make_world,
                                                                                      typed):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f"#!/bin/sh\ntouch {tmp_path / 'ssh-ran'}\nexit 255\n")
    (bin_dir / "ssh").chmod(0o755)
    make_world(inventory=f"- id: vpn\n  check: tcp 127.0.0.1:{free_port()}\n  timeout: 1\n"
                         "  hint: connect the VPN client and retry\n"
                         "- id: analytics-box\n  kind: host\n  requires: [vpn]\n  url: ssh://db01.example.com\n")
    r = run_recall("remote", "install", typed, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert r.returncode == 69, r.stderr
    assert r.stderr.strip() == "recall: prerequisite 'vpn' is down: connect the VPN client and retry"
    assert not (tmp_path / "ssh-ran").exists()


@pytest.mark.parametrize("name", ["recall.db", "recall.db-wal", "recall.db-shm", "index.lock"])
def test_a_state_file_that_is_a_link_is_refused_and_its_target_left_alone(config, tmp_path, name):
    mine = tmp_path / "my-file.txt"                     # a user's file the link points at
    mine.write_text("mine\n")
    mine.chmod(0o644)
    assert run_recall("index").returncode == 0
    home = load_config().home
    if (home / name).exists():
        (home / name).unlink()
    (home / name).symlink_to(mine)
    for verb in (["index"], ["index", "--full"]) + ((["search", "jump01"],) if name != "index.lock" else ()):
        r = run_recall(*verb)
        assert r.returncode == 1 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith(f"recall: {home / name} is a symbolic link (to {mine}); recall writes "
                                   "only its own files, so nothing was changed — remove the link"), r.stderr
        assert oct(mine.stat().st_mode & 0o777) == "0o644" and mine.read_text() == "mine\n"
    (home / name).unlink()
    assert run_recall("index", "--full").returncode == 0


def test_a_db_that_is_a_fifo_is_refused_not_waited_on(config):
    home = load_config().home
    home.mkdir(parents=True, mode=0o700)
    os.mkfifo(home / "recall.db", 0o644)
    _one_line(run_recall("index"), f"recall: {home / 'recall.db'} is not a regular file, where recall keeps a "
                                   "file of its own")
    assert oct((home / "recall.db").stat().st_mode & 0o777) == "0o644"


def test_index_full_leaves_no_wal_behind_while_another_process_holds_the_db(config):
    import sqlite3
    assert run_recall("index").returncode == 0
    cfg = load_config()
    holder = sqlite3.connect(str(cfg.db_path))         # an MCP server, say: the WAL cannot be removed
    try:
        holder.execute("SELECT count(*) FROM files").fetchone()
        r = run_recall("index", "--full")
        assert r.returncode == 0, r.stderr
        assert os.path.getsize(f"{cfg.db_path}-wal") == 0
        assert holder.execute("SELECT count(*) FROM files").fetchone()[0] == 4
    finally:
        holder.close()


def test_doctor_on_a_source_nested_1200_folders_deep_says_its_count_no_traceback(tmp_path, monkeypatch):
    """os.walk's recursion ended doctor (and index) in a RecursionError page."""
    deep = tmp_path / "deep"
    deep.mkdir()
    os.chdir(deep)
    for _ in range(1200):                      # relative mkdirs: the full path passes PATH_MAX
        os.mkdir("d")
        os.chdir("d")
    Path("bottom.md").write_text("# Bottom\n\nthe deepest note\n")
    os.chdir(tmp_path)
    monkeypatch.setenv("RECALL_CONFIG", str(build(tmp_path, notes=deep, source="deep").config))
    try:
        index = run_recall("index", "--no-embed")
        r = run_recall("doctor")
    finally:                                   # pytest's own clean-up (shutil.rmtree) recurses too
        subprocess.run(["rm", "-rf", str(deep)], check=True)
    assert "Traceback" not in index.stderr, index.stderr[-2000:]
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stdout + r.stderr, r.stderr[-2000:]
    source = next(line for line in r.stdout.splitlines() if " source deep " in line)
    assert source.startswith("ok ") and ": 1 file," in source, source
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("face", ["recall.cli", "recall.cli.notes", "recall.cli.secrets", "recall.mcp_server"])
def test_a_write_error_in_a_face_is_said_as_output(face):
    """The faces open no file of their own: an OSError without a file name raised in their code (an
    I/O error on stdout) is the output that could not be written, in every module of the CLI package."""
    import errno

    from recall import db
    scope = {"__name__": face, "errno": errno}
    exec("def write():\n    raise OSError(errno.EIO, 'Input/output error')\n", scope)
    try:
        scope["write"]()
    except OSError as exc:
        err = db.explain(exc)
    assert err is not None and str(err).startswith("could not write the output (Input/output error)"), err
    assert err.exit_code == 1


def test_a_path_no_file_can_have_is_one_line_naming_it():
    """A 100 kB --config path and XDG_CONFIG_HOME=/dev/null (`init`) were tracebacks (ENAMETOOLONG,
    ENOTDIR)."""
    long = "/tmp/" + "x" * 100_000
    for args in (["--config", long, "search", "x"], ["--config", long, "init"]):
        r = run_recall(*args)
        assert r.returncode == 1 and "Traceback" not in r.stderr and len(r.stderr) < 500, r.stderr[-300:]
        assert r.stderr.startswith("recall: cannot use /tmp/" + "x" * 35) and "File name too long" in r.stderr
    r = run_recall("init", env={"XDG_CONFIG_HOME": "/dev/null"})
    _one_line(r, "recall: cannot use /dev/null/recall (Not a directory) — check the path")


@pytest.mark.parametrize("named", ["secrets", "inventory"])
def test_a_secrets_or_inventory_file_that_is_a_fifo_is_one_line_not_a_wait(tmp_path, named):
    """`secrets: [FIFO]` held search, doctor, access find and verify until killed."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo, 0o600)
    files = {"secrets": "- id: a-token\n  value: abcdefgh12345678\n", "inventory": "- id: jump01\n  kind: host\n"}
    world = build(tmp_path / "w", notes={"a.md": "# A\n\nalpha\n"}, **{**files, named: fifo})
    env = {"RECALL_CONFIG": str(world.config)}
    r = run_recall("access", "find", env=env, timeout=20)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"recall: {fifo}: not a regular file (a FIFO, a device, a socket), so it was not read" in r.stderr
    for verb in (["search", "alpha"], ["verify", "--dry-run"], ["doctor"]):
        r = run_recall(*verb, env=env, timeout=20)
        assert "Traceback" not in r.stderr and "not a regular file" in r.stdout + r.stderr, (verb, r.stderr)


def test_a_vault_key_gone_is_said_as_that_by_every_verb_that_needs_it(make_world):
    """The key moved away: each verb that must mask or inject says where the key should be, never an
    errno and its path dump, and nothing runs."""
    pytest.importorskip("cryptography")
    make_world(secrets="- id: tok\n  value: tok-Zq8Lm3Np7Rv2Xw9K\n",
               inventory="- id: box\n  kind: host\n  secrets: [tok]\n  verify: 'true'\n",
               config="embedding: {provider: none}\n")
    assert run_recall("secret", "sync").returncode == 0
    key = load_config().home / "vault.key"
    key.rename(key.with_name("moved.key"))
    for argv in (("verify", "box"), ("access", "show", "box"), ("access", "exec", "box", "--", "true"),
                 ("secret", "exec", "tok", "--", "true"), ("search", "box")):
        r = run_recall(*argv)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, (argv, r.stderr)
        assert f"no vault key at {key}" in r.stderr and "Errno" not in r.stderr, (argv, r.stderr)


def test_a_note_replaced_by_a_fifo_since_indexing_is_refused_not_waited_on(tmp_path, monkeypatch):
    """read and search (a hit pointed at its section re-reads the file) opened the note as it is now:
    a FIFO held them until killed; the next index run left it indexed."""
    multi = "# Top\n\nintro words\n\n## Alpha\n\nzebra zebra giraffe\n\n## Beta\n\nzebra giraffe okapi okapi\n"
    world = build(tmp_path, notes={"multi.md": multi}, config="embedding: {provider: none}\n")
    monkeypatch.setenv("RECALL_CONFIG", str(world.config))
    assert run_recall("index").returncode == 0
    assert "multi.md:9" in run_recall("search", "okapi giraffe").stdout      # pointed at Beta: re-read
    (world.notes / "multi.md").unlink()
    os.mkfifo(world.notes / "multi.md")
    r = run_recall("search", "okapi giraffe", timeout=20)
    assert r.returncode == 0 and "multi.md:1" in r.stdout, r.stdout + r.stderr     # the chunk as stored
    r = run_recall("read", "multi.md", timeout=20)
    _one_line(r, f"recall: cannot read {world.notes / 'multi.md'}: not a regular file")
    (world.notes / "multi.md").unlink()
    (world.notes / "multi.md").mkdir()                   # a folder now: its descriptor opened, no page
    for argv in (("read", "multi.md"), ("search", "okapi giraffe")):
        r = run_recall(*argv, timeout=20)
        assert "Traceback" not in r.stderr and r.returncode == (argv[0] == "read"), r.stderr
    (world.notes / "multi.md").rmdir()
    os.mkfifo(world.notes / "multi.md")
    r = run_recall("index", timeout=20)
    assert r.returncode == 0 and "1 removed" in r.stdout, r.stdout
    assert "no notes match" in run_recall("search", "okapi", timeout=20).stdout


def test_a_search_does_not_wait_out_another_writer_for_its_caches(make_world):
    """The inventory's cache (the first search after the inventory changed) waited the whole 30 s busy
    timeout while another process held a write (an index run, sqlite3 'BEGIN EXCLUSIVE')."""
    import sqlite3
    import time
    make_world(inventory="- id: jump01\n  kind: host\n", config="embedding: {provider: none}\n")
    assert run_recall("index").returncode == 0
    cfg = load_config()
    holder = sqlite3.connect(str(cfg.db_path), isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("INSERT INTO meta VALUES ('held', 'x') ON CONFLICT(key) DO UPDATE SET value='y'")
        started = time.monotonic()
        r = run_recall("--json", "search", "jump01", timeout=60)
        took = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["access"], r.stdout          # the entry pinned all the same
    assert took < 10, took
