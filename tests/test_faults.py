"""Faults: odd file names, unreadable folders, racing runs, broken storage — one line, never a loss."""
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from recall import db
from recall.config import load_config
from recall.index import run_index
from tests.conftest import NOTES, run_recall, write_tree
from tests.test_index import _as_nobody

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
        notes = write_tree(base / "notes", NOTES)
        (base / "config.yaml").write_text(f"sources:\n  - name: notes\n    path: {notes}\n")
        monkeypatch.setenv("RECALL_CONFIG", str(base / "config.yaml"))
        monkeypatch.setenv("RECALL_HOME", str(base / "state"))
        cfg = load_config()
        run_index(db.connect(cfg.db_path), cfg)
        (notes / "incidents").chmod(0)
        (notes / "meetings/2024-01-15-standup.md").unlink()           # a real removal still counts

        def again():
            con = db.connect(cfg.db_path)
            rep = run_index(con, cfg)
            return {"skipped": rep.skipped, "removed": rep.removed, "relpaths": _relpaths(con)}
        if os.geteuid() == 0:                        # root lists every folder: run as 'nobody'
            for path in [base, *base.rglob("*")]:
                os.chown(path, 65534, 65534, follow_symlinks=False)
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
    return "".join(f"- id: {prefix}-{i}\n  service: s{i}\n  value: 'value-{prefix}-{i}-0123456789'\n"
                   for i in range(n))


def _vault_ids(con):
    return sorted(r[0] for r in con.execute("SELECT id FROM secrets"))


def test_an_emptied_or_cut_short_secrets_file_does_not_empty_the_vault(config, tmp_path, cli):
    pytest.importorskip("cryptography")
    main, extra = tmp_path / "secrets.yaml", tmp_path / "more.yaml"
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
        config, tmp_path, cli, broken, text):
    files = {"secrets": tmp_path / "secrets.yaml", "inventory": tmp_path / "inventory.yaml"}
    files["secrets"].write_text(_secrets(1))
    files["inventory"].write_text("- id: bastion\n  kind: host\n  access: ssh bastion.example.com\n")
    files["secrets"].chmod(0o600)
    config(f"secrets: [{files['secrets']}]\ninventory: [{files['inventory']}]\n")
    files[broken].write_text(text)
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
