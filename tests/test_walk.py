"""What a source walk never takes for a note: recall's own state, wherever it
sits, and any file that reads as a recall secrets file."""
import os

import pytest

from recall import db
from recall.config import load_config
from tests.conftest import CANARY
from tests.world import stored_bytes

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras


def _indexed(cfg) -> list:
    con = db.connect(cfg.db_path)
    try:
        return sorted(r[0] for r in con.execute("SELECT relpath FROM files"))
    finally:
        con.close()


def _index_bytes(cfg) -> bytes:
    return b"".join(stored_bytes(p) for p in cfg.home.glob("recall.db*"))


@pytest.fixture
def run_recall(cli):
    """recall's main() in this process: (exit code, stdout, stderr) as a record."""
    from types import SimpleNamespace

    def run(*args, input=None):
        code, out, err = cli(*args)
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)
    return run


@pytest.fixture
def state_in_notes(notes, make_world, monkeypatch, run_recall):
    """RECALL_HOME inside the notes, every file included, a vault synced."""
    monkeypatch.setenv("RECALL_HOME", str(notes / "state"))
    make_world(secrets=f'- id: tok\n  value: "{CANARY}"\n', include=["*"], config="embedding: {provider: none}\n")
    assert run_recall("secret", "sync").returncode == 0
    return notes


def test_recall_never_indexes_nor_reads_its_own_state(state_in_notes, run_recall):
    notes = state_in_notes
    assert run_recall("secret", "key", "backup", notes / "vault.key.bak").returncode == 0
    os.link(notes / "state/vault.key", notes / "key-link.txt")         # the key by another name
    r = run_recall("index")
    assert r.returncode == 0, r.stderr
    cfg = load_config()
    key = (notes / "state/vault.key").read_bytes()
    indexed = _indexed(cfg)
    assert indexed and not [p for p in indexed if p.startswith("state/") or "key" in p], indexed
    assert not any(key[i:i + 6] in _index_bytes(cfg) for i in range(0, 27))
    for target in ("state/vault.key", "state/recall.db-wal", "state/vault.key.lock", "vault.key.bak",
                   notes / "state/vault.key", notes / "state/recall.db", notes / "state/index.lock",
                   notes / "vault.key.bak", notes / "key-link.txt"):
        r = run_recall("read", target)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, (target, r.stderr)
        assert r.stdout == "", target
    r = run_recall("read", notes / "state/vault.key")
    assert "one of recall's own files" in r.stderr and "never reads itself back" in r.stderr


def test_read_refuses_a_state_file_an_older_index_holds(state_in_notes, run_recall):
    """An index built before this rule may list the key: read still refuses it."""
    cfg = load_config()
    assert run_recall("index").returncode == 0
    con = db.connect(cfg.db_path)
    with db.transaction(con):
        con.execute("INSERT OR IGNORE INTO files(source, relpath, size, mtime_ns, hash, date, title) "
                    "VALUES ('notes', 'state/vault.key', 32, 0, 'x', '', '')")
    r = run_recall("read", "state/vault.key")
    assert r.returncode == 1 and "one of recall's own files" in r.stderr and r.stdout == ""
    assert run_recall("index").returncode == 0
    assert "state/vault.key" not in _indexed(cfg)       # the next run drops it


def test_a_key_file_put_inside_a_source_is_never_indexed(notes, monkeypatch, make_world, run_recall):
    """RECALL_KEY_FILE names a file under the notes, by any name."""
    monkeypatch.setenv("RECALL_KEY_FILE", str(notes / "keys" / "my-recall.bin"))
    (notes / "keys").mkdir(mode=0o700)
    make_world(secrets=f'- id: tok\n  value: "{CANARY}"\n', include=["*"])
    assert run_recall("secret", "sync").returncode == 0
    assert run_recall("index").returncode == 0
    assert (notes / "keys/my-recall.bin.lock").exists()          # the vault's lock, beside its key
    assert not [p for p in _indexed(load_config()) if p.startswith("keys/")]
    assert "one of recall's own files" in run_recall("read", notes / "keys/my-recall.bin").stderr
    line = next(x for x in run_recall("doctor").stdout.splitlines() if "state in source" in x)
    assert line.startswith("NO") and f"{notes}/keys/my-recall.bin lies inside {notes}" in line


