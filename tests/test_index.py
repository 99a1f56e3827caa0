"""Indexing: sources, globs, incremental updates, skips and bad input."""
import json
import os
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from recall import db
from recall.config import load_config
from recall.errors import RecallError
from recall.notes import terms
from recall.notes.index import run_index
from recall.notes.search import search
from recall.notes.walk import glob_to_regex
from recall.vault import store as vault
from tests.conftest import NOTES, give_to_nobody, write_tree
from tests.world import build


def _index(**kw):
    cfg = load_config()
    con = db.connect(cfg.db_path)
    return cfg, con, run_index(con, cfg, **kw, redactor=vault.redactor)


def _relpaths(con):
    return sorted(r[0] for r in con.execute("SELECT relpath FROM files"))


def test_first_index_then_nothing_to_do(config):
    cfg, con, rep = _index()
    assert (rep.new, rep.changed, rep.removed) == (4, 0, 0)
    assert rep.chunks >= 4
    _, _, again = _index()
    assert (again.new, again.changed, again.removed, again.unchanged) == (0, 0, 0, 4)
    assert again.chunks == 0


def test_changed_and_deleted_files(config, notes):
    _index()
    (notes / "runbooks/jump-hosts.md").write_text("# Jump hosts\n\nNow only bastion02.example.com.\n")
    (notes / "meetings/2024-01-15-standup.md").unlink()
    cfg, con, rep = _index()
    assert (rep.changed, rep.removed) == (1, 1)
    assert "meetings/2024-01-15-standup.md" not in _relpaths(con)
    held = "SELECT count(*) FROM idents_fts WHERE idents_fts MATCH ?"
    assert con.execute(held, (terms.held("jump01.example.com"),)).fetchone()[0] == 0
    assert con.execute(held, (terms.held("bastion02.example.com"),)).fetchone()[0] == 1
    # the FTS index follows deletions (external content kept in sync by triggers)
    assert con.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'standup'").fetchone()[0] == 0


def test_a_note_deleted_while_the_run_reads_the_tree_is_removed_not_skipped(config, notes, monkeypatch):
    """`rm` of a note between the walk and its read: the run said 'skipped …: unreadable: No such file
    or directory' and the deleted note stayed in the results until the next run; now it is removed."""
    from recall.notes import index
    _index()
    gone, walk = notes / "meetings/2024-01-15-standup.md", index.walk_source

    def walked_then_deleted(*args, **kw):
        yield from walk(*args, **kw)
        gone.unlink(missing_ok=True)
    monkeypatch.setattr(index, "walk_source", walked_then_deleted)
    cfg, con, rep = _index(full=True)
    assert (rep.skipped, rep.removed) == ([], 1)
    assert "meetings/2024-01-15-standup.md" not in _relpaths(con)
    (notes / "dangling.md").symlink_to(notes / "nowhere.md")       # a link left dangling is still said
    cfg, con, rep = _index()
    assert [why for _, why in rep.skipped] == ["unreadable: No such file or directory"]


# an identifier each of the config's notes holds and no other note does
OWN_IDENTIFIER = {"incidents/2023/INC-10963-db-failover.md": "pg-prod-04", "runbooks/jump-hosts.md": "jump011.example.com",
                  "projects/cert-rotation.md": "cert-manager", "meetings/2024-01-15-standup.md": "10963"}


def _found(con, cfg, query):
    return [h.relpath for h in search(con, cfg, query, remotes=False).hits]


def test_a_chunk_id_taken_again_holds_only_its_own_identifiers(config, notes):
    """A note rewritten takes its chunks' ids again (the last ones, reused): the new text's
    identifiers are found there and the old text's nowhere."""
    cfg, con, _ = _index()
    last = con.execute("SELECT f.relpath FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY c.id DESC").fetchone()[0]
    ids = [r[0] for r in con.execute("SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.relpath=?", (last,))]
    assert _found(con, cfg, OWN_IDENTIFIER[last]) == [last]
    (notes / last).write_text("# Moved\n\nNow about OPS-4242 only.\n")
    _, con, rep = _index()
    assert rep.changed == 1
    assert con.execute("SELECT min(c.id) FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.relpath=?",
                       (last,)).fetchone()[0] == ids[0]          # the id is taken again
    assert _found(con, cfg, OWN_IDENTIFIER[last]) == []
    assert _found(con, cfg, "OPS-4242") == _found(con, cfg, "ops_4242") == [last]
    for rel, ident in OWN_IDENTIFIER.items():                        # the other notes keep theirs
        assert rel == last or _found(con, cfg, ident)[0] == rel


