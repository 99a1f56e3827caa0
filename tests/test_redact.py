"""The note redactor's cost follows what changed: built once per process and
only when a text needs it, from the values that could fit in that text; a
value too long to mask efficiently is refused at sync."""
import base64
import random

import pytest

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

from recall import db  # noqa: E402
from recall.config import load_config  # noqa: E402
from recall.errors import RecallError  # noqa: E402
from recall.notes.index import run_index  # noqa: E402
from recall.vault import mask  # noqa: E402
from recall.vault import store as vault  # noqa: E402
from recall.vault.redact import text_redactor  # noqa: E402
from tests.conftest import CANARY, run_recall  # noqa: E402
from tests.world import stored_bytes


def _pem(size: int, seed: int = 1) -> str:
    body = base64.b64encode(random.Random(seed).randbytes(size * 3 // 4)).decode()
    return ("-----BEGIN PRIVATE KEY-----\n" + "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
            + "\n-----END PRIVATE KEY-----\n")


def _token(size: int, seed: int = 2) -> str:
    return base64.b64encode(random.Random(seed).randbytes(size)).decode()[:size]


@pytest.fixture
def built(monkeypatch):
    """Every Masker made from now on: the secrets it was given (and whether lines only)."""
    made = []
    real = mask.Masker.__init__

    def counting(self, secrets, notes=False):
        made.append(({sid: list(vals) for sid, vals in secrets.items()}, notes))
        real(self, secrets, notes=notes)
    monkeypatch.setattr(mask.Masker, "__init__", counting)
    return made


def _vault(make_world, values: dict):
    text = "".join(f"- id: {sid}\n  value: |\n    {v.rstrip().replace(chr(10), chr(10) + '    ')}\n"
                   for sid, v in values.items())
    secrets = make_world(secrets=text, config="embedding: {provider: none}\n").secrets
    cfg = load_config()
    con = db.connect(cfg.db_path)
    vault.sync(con, cfg)
    return cfg, con, secrets


def _index(con, cfg):
    return run_index(con, cfg, redactor=vault.redactor)


def test_the_masker_is_built_once_per_process_and_only_when_a_text_needs_it(make_world, notes, built):
    cfg, con, _ = _vault(make_world, {"api-token": f"tok-{CANARY}", "db-pass": f"pw-{CANARY}"})
    built.clear()
    _index(con, cfg)                                        # four new notes
    assert len(built) == 1
    for n in range(3):                                      # later runs and watch passes in this process
        (notes / f"new{n}.md").write_text(f"# New {n}\n\nthe token tok-{CANARY} pasted\n")
        assert _index(con, cfg).new == 1
    assert len(built) == 1
    assert CANARY[:6] not in "".join(r[0] for r in con.execute("SELECT body FROM chunks"))
    vault._REDACTORS.clear()                                # a new process …
    assert _index(con, cfg).unchanged == 7 and len(built) == 1    # … with nothing changed builds none


def test_a_sync_redacts_the_index_with_the_values_it_changed_only(make_world, notes, built):
    cfg, con, secrets = _vault(make_world, {"api-token": f"tok-{CANARY}", "db-pass": f"pw-{CANARY}"})
    (notes / "pasted.md").write_text(f"# Pasted\n\nnew-{CANARY} was the new password\n")
    _index(con, cfg)
    built.clear()
    vault.sync(con, cfg)
    assert built == []                                      # nothing changed: no masker, no pass over the index
    text = secrets.read_text()
    secrets.write_text(text[:text.index("- id: db-pass")] + f"- id: db-pass\n  value: new-{CANARY}\n")
    vault.sync(con, cfg)
    assert [sorted(secrets) for secrets, _ in built] == [["db-pass"]]
    assert "[recall:db-pass] was the new password" in con.execute(
        "SELECT body FROM chunks WHERE path='pasted.md'").fetchone()[0]


def test_a_sync_stopped_before_its_redaction_redacts_every_value_next_time(make_world, notes, monkeypatch):
    (notes / "pasted.md").write_text(f"# Pasted\n\ntok-{CANARY} pasted here\n")
    make_world(config="embedding: {provider: none}\n")
    cfg = load_config()
    con = db.connect(cfg.db_path)
    _index(con, cfg)                                        # indexed before the vault knew the value
    make_world(secrets=f"- id: api-token\n  value: tok-{CANARY}\n", config="embedding: {provider: none}\n")
    cfg = load_config()

    def stopped(con, cfg, entries, notify=None):
        raise KeyboardInterrupt("stopped after the COMMIT")
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(vault, "_redact_index", stopped)
        vault.sync(con, cfg)
    assert vault.count(con) == 1                            # the rows were committed, the index not redacted
    assert vault.sync(con, cfg).unchanged == 1              # nothing changed, but the last redaction never ran
    body = con.execute("SELECT body FROM chunks WHERE path='pasted.md'").fetchone()[0]
    assert "[recall:api-token] pasted here" in body and CANARY[:6] not in body


def test_one_masker_a_redactor_built_on_its_first_text_finds_any_piece(built):
    token, pem = _token(12_000), _pem(12_000)
    redact = text_redactor({"small": {"": f"pw-{CANARY}"}, "token": {"": token}, "pem": {"": pem}}, {})
    assert built == []                                      # nothing redacted yet: nothing built
    assert redact(f"a short note with pw-{CANARY} in it") == "a short note with [recall:small] in it"
    line = pem.splitlines()[5]
    assert redact(f"> {line}\n") == "> [recall:pem]\n"      # a line of a long value, in a short chunk
    assert token[5000:5020] not in redact(f"key: {token[5000:5020]}\n")   # a piece of a long one-line value
    assert redact(f"key: {token}\n") == "key: [recall:token]\n"
    assert len(built) == 1 and sorted(built[0][0]) == ["pem", "small", "token"] and built[0][1]


def test_a_long_value_pasted_into_a_note_leaves_no_line_in_the_index(make_world, notes):
    pem = _pem(12_000)
    cfg, con, _ = _vault(make_world, {"tls-key": pem})
    lines = pem.splitlines()
    pieces = ["\n".join(lines[i:i + 20]) for i in range(0, len(lines), 20)]     # chunks shorter than it
    (notes / "pasted.md").write_text("# Pasted\n\n" + "\n\n".join(pieces) + "\n")
    _index(con, cfg)
    bodies = [r[0] for r in con.execute("SELECT body FROM chunks WHERE path='pasted.md'")]
    assert len(bodies) > 1 and all(len(b) < len(pem) for b in bodies)
    bodies = "".join(bodies)
    assert "[recall:tls-key]" in bodies
    assert not [line for line in pem.splitlines()[1:-2] if line in bodies]


def test_a_value_over_16_kib_is_refused_at_sync_naming_the_limit(make_world):
    text = f"- id: small\n  value: pw-{CANARY}\n- id: huge\n  value: {_token(20_000)}\n"
    secrets = make_world(secrets=text).secrets
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert (f"{secrets}:4: secret 'huge' is 20,000 bytes; recall masks values of at most 16 KiB "
            "(16,384 bytes), so it is not stored") in r.stderr
    assert secrets.read_text() == text and not (load_config().home / "vault.key").exists()
    secrets.write_text(f"- id: small\n  value: pw-{CANARY}\n")
    assert run_recall("secret", "sync").returncode == 0
    r = run_recall("secret", "set", "small", input=_token(17_000))
    assert r.returncode == 1 and "recall masks values of at most 16 KiB" in r.stderr
    assert _token(17_000)[:6] not in r.stderr


def test_a_sealed_value_over_the_limit_is_refused_once_opened(make_world):
    """A value an older recall sealed: sync opens it, then refuses it."""
    from recall.vault import inplace
    cfg, con, secrets = _vault(make_world, {"small": f"pw-{CANARY}"})
    key = inplace.key_for(cfg.home, [])
    secrets.write_text(secrets.read_text() + f"- id: huge\n  value: {inplace.seal(key, 'huge', '', _token(20_000))}\n")
    with pytest.raises(RecallError, match=r"secrets.yaml:4: secret 'huge' is 20,000 bytes"):
        vault.sync(con, cfg)


def test_a_watcher_builds_the_maskers_before_the_first_save(make_world, notes, built, monkeypatch):
    """A long-lived process follows the notes: the first save should not wait for the build."""
    import time

    from recall.notes import watch
    cfg, con, _ = _vault(make_world, {"api-token": f"tok-{CANARY}"})
    _index(con, cfg)
    vault._REDACTORS.clear()                                # a new process, nothing changed since
    built.clear()
    monkeypatch.setenv("RECALL_WATCH", "poll")
    w = watch.Watcher(cfg, redactor=vault.redactor).start()
    try:
        deadline = time.monotonic() + 30
        while w.passes < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        while not built and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        w.stop()
    assert len(built) == 1 and list(built[0][0]) == ["api-token"]


def test_a_read_works_out_each_values_forms_once_and_a_new_vault_gets_its_own(make_world, notes, monkeypatch):
    """The redactor (note text) and the door (the answer) mask with the same vault's values: the
    forms of each value are worked out once a process; values that change are worked out anew."""
    from recall import api
    from recall.vault import door, forms
    values = {f"k{i}": _pem(1700, seed=i) for i in range(4)}
    cfg, con, _ = _vault(make_world, values)
    (notes / "pasted.md").write_text(f"# Pasted\n\nthe key {values['k1'][40:100]} in a note\n")
    _index(con, cfg)
    worked = []
    real = forms.encodings
    monkeypatch.setattr(mask, "encodings", lambda raw: worked.append(raw) or real(raw))
    vault._REDACTORS.clear()
    door.forget()
    mask._BUILT.clear()
    shown = api.read("pasted.md")
    assert "[recall:k1]" in shown.shown and values["k1"][40:100] not in shown.shown
    assert len([w for w in worked if len(w) > 100]) == len(values)    # not twice: redactor and door
    # other values (the vault changed under a long-lived process): worked out anew, never the old ones
    old = mask.Masker({"k1": [values["k1"]]})
    assert old.mask(values["k1"][40:70].encode()) == b"[recall:k1]"
    fresh = mask.Masker({"k2": [_token(40)]})
    assert fresh.mask(_token(40).encode()) == b"[recall:k2]"
    assert fresh.mask(values["k1"][40:70].encode()) == values["k1"][40:70].encode()


def test_a_value_written_into_the_secrets_file_is_masked_before_it_is_synced(make_world, notes):
    """The README's order: notes indexed first, then a token written into the secrets file and into
    a note; until `secret sync` runs, search, read and index already say [recall:ID], and exec never
    gets the unsynced value. A secrets file broken mid-edit fails closed, its text not quoted."""
    token = f"tok-{CANARY}"
    w = make_world(secrets="", config="embedding: {provider: none}\n")
    (notes / "jira.md").write_text(f"# Jira\n\nThe jira token is {token} for the API.\n")
    assert run_recall("index").returncode == 0
    w.secrets.write_text(f"- id: jira-api-token\n  fields: {{username: me@example.com, password: '{token}'}}\n"
                         "- id: later\n  value: <paste the token>\n")
    for argv in (("search", "jira token"), ("read", "jira.md"), ("index",), ("search", "--json", "jira")):
        r = run_recall(*argv)
        assert r.returncode == 0 and CANARY[:6] not in r.stdout + r.stderr, (argv, r.stdout, r.stderr)
    assert "[recall:jira-api-token]" in run_recall("read", "jira.md").stdout
    assert "me@example.com" in w.secrets.read_text()
    r = run_recall("secret", "exec", "jira-api-token", "--", "true")
    assert r.returncode == 1 and "not synced yet" in r.stderr and "recall secret sync" in r.stderr   # nothing runs
    w.secrets.write_text(f"- id: jira-api-token\n  value: '{token}\n")  # an unclosed quote, mid-edit
    r = run_recall("search", "jira token")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and r.stderr.count("cannot be checked") == 1
    assert CANARY[:6] not in r.stdout + r.stderr and f"{w.secrets}:2" in r.stderr
    w.secrets.write_text(f"- id: jira-api-token\n  value: '{token}'\n")
    assert run_recall("secret", "sync").returncode == 0
    r = run_recall("secret", "exec", "jira-api-token", "--", "sh", "-c", 'test "$JIRA_API_TOKEN" = "$1"', "sh", token)
    assert r.returncode == 0, r.stderr
    r = run_recall("search", "jira token")
    assert "[recall:jira-api-token]" in r.stdout and CANARY[:6] not in r.stdout + r.stderr


def test_a_value_yaml_reads_as_a_number_is_masked_before_it_is_synced_as_written(make_world, notes):
    """`value: 0048213377` (a PIN, an account number) is a number to YAML: sync asks to quote it, and
    meanwhile search and read showed it in full."""
    w = make_world(secrets="", config="embedding: {provider: none}\n")
    (notes / "bank.md").write_text("# Bank\n\nthe card PIN is 0048213377 and the id 0x1f2e3d4c5b.\n")
    assert run_recall("index").returncode == 0
    w.secrets.write_text("- id: card-pin\n  value: 0048213377\n- id: acct\n  fields: {number: 0x1f2e3d4c5b}\n")
    for argv in (("search", "card PIN"), ("read", "bank.md")):
        r = run_recall(*argv)
        assert r.returncode == 0 and "[recall:card-pin]" in r.stdout and "[recall:acct]" in r.stdout, r.stdout
        assert "213377" not in r.stdout and "3d4c5b" not in r.stdout


def test_a_folder_named_as_the_secrets_file_is_said_to_be_one_and_hides_no_note(make_world, notes, tmp_path):
    folder = tmp_path / "secrets.d"
    folder.mkdir()
    make_world(config=f"secrets: [{folder}]\nembedding: {{provider: none}}\n")
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and "Is a directory" in r.stderr and "chmod" not in r.stderr, r.stderr
    assert run_recall("index").returncode == 0
    r = run_recall("search", "token")
    assert r.returncode == 0 and r.stderr.count("recall:") == 0, r.stderr


def test_an_unsynced_secrets_file_missing_its_dash_still_masks_its_value(make_world, notes):
    """`id: x` / `value: …` without the `- `: sync refuses the file (file:1), and until it is fixed
    search still searches and masks the value written there."""
    token = f"tok-{CANARY}"
    w = make_world(secrets="", config="embedding: {provider: none}\n")
    (notes / "jira.md").write_text(f"# Jira\n\nThe jira token is {token} for the API.\n")
    assert run_recall("index").returncode == 0
    w.secrets.write_text(f"id: jira-api-token\nvalue: {token}\n")
    r = run_recall("search", "jira token")
    assert r.returncode == 0 and "[recall:jira-api-token]" in r.stdout and CANARY[:6] not in r.stdout + r.stderr
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and f"{w.secrets}:1:" in r.stderr and CANARY[:6] not in r.stderr


def test_an_unsynced_secrets_file_is_read_once_while_it_stays_as_it_is(make_world, notes, monkeypatch):
    """A watcher's passes and each answer's door ask for the unsynced values again and again: the file
    is parsed once per change, not once per ask."""
    from recall import api
    from recall.vault import door, pending
    w = make_world(secrets="", config="embedding: {provider: none}\n")
    (notes / "jira.md").write_text(f"# Jira\n\nThe jira token is tok-{CANARY} here.\n")
    assert run_recall("index").returncode == 0
    w.secrets.write_text(f"- id: jira-api-token\n  value: tok-{CANARY}\n")
    door.forget()
    parsed = []
    real = pending._plain
    monkeypatch.setattr(pending, "_plain", lambda path, opener: parsed.append(path) or real(path, opener))
    for _ in range(3):
        assert CANARY[:6] not in api.search("jira token").shown
    assert len(parsed) == 1
    w.secrets.write_text(f"- id: jira-api-token\n  value: tok-{CANARY}\n- id: other\n  value: other-{CANARY}\n")
    assert CANARY[:6] not in api.read("jira.md").shown and len(parsed) == 2


def _state_bytes(cfg) -> bytes:
    return b"".join(stored_bytes(p) for p in cfg.home.iterdir() if p.name.startswith("recall.db"))


def test_a_value_written_into_the_secrets_file_leaves_the_notes_indexed_before_at_the_next_index(
        make_world, notes):
    """A token pasted into a note, indexed, then written into the secrets file: the next `recall index`
    (no sync yet) rewrites the chunks that held it, so no DB byte keeps it; it was kept until a sync."""
    token = f"tok-{CANARY}"
    w = make_world(secrets="", config="embedding: {provider: none}\n")
    (notes / "jira.md").write_text(f"# Jira\n\nThe jira token is {token} for the API.\n")
    assert run_recall("index").returncode == 0
    cfg = load_config()
    assert CANARY[:8].encode() in _state_bytes(cfg)          # a note's text, before it was a secret
    w.secrets.write_text(f"- id: jira-api-token\n  value: {token}\n")
    r = run_recall("index")
    assert r.returncode == 0 and "0 changed" in r.stdout, r.stdout + r.stderr
    data = _state_bytes(cfg)
    assert not any(CANARY[i:i + 6].encode() in data for i in range(len(CANARY) - 5))
    assert "[recall:jira-api-token]" in run_recall("search", "jira token").stdout


def test_a_value_inside_a_longer_token_leaves_the_index_and_an_older_index_is_rewritten(make_world, notes):
    """A vault value written into a host name or glued to a word (api-VALUE-prod.example.com,
    VALUEsuffix) is redacted from the index like a value standing alone: at the sync, and in an
    index an older recall left holding it (its chunks are rewritten by the next `recall index`)."""
    w = make_world(secrets="", config="embedding: {provider: none}\n")
    (notes / "edge.md").write_text(f"# Edge\n\nThe API host is api-{CANARY}-prod.example.com and {CANARY}x.\n")
    assert run_recall("index").returncode == 0
    cfg = load_config()
    assert CANARY[:8].encode() in _state_bytes(cfg)
    w.secrets.write_text(f"- id: edge-token\n  value: {CANARY}\n")
    assert run_recall("secret", "sync").returncode == 0
    data = _state_bytes(cfg)
    assert not any(CANARY[i:i + 6].encode() in data for i in range(len(CANARY) - 5))
    assert "-[recall:edge-token]-prod.example." in run_recall("search", "API host").stdout
    con = db.connect(cfg.db_path)                       # as the release before this rule left it
    with db.transaction(con):
        row = con.execute("SELECT * FROM chunks WHERE path = 'edge.md'").fetchone()
        con.execute("DELETE FROM chunk_rows WHERE id = ?", (row["id"],))
        from recall.notes.index import write_chunk
        write_chunk(con, row["id"], row["file_id"], row["ord"], row["start_line"], row["end_line"], row["breadcrumb"],
                    row["body"].replace("[recall:edge-token]", CANARY), "edge.md")
        db.set_meta(con, "chunk_format", "3")
    con.close()
    assert CANARY[:8].encode() in _state_bytes(cfg)
    assert run_recall("index").returncode == 0
    data = _state_bytes(cfg)
    assert not any(CANARY[i:i + 6].encode() in data for i in range(len(CANARY) - 5))


def test_a_db_rebuilt_from_nothing_masks_the_sealed_values_before_any_sync(make_world, notes):
    """A DB rebuilt from nothing (`index --full` after damage, a deleted file) holds no secret until
    `secret sync`; meanwhile search, read and the new index showed the file's sealed values in full.
    They are opened with the key to be masked; without the key, nothing is shown."""
    from recall.vault import keyfile
    token = f"tok-{CANARY}"
    w = make_world(secrets=f"- id: jira-api-token\n  value: {token}\n", config="embedding: {provider: none}\n")
    (notes / "jira.md").write_text(f"# Jira\n\nThe jira token is {token} for the API.\n")
    assert run_recall("secret", "sync").returncode == 0 and "ENC[" in w.secrets.read_text()
    cfg = load_config()
    for p in cfg.home.iterdir():
        if p.name.startswith("recall.db"):
            p.unlink()
    assert run_recall("index").returncode == 0
    for argv in (("search", "jira token"), ("read", "jira.md"), ("--json", "search", "jira")):
        r = run_recall(*argv)
        assert r.returncode == 0 and "[recall:jira-api-token]" in r.stdout, (argv, r.stdout, r.stderr)
        assert not any(CANARY[i:i + 6] in r.stdout + r.stderr for i in range(len(CANARY) - 5)), argv
    data = _state_bytes(cfg)
    assert not any(CANARY[i:i + 6].encode() in data for i in range(len(CANARY) - 5))
    key = keyfile.key_path(cfg.home)
    key.rename(key.with_name("elsewhere"))
    r = run_recall("search", "jira token")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "a sealed value cannot be opened here" in r.stderr
    assert CANARY[:6] not in r.stdout + r.stderr


def test_an_index_runs_remarks_are_masked_by_its_vault(make_world, notes):
    """`recall index` answered outside its DB's vault: a warning naming a note whose name holds a value
    (bytes that are not UTF-8 in it) quoted the value in full."""
    make_world(secrets=f"- id: jira-api-token\n  value: {CANARY}\n", config="embedding: {provider: none}\n")
    assert run_recall("secret", "sync").returncode == 0
    (notes / f"{CANARY}.md").write_bytes(b"# Token\n\nbad byte \xff here\n")
    r = run_recall("index")
    assert r.returncode == 0 and "[recall:jira-api-token].md" in r.stderr, r.stderr
    assert not any(CANARY[i:i + 6] in r.stdout + r.stderr for i in range(len(CANARY) - 5)), r.stderr


def test_a_sync_redacts_what_an_index_run_going_on_writes_with_the_vault_it_read_before(make_world, notes):
    """An index run going on when a sync stores a new value writes chunks with the vault it read before
    (the value raw); the sync's redaction ran beside it, left those chunks holding the value for good (a
    later index found the files unchanged) or wrote an old snapshot's chunks back. It waits for the run."""
    import subprocess
    import sys

    from recall.db import index_lock
    from recall.notes.index import write_chunk
    from tests.conftest import REPO
    token = f"tok-{CANARY}"
    w = make_world(secrets="", config="embedding: {provider: none}\n")
    assert run_recall("index").returncode == 0
    cfg = load_config()
    w.secrets.write_text(f"- id: jira-api-token\n  value: {token}\n")
    with index_lock(cfg.db_path):                       # an index run going on
        sync = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "secret", "sync"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert sync.stderr.readline().startswith("recall: waiting for another index run (pid ")
        con = db.connect(cfg.db_path)                   # what that run writes now: the value raw
        with db.transaction(con):
            fid = con.execute("SELECT id FROM files ORDER BY id LIMIT 1").fetchone()[0]
            write_chunk(con, 10_000, fid, 99, 1, 2, "Pasted", f"the jira token is {token}", "pasted.md")
        con.close()
    out, err = sync.communicate(timeout=60)
    assert sync.returncode == 0 and out.startswith("synced 1 secret"), err
    data = _state_bytes(cfg)
    assert not any(CANARY[i:i + 6].encode() in data for i in range(len(CANARY) - 5))


def test_reading_an_unsynced_secrets_file_loads_nothing_a_search_does_not_use(make_world, notes):
    """A secrets file not as the last sync left it (every file, after an upgrade, until a sync) is
    read on each call: with the YAML reader alone, not the sync's validation and what it loads."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO
    make_world(secrets=f"- id: jira-api-token\n  value: tok-{CANARY}\n", config="embedding: {provider: none}\n")
    (notes / "jira.md").write_text(f"# Jira\n\nThe jira token is tok-{CANARY} here.\n")
    assert run_recall("index").returncode == 0
    code = ("import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]); "
            "from recall.cli import main; main(['search', 'jira token']); "
            "print('imported:', *sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], env=dict(os.environ),
                         capture_output=True, text=True, timeout=60)
    assert "[recall:jira-api-token]" in out.stdout and CANARY[:6] not in out.stdout, out.stdout + out.stderr
    imported = set(out.stdout.rsplit("imported:", 1)[1].split())
    assert "recall.vault.pending" in imported
    assert not imported & {"recall.vault.secretfile", "recall.guard", "shutil"}, sorted(imported)


@pytest.mark.parametrize("writer, save", [("sync", "rename-replace"), ("sync of a sealed file", "in-place"),
                                          ("rotate-key", "rename-replace"), ("rotate-key", "in-place")])
def test_a_value_saved_while_a_vault_writer_runs_stays_masked_until_the_next_sync(make_world, notes, monkeypatch,
                                                                                   writer, save):
    """Sync and rotate-key stamped each secrets file as it was at their end: a value saved after they
    read it (vim's rename, or an append) was taken as synced — shown by exec and search, and exec of
    its id said 'no secret'. Now the stamp is the file as read (or as their own write left it)."""
    import os

    from recall.vault import inplace, pending
    token = "dpl-Hq7w-Vn3x-Rt8y-Lk2m"                     # shares no piece with the stored value
    w = make_world(secrets=f"- id: db-pass\n  value: pw-{CANARY}-old\n", config="embedding: {provider: none}\n")
    (notes / "deploy.md").write_text(f"# Deploy\n\nThe deploy token is {token} today.\n")
    assert run_recall("secret", "sync").returncode == 0 and run_recall("index").returncode == 0
    cfg = load_config()
    con = db.connect(cfg.db_path)
    assert pending.changed(con, cfg) == []                 # sync's own write is no change
    if writer == "sync":                                   # a plain value this sync seals
        w.secrets.write_text(w.secrets.read_text() + f"- id: api\n  value: api-{CANARY}-x\n")
    real = inplace.write_edits

    def saved_meanwhile(edits):
        written = real(edits)
        added = f"- id: deploy-token\n  value: {token}\n"
        if save == "in-place":
            with open(w.secrets, "a") as f:
                f.write(added)
        else:
            tmp = w.secrets.with_name("secrets.yaml.swp")
            tmp.write_text(w.secrets.read_text() + added)
            tmp.chmod(0o600)
            os.replace(tmp, w.secrets)
        return written
    with monkeypatch.context() as m:
        m.setattr(inplace, "write_edits", saved_meanwhile)
        vault.rotate_key(con, cfg) if writer == "rotate-key" else vault.sync(con, cfg)
    r = run_recall("secret", "exec", "db-pass", "--", "sh", "-c", f"echo {token}")
    assert (r.returncode, r.stdout) == (0, "[recall:deploy-token]\n"), r.stdout + r.stderr
    r = run_recall("secret", "exec", "deploy-token", "--", "true")
    assert r.returncode == 1 and "not synced yet" in r.stderr, r.stderr
    r = run_recall("search", "deploy token")
    assert r.returncode == 0 and "[recall:deploy-token]" in r.stdout and token[4:12] not in r.stdout + r.stderr
    assert run_recall("secret", "sync").returncode == 0 and pending.changed(con, cfg) == []
    r = run_recall("secret", "exec", "deploy-token", "--", "sh", "-c", 'test "$DEPLOY_TOKEN" = "$1"', "sh", token)
    assert r.returncode == 0, r.stderr