def test_doctor_says_no_when_the_state_lies_inside_a_source(state_in_notes, run_recall):
    out = run_recall("doctor").stdout
    line = next(x for x in out.splitlines() if "state in source" in x)
    assert line.startswith("NO") and f"{state_in_notes}/state lies inside {state_in_notes}" in line
    assert "RECALL_HOME" in line


def test_doctor_is_quiet_about_a_state_folder_outside_the_sources(config, run_recall):
    assert "state in source" not in run_recall("doctor").stdout


SECRETS_FORMS = {
    "plain.yaml": f'- id: a\n  value: "{CANARY}"\n',
    "sealed.yml": "- id: a\n  service: x\n  value: ENC[AES256_GCM,data:QUJD,iv:QUJD,tag:QUJD,type:str]\n",
    "fields.txt": f"# my old secrets\n- id: db\n  fields: {{password: {CANARY}}}\n",
    "flow.yaml": f"- {{id: a, value: {CANARY}}}\n",
    "being-edited.yaml": f'- id: a\n  value: "{CANARY}\n  - broken: [\n',
    "secrets.yaml.recall-123.tmp": f"- id: a\n  value: {CANARY}\n",
}


def test_a_file_that_reads_as_a_secrets_file_is_never_indexed_wherever_it_sits(config, notes, run_recall):
    config(include=["*"])
    (notes / "old").mkdir()
    for name, text in SECRETS_FORMS.items():
        (notes / "old" / name).write_text(text)
    (notes / "inventory-notes.yaml").write_text("- id: vpn\n  kind: vpn\n  check: tcp jump01:22\n")
    (notes / "values.md").write_text("# Values\n\nThe id: and value: keys of a form.\n")
    (notes / "format.md").write_text("# The secrets format\n\nAn entry:\n\n```yaml\n- id: jira\n"
                                     "  value: ENC[AES256_GCM,data:QUJD,iv:QUJD,tag:QUJD,type:str]\n```\n")
    r = run_recall("index")
    assert r.returncode == 0 and CANARY[:6] not in r.stdout + r.stderr
    for name in SECRETS_FORMS:
        assert f"old/{name}: reads as a recall secrets file" in r.stderr, name
    indexed = _indexed(load_config())
    assert not [p for p in indexed if p.startswith("old/")]
    assert {"inventory-notes.yaml", "values.md", "format.md"} <= set(indexed)    # a note showing one
    assert CANARY[:6].encode() not in _index_bytes(load_config())


def test_a_note_that_becomes_a_secrets_file_leaves_the_index_and_is_not_read(config, notes, run_recall):
    note = notes / "runbooks/jump-hosts.md"
    assert run_recall("index").returncode == 0
    assert "runbooks/jump-hosts.md" in _indexed(load_config())
    note.write_text(f"- id: jump\n  value: {CANARY}\n")
    r = run_recall("read", "runbooks/jump-hosts.md")                # not re-indexed yet
    assert r.returncode == 1 and "reads as a recall secrets file" in r.stderr and CANARY[:6] not in r.stdout
    assert run_recall("index").returncode == 0
    assert "runbooks/jump-hosts.md" not in _indexed(load_config())


def test_the_watcher_takes_recall_s_own_writes_for_no_change(state_in_notes, monkeypatch):
    """Each index pass writes index.lock and the WAL inside the notes: with the state folder
    ignored, the watcher's passes stop once the notes are still (no pass feeds the next)."""
    import time

    from recall.notes import watch
    from recall.vault import store as vault
    monkeypatch.setenv("RECALL_WATCH", "poll")
    monkeypatch.setattr(watch, "POLL_S", 0.05)
    w = watch.Watcher(load_config(), redactor=vault.redactor).start()
    try:
        deadline = time.monotonic() + 30
        while w.passes < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert w.passes == 1
        time.sleep(1.0)                        # 20 poll rounds
        assert w.passes == 1
        (state_in_notes / "new.md").write_text("# New\n\nsaved while watched\n")
        while w.passes < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert w.passes == 2                   # a real change still is one
    finally:
        w.stop()