def test_a_spelling_goes_with_the_last_note_naming_it_whole(config, notes):
    """JUMP_01 is a spelling of jump01 while a note names jump01 itself; jump01.example.com alone
    (jump01 only its dotted prefix) makes it no spelling, as it never was."""
    write_tree(notes, {"runbooks/bastion.md": "# Bastion\n\nssh to jump01 first, then to the database host.\n"})
    cfg, con, _ = _index()
    assert "runbooks/bastion.md" in _found(con, cfg, "JUMP_01")
    (notes / "runbooks/bastion.md").unlink()
    _, con, _ = _index()
    assert _found(con, cfg, "JUMP_01") == []
    assert _found(con, cfg, "jump01") == ["runbooks/jump-hosts.md"]


def test_no_identifier_outlives_the_chunks_holding_it(config, notes):
    """Notes edited, removed and added back, run after run: the identifiers kept are those the
    notes hold now, each once (the DB stays in proportion)."""
    from recall.notes import terms
    cfg, con, _ = _index()
    for round_ in range(3):
        (notes / "runbooks/jump-hosts.md").write_text(f"# Jump hosts\n\nNow bastion{round_:02d}.example.com.\n")
        (notes / "meetings/2024-01-15-standup.md").unlink()
        _index()
        write_tree(notes, {"meetings/2024-01-15-standup.md": NOTES["meetings/2024-01-15-standup.md"]})
        _, con, _ = _index()
    held = set()
    for crumb, body, rel in con.execute("SELECT breadcrumb, body, path FROM chunks"):
        held |= set(terms.identifiers(crumb + "\n" + body + "\n" + rel.rsplit("/", 1)[-1]))
    kept = [t.split("~", 1)[-1] for (t,) in con.execute("SELECT term FROM idents_vocab WHERE doc > 0")]
    assert sorted(set(kept)) == sorted(held)
    assert _found(con, cfg, "bastion02.example.com") == ["runbooks/jump-hosts.md"]
    assert _found(con, cfg, "bastion01.example.com") == []


def test_touched_but_same_content_is_not_rechunked(config, notes):
    cfg, con, _ = _index()
    before = con.execute("SELECT id FROM chunks ORDER BY id").fetchall()
    p = notes / "runbooks/jump-hosts.md"
    os.utime(p, (1_700_000_000, 1_700_000_000))
    _, con, rep = _index()
    assert rep.unchanged == 4 and rep.changed == 0
    assert con.execute("SELECT id FROM chunks ORDER BY id").fetchall() == before


def test_full_rebuild_rereads_everything(config):
    _index()
    _, _, rep = _index(full=True)
    assert rep.changed == 4


def test_binary_large_and_git_are_skipped_and_reported(config, notes):
    (notes / "blob.md").write_bytes(b"# x\x00\x01\x02")
    (notes / "big.md").write_text("# big\n" + "word " * 600_000)
    (notes / ".git").mkdir()
    (notes / ".git" / "HEAD.md").write_text("# not a note")
    (notes / "image.png").write_bytes(b"\x89PNG")
    cfg, con, rep = _index()
    reasons = {os.path.basename(p): why for p, why in rep.skipped}
    assert reasons["blob.md"] == "binary"
    assert reasons["big.md"].startswith("larger than")
    assert not any(r.startswith(".git") for r in _relpaths(con))
    assert "image.png" not in _relpaths(con)


def test_invalid_utf8_is_indexed_with_a_warning(config, notes):
    (notes / "latin1.md").write_bytes("# Caf\xe9 notes\n\nline two\n".encode("latin-1"))
    cfg, con, rep = _index()
    assert "latin1.md" in _relpaths(con)
    assert any("invalid UTF-8 at line 1" in w for _, w in rep.warnings)


def _as_nobody(fn):
    """fn() in a forked child that has given up root for 'nobody' (root reads every file, so an
    unreadable file needs an ordinary user); returns what fn returned, through a pipe as JSON."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                      # pragma: no cover (the child)
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            reply = {"ok": fn()}
        except BaseException as exc:
            reply = {"error": repr(exc)}
        os.write(w, json.dumps(reply).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        piece = os.read(r, 65536)
        if not piece:
            break
        data += piece
    os.close(r)
    os.waitpid(pid, 0)
    reply = json.loads(data)
    assert "error" not in reply, reply["error"]
    return reply["ok"]


def test_unreadable_file_is_reported_and_kept(tmp_path, monkeypatch):
    """A file that cannot be read for now (permissions) is reported, and its indexed text kept."""
    base = Path(tempfile.mkdtemp(prefix="recall-unreadable-"))       # a tree 'nobody' can reach
    try:
        os.chmod(base, 0o755)
        world = build(base, notes=NOTES)
        notes = world.notes
        monkeypatch.setenv("RECALL_CONFIG", str(world.config))
        monkeypatch.setenv("RECALL_HOME", str(base / "state"))
        _index()[1].close()       # closed now, not by a later GC while the owners change (it drops the WAL)
        p = notes / "runbooks/jump-hosts.md"
        p.chmod(0)

        def again():
            _, con, rep = _index(full=True)
            return {"skipped": rep.skipped, "relpaths": _relpaths(con)}
        if os.geteuid() == 0:
            give_to_nobody(base)
            seen = _as_nobody(again)
        else:
            seen = again()
        assert [why for path, why in seen["skipped"] if path.endswith("jump-hosts.md")][0].startswith("unreadable")
        assert "runbooks/jump-hosts.md" in seen["relpaths"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_broken_link_and_fifo_are_reported_not_fatal(config, notes):
    (notes / "gone.md").symlink_to(notes / "nowhere.md")
    os.mkfifo(notes / "pipe.md")
    cfg, con, rep = _index()
    reasons = {os.path.basename(p): why for p, why in rep.skipped}
    assert reasons["gone.md"].startswith("unreadable")
    assert reasons["pipe.md"] == "not a regular file"
    assert len(_relpaths(con)) == 4


def test_progress_bar_on_a_terminal_only(config, tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO, run_in_pty
    r = subprocess.run([sys.executable, str(REPO / "recall.py"), "index"], capture_output=True, text=True)
    assert r.returncode == 0 and "[" not in r.stderr and r.stdout.startswith("indexed: 4 new")
    code, out = run_in_pty([sys.executable, str(REPO / "recall.py"), "index", "--full"])
    assert b"[##############################] 4/4" in out and b"indexed: 0 new, 4 changed" in out


def test_missing_source_path_is_an_error_and_changes_nothing(config, tmp_path):
    cfg, con, _ = _index()
    before = _relpaths(con)
    config(sources={"gone": tmp_path / "nope"})
    with pytest.raises(RecallError) as err:
        _index()
    assert "nope" in str(err.value) and "config.yaml:4" in str(err.value)
    assert _relpaths(con) == before


def test_a_missing_or_empty_source_keeps_its_notes_until_prune(config, tmp_path, notes):
    from tests.conftest import run_recall
    assert run_recall("index").returncode == 0
    moved = tmp_path / "unmounted"
    notes.rename(moved)                                       # the disk is not mounted
    r = run_recall("index")
    assert r.returncode == 0, r.stderr
    assert f"recall: {notes}: source 'notes' is not there (missing, or a disk not mounted): kept the 4 " \
           "files indexed from it; 'recall index --prune' removes them" in r.stderr.splitlines()
    assert "0 removed" in r.stdout
    r = run_recall("search", "INC-10963")
    assert "INC-10963-db-failover.md" in r.stdout
    notes.mkdir()                                             # an empty mount point
    r = run_recall("--json", "index")
    assert json.loads(r.stdout)["removed"] == 0
    assert "holds no file now" in json.dumps(json.loads(r.stdout)["warnings"])
    r = run_recall("index", "--prune")
    assert r.returncode == 0 and "4 removed" in r.stdout and "kept" not in r.stderr
    assert "INC-10963-db-failover.md" not in run_recall("search", "INC-10963").stdout


def test_a_search_beside_a_running_index_says_so_not_that_notes_are_missing(isolated_home, cli):
    """`recall index` of a large tree in one shell and `recall search` in another: the search said
    "no index … run 'recall index' first", then "the index holds no note yet: add markdown or text
    files", of a folder full of them being indexed."""
    from recall.db.lock import index_lock
    assert cli("init")[0] == 0
    (isolated_home / "notes" / "jira.md").write_text("# Jira\n\nOur Jira project key is OPS.\n")
    cfg = load_config()
    cfg.db_path.parent.mkdir(mode=0o700, parents=True)
    with index_lock(cfg.db_path):                       # an index run that has not made the DB yet
        code, out, err = cli("search", "jira")
    assert (code, out) == (1, "") and err == (f"recall: no index at {cfg.db_path} yet: an index run "
                                              f"(pid {os.getpid()}) is making it — search again when it ends\n")
    db.connect(cfg.db_path).close()                     # made, nothing written yet
    with index_lock(cfg.db_path):
        code, out, err = cli("search", "jira")
    assert code == 0 and out.startswith("no notes match 'jira'") and err == (
        f"recall: an index run (pid {os.getpid()}) is writing the index now: these results hold what it has "
        "written so far\n")
    assert cli("index")[0] == 0
    code, out, err = cli("search", "jira")                # the run over: no notice
    assert code == 0 and out.startswith("1. jira.md:1") and err == ""


def test_a_new_empty_notes_folder_says_why_search_finds_nothing(isolated_home, cli):
    """`recall init`, `recall index` and a search before any note is written: index, search and the
    search after a note is saved each said nothing of why nothing matched ("no notes match 'jira'")."""
    notes = isolated_home / "notes"
    assert cli("init")[0] == 0
    code, out, err = cli("index")
    assert code == 0 and out.startswith("indexed: 0 new") and err == (
        f"recall: {notes}: source 'notes' holds no note yet (no file matching *.md, *.markdown, *.mdx, *.mkd, "
        "*.md.erb, *.txt, *.rst): add some, then run 'recall index' again\n")
    code, out, err = cli("search", "jira")
    assert code == 0 and out.startswith("no notes match 'jira'\n") and err == (
        f"recall: the index holds no note yet: add markdown or text files to {notes}, then run 'recall index'\n")
    time.sleep(0.05)
    (notes / "jira.md").write_text("# Jira\n\nOur Jira project key is OPS.\n")     # saved, not indexed
    assert "recall: notes changed since the last index run" in cli("search", "jira")[2]
    code, out, err = cli("index")
    assert out.startswith("indexed: 1 new") and err == ""
    code, out, err = cli("search", "jira")
    assert code == 0 and out.startswith("1. jira.md:1") and err == ""


def test_a_folder_named_in_no_utf8_is_not_taken_for_a_change_after_each_index(isolated_home, cli):
    """A folder whose name is not UTF-8 (copied from another system): every search said "notes changed
    since the last index run", however often `recall index` ran, and --json's `stale` held it."""
    notes = isolated_home / "notes"
    assert cli("init")[0] == 0
    odd = os.fsdecode(bytes(notes) + b"/dir\xff\xfe")
    os.makedirs(odd)
    with open(os.path.join(odd, "alpha.md"), "w") as fh:
        fh.write("# Alpha\n\nalpha beta\n")
    (notes / "beta.md").write_text("# Beta\n\nalpha gamma\n")
    assert cli("index")[0] == 0
    code, out, err = cli("search", "alpha")
    assert code == 0 and "dir\ufffd\ufffd/alpha.md:1" in out and "changed since" not in err, err
    assert json.loads(cli("--json", "search", "alpha")[1])["stale"] == []
    time.sleep(0.05)
    (notes / "gamma.md").write_text("# Gamma\n\nalpha delta\n")     # a change above it is still seen
    assert "recall: notes changed since the last index run" in cli("search", "alpha")[2]


def test_include_exclude_globs(make_world, notes):
    (notes / "code").mkdir()
    (notes / "code" / "deploy.sh").write_text("echo deploy\n")
    (notes / "drafts").mkdir()
    (notes / "drafts" / "wip.md").write_text("# wip\n")
    make_world(source="n", include=["*.md", "code/**"], exclude=["drafts/"])
    _, con, _ = _index()
    rels = _relpaths(con)
    assert "code/deploy.sh" in rels and "drafts/wip.md" not in rels
    assert "incidents/2023/INC-10963-db-failover.md" in rels


def test_secrets_file_inside_notes_is_never_indexed(make_world, notes):
    (notes / "secrets.md").write_text("# secrets\nvalue: hunter2hunter2\n")
    make_world(source="n", secrets=notes / "secrets.md")
    _, con, _ = _index()
    assert "secrets.md" not in _relpaths(con)


@pytest.mark.parametrize("pattern,path,ok", [
    ("*.md", "a/b/c.md", True), ("*.md", "c.txt", False), ("docs/**", "docs/x/y.txt", True),
    ("docs/**", "other/docs/y.txt", False), ("drafts/", "drafts/a.md", True), ("a?.md", "ab.md", True),
])
def test_globs(pattern, path, ok):
    assert bool(glob_to_regex(pattern).match(path)) is ok


def test_db_file_is_private(config):
    cfg, con, _ = _index()
    assert oct(os.stat(cfg.db_path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(cfg.home).st_mode & 0o777) == "0o700"


def test_incident_template_dates_are_the_hits_date_and_rank_it(config, notes):
    from tests.conftest import run_recall
    from tests.test_chunk import INCIDENT_DATES
    for n, form in enumerate(sorted(INCIDENT_DATES)):
        (notes / f"inc/form-{n}.md").parent.mkdir(exist_ok=True)
        (notes / f"inc/form-{n}.md").write_text(INCIDENT_DATES[form].replace("INC-4242", f"INC-424{n}"))
    # the same outage written twice: the older report (its Date: line) ranks below the newer one,
    # though the older file was saved last
    (notes / "inc/new.md").write_text("# Zebra outage\n\n| Date | Severity |\n|---|---|\n"
                                      "| 2026-11-20 | SEV2 |\n\nzebra gateway down\n")
    (notes / "inc/old.md").write_text("# Zebra outage\n\nDate: 2019-03-01. Severity: SEV2\n\nzebra gateway down\n")
    assert run_recall("index").returncode == 0
    for n, form in enumerate(sorted(INCIDENT_DATES)):
        r = run_recall("--json", "search", f"INC-424{n}")
        hits = json.loads(r.stdout)["hits"]
        assert hits[0]["relpath"] == f"inc/form-{n}.md" and hits[0]["date"] == "2025-06-02", form
    hits = json.loads(run_recall("--json", "search", "zebra gateway").stdout)["hits"]
    assert [(h["relpath"], h["date"]) for h in hits[:2]] == [("inc/new.md", "2026-11-20"),
                                                            ("inc/old.md", "2019-03-01")]


def test_missing_sources_names_each_folder_not_there(config, notes, tmp_path):
    from recall.notes.walk import missing_sources
    config(sources={"usb": tmp_path / "usb"})
    assert missing_sources(load_config().sources) == [
        f"source 'usb': {tmp_path / 'usb'} is not there (missing, or a disk not mounted): "
        "its notes are searched as last indexed"]


def _git(root, *args, date=None):
    import subprocess
    env = dict(os.environ, GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@example.com", GIT_COMMITTER_NAME="a",
               GIT_COMMITTER_EMAIL="a@example.com")
    if date:
        env.update(GIT_AUTHOR_DATE=f"{date}T12:00:00", GIT_COMMITTER_DATE=f"{date}T12:00:00")
    subprocess.run(["git", "-C", str(root), *args], env=env, check=True, capture_output=True)


def test_a_note_is_dated_by_its_own_date_its_name_its_last_commit_then_its_mtime(config, notes, tmp_path):
    """A clone's files all carry the day it was made: a note with no date of its own is dated by
    its last commit (one `git log` a run, names that are not ASCII too), else by its mtime (issue 37.8)."""
    if shutil.which("git") is None:
        pytest.skip("no git")
    repo = tmp_path / "repo"
    write_tree(repo, {"own.md": "---\ndate: 2021-04-05\n---\n# Own\n\nfront matter\n",
                      "line.md": "# Line\n\nDate: 12 March 2022\n\nwords\n",
                      "2023-01-09-named.md": "# Named\n\nwords\n",
                      "notes/committed.md": "# Committed\n\nwords\n", "notes/café.md": "# Café\n\nwords\n",
                      "notes/changed.md": "# Changed\n\nwords\n"})
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first", date="2020-01-02")
    (repo / "notes" / "changed.md").write_text("# Changed\n\nmore words\n")
    _git(repo, "commit", "-qam", "second", date="2020-06-07")
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(repo), str(clone))          # every file's mtime: today
    (clone / "notes" / "new.md").write_text("# New\n\nnot committed\n")
    config(sources={"clone": clone})
    cfg, con, _ = _index()
    dates = dict(con.execute("SELECT relpath, date FROM files WHERE source = 'clone'").fetchall())
    today = datetime.now(timezone.utc).date().isoformat()       # an mtime is dated in UTC
    assert dates == {"own.md": "2021-04-05", "line.md": "2022-03-12", "2023-01-09-named.md": "2023-01-09",
                     "notes/committed.md": "2020-01-02", "notes/café.md": "2020-01-02",
                     "notes/changed.md": "2020-06-07", "notes/new.md": today}
    shutil.rmtree(clone / ".git")                                  # no repository: the mtime, quietly
    (clone / "notes" / "committed.md").write_text("# Committed\n\nedited\n")
    cfg, con, rep = _index()
    assert con.execute("SELECT date FROM files WHERE relpath = 'notes/committed.md'").fetchone()[0] == today
    assert not rep.warnings and not rep.skipped
