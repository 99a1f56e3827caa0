"""Values sealed in place in the secrets files (ENC[...]); the key's backup; faults that end in one line."""
import os
import re
import shlex
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

from recall import db
from recall.config import load_config  # noqa: E402
from recall.errors import RecallError  # noqa: E402
from recall.vault import inplace, keyfile  # noqa: E402
from recall.vault import store as vault
from recall.vault.secretfile import load_secret_files  # noqa: E402
from tests.conftest import CANARY, REPO, run_recall  # noqa: E402

# Every way a value is written, with comments, blank lines and odd spacing the writer must keep.
WRITTEN = {
    "plain": f"{CANARY}-p",
    "single": f"'{CANARY}-s''q'",
    "double": f'"{CANARY}-d\\tx"',
    "block": f"|\n    {CANARY}-b1\n    line two\n",
    "flowpw": f'"{CANARY}-f"',
}
SECRETS = f"""\
# my credentials  — kept by hand
- id: plain-one      # a comment after the id
  service: jira
  value: {WRITTEN['plain']}   # and one after the value

- id: single-one
  value: {WRITTEN['single']}
- id: double-one
  tags: [a, b]
  value:   {WRITTEN['double']}
- id: block-one
  value: {WRITTEN['block']}
- id: db
  fields: {{username: {{value: admin, public: true}}, password: {WRITTEN['flowpw']}}}
"""
ENC = re.compile(r'"?ENC\[AES256_GCM,data:[^\]]*\]"?')
VALUES = {"plain-one": f"{CANARY}-p", "single-one": f"{CANARY}-s'q", "double-one": f"{CANARY}-d\tx",
          "block-one": f"{CANARY}-b1\nline two\n"}


@pytest.fixture
def sealed(make_world):
    secrets = make_world(secrets=SECRETS).secrets
    r = run_recall("secret", "sync")
    assert r.returncode == 0 and "5 values sealed in their files" in r.stdout, r.stdout + r.stderr
    return secrets


def _values(secrets) -> dict:
    cfg = load_config()
    con = db.connect(cfg.db_path)
    got = vault.load_values(con, cfg)
    return {k: v[""] if "" in v else v for k, v in got.items()}


def test_sync_seals_each_value_in_place_and_keeps_every_other_byte(sealed):
    text = sealed.read_text()
    assert CANARY not in text and "admin" in text          # a public field stays readable
    expected = SECRETS
    for literal in WRITTEN.values():
        expected = expected.replace(literal, "X\n" if literal.startswith("|") else "X")
    assert ENC.sub("X", text) == expected                  # comments, spacing, blank lines, order kept
    assert stat.S_IMODE(sealed.stat().st_mode) == 0o600
    assert [p.name for p in sealed.parent.iterdir() if "recall-" in p.name] == []   # no temp file left
    got = _values(sealed)
    assert {k: got[k] for k in VALUES} == VALUES and got["db"] == {"username": "admin", "password": f"{CANARY}-f"}


def test_a_value_not_changed_keeps_its_ciphertext_and_a_new_plain_one_is_sealed(sealed):
    before = sealed.read_bytes()
    assert run_recall("secret", "sync").returncode == 0
    assert sealed.read_bytes() == before                   # a file under git shows no diff
    old = re.search(r"value: (ENC\[[^\]]*\])", before.decode()).group(1)
    sealed.write_text(before.decode().replace(old, "brand-new-value-42", 1))
    r = run_recall("secret", "sync")
    assert r.returncode == 0 and "1 value sealed" in r.stdout and "1 updated" in r.stdout, r.stdout
    after = sealed.read_text()
    assert "brand-new-value-42" not in after
    assert [line for line in after.splitlines() if "plain-one" not in line and "ENC[" in line][1:] == \
        [line for line in before.decode().splitlines() if "ENC[" in line][1:]     # the others untouched
    assert _values(sealed)["plain-one"] == "brand-new-value-42"


def test_secret_set_seals_a_value_from_stdin_into_the_file_and_the_vault(sealed):
    sealed.chmod(0o400)                                     # the file's mode is kept as it was
    r = run_recall("secret", "set", "db", "password", input="from-stdin-77\n")
    assert stat.S_IMODE(sealed.stat().st_mode) == 0o400
    assert r.returncode == 0 and r.stdout.startswith("sealed a new value for db.password"), r.stderr
    assert "from-stdin-77" not in sealed.read_text() + r.stdout + r.stderr
    assert _values(sealed)["db"]["password"] == "from-stdin-77"
    r = run_recall("secret", "set", "db", input="x\n")
    assert r.returncode == 1 and "has fields (username, password): name one" in r.stderr
    r = run_recall("secret", "set", "plian-one", input="x\n")
    assert r.returncode == 1 and "plain-one" in r.stderr              # did you mean


def test_a_value_holding_a_nul_byte_goes_only_to_stdin(sealed):
    r = run_recall("secret", "set", "plain-one", input="new\0value-of-it\n")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and r.stderr.startswith(    # not the file's line
        "recall: the value given: secret 'plain-one' holds a NUL byte"), r.stderr
    assert "value-of-it" not in sealed.read_text() + r.stderr
    sealed.write_text(sealed.read_text() + '- id: sudo-pw\n  inject: stdin\n  value: "pw-\\0-of-sudo"\n')
    assert run_recall("secret", "sync").returncode == 0
    r = run_recall("secret", "exec", "sudo-pw", "--", "od", "-An", "-c")
    assert r.returncode == 0 and "p   w   -  \\0   -   o   f" in r.stdout, r.stdout + r.stderr


def test_a_value_piped_with_windows_line_endings_or_in_no_utf8_is_stored_right_or_refused(sealed):
    r = run_recall("secret", "set", "plain-one", input="crlf-value-99\r\n")     # pasted from a CRLF file
    assert r.returncode == 0, r.stderr
    assert _values(sealed)["plain-one"] == "crlf-value-99"                      # no CR kept to fail auth
    before = sealed.read_bytes()
    r = subprocess.run([sys.executable, str(REPO / "recall.py"), "secret", "set", "plain-one"],
                       input=b"\xff\xfeabcdefgh\n", capture_output=True)
    assert r.returncode == 1 and r.stderr.count(b"\n") == 1, r.stderr              # one line, no traceback
    assert b"not UTF-8 text; nothing was stored" in r.stderr and b"base64" in r.stderr
    assert sealed.read_bytes() == before and _values(sealed)["plain-one"] == "crlf-value-99"


def test_a_value_too_short_for_exec_is_said_when_it_is_stored_not_only_at_use(sealed):
    """`printf ab | recall secret set X` and `value: abc` were stored without a word; exec refused them
    later. Stored still (a PIN read with 'secret get' is a use), with a warning, once."""
    r = run_recall("secret", "set", "plain-one", input="ab\n")
    assert r.returncode == 0 and r.stderr == (
        "recall: warning: secret 'plain-one' is 2 characters: exec refuses values under 6 (too short to mask); "
        "'recall secret get' still reads it\n"), r.stderr
    assert _values(sealed)["plain-one"] == "ab"
    assert run_recall("secret", "sync").stderr == ""                  # said once, when it changed
    sealed.write_text(sealed.read_text() + "- id: pin\n  fields: {username: bob, code: '1234'}\n")
    r = run_recall("secret", "sync")
    assert r.returncode == 0 and "secret 'pin.code' is 4 characters" in r.stderr and "username" not in r.stderr
    assert "1234" not in r.stderr + r.stdout


def test_a_missing_or_wrong_key_is_one_line_naming_the_fix(sealed, tmp_path):
    key = keyfile.key_path(load_config().home)
    key.rename(tmp_path / "saved.key")
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "values are sealed (ENC[...]) and there is no vault key" in r.stderr and f"cp BACKUP {key}" in r.stderr
    assert not key.exists()                                 # no new key made over the sealed values
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "secrets.yaml:4: the value of 'plain-one' does not open with the vault key" in r.stderr
    assert "'recall secret key backup' copy" in r.stderr
    from recall.doctor import run_doctor
    check = {c.name: c for c in run_doctor(extras=False)}["secrets secrets.yaml"]
    assert not check.ok and "secrets.yaml:4: the value of 'plain-one' does not open with the vault key" in check.detail


@pytest.mark.parametrize("edit,words", [       # a stray keystroke in its base64 (no longer whole), a copy
    (lambda enc, other: enc.replace(",iv:", ",iv:A"), "starts with ENC[ but is not a value recall sealed"),
    (lambda enc, other: enc.replace("data:", "data:Q"), "starts with ENC[ but is not a value recall sealed"),
    (lambda enc, other: other, "does not open with the vault key"),
])
def test_an_enc_value_edited_by_hand_is_one_line_at_its_line(sealed, edit, words):
    text = sealed.read_text()
    first, other = ENC.findall(text)[:2]          # plain-one's, and single-one's (another id)
    sealed.write_text(text.replace(first, edit(first, other), 1))
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"secrets.yaml:4: the value of 'plain-one' {words}" in r.stderr
    assert ("ENC[...] copied from another line" in r.stderr) == (edit(first, other) == other)
    from recall.doctor import run_doctor
    check = {c.name: c for c in run_doctor(extras=False)}["secrets secrets.yaml"]
    assert not check.ok and f"secrets.yaml:4: the value of 'plain-one' {words}" in check.detail


def test_a_value_also_written_in_a_comment_is_refused_and_the_file_left_as_it_was(make_world):
    """Sealing rewrites value: only: a comment keeping the token would keep it as plain text."""
    text = SECRETS.replace("# my credentials  — kept by hand", f"# my credentials (jira: {CANARY}-p, 2027)")
    secrets = make_world(secrets=text).secrets
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "secrets.yaml:1: the value of 'plain-one' is written in this comment too" in r.stderr
    assert CANARY[:6] not in r.stderr and secrets.read_text() == text
    secrets.write_text(SECRETS)                       # as it should be: sealed, then pasted again after
    assert run_recall("secret", "sync").returncode == 0
    sealed = secrets.read_text()
    secrets.write_text(sealed.replace("# a comment after the id", f"# {CANARY}-b1"))             # a line of a block value
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and "secrets.yaml:2: the value of 'block-one' is written in this comment" in r.stderr
    assert "block-one" in run_recall("secret", "show", "block-one").stdout     # the vault as it was


def test_the_write_is_refused_when_the_file_changed_while_sync_ran(make_world):
    secrets = make_world(secrets=SECRETS).secrets
    cfg = load_config()
    entries, _ = load_secret_files(cfg.secrets)
    edits = inplace.open_entries(entries, inplace.key_for(cfg.home, entries), cfg.home)
    secrets.write_text(SECRETS + "# edited meanwhile\n")
    with pytest.raises(RecallError, match="changed while recall was reading it; nothing was written"):
        inplace.write_edits(edits)
    assert secrets.read_text() == SECRETS + "# edited meanwhile\n"


def test_key_backup_and_doctor_and_rotate(sealed, tmp_path):
    from recall.doctor import run_doctor
    checks = {c.name: c for c in run_doctor(extras=False)}
    assert not checks["vault key backup"].ok and "never backed up" in checks["vault key backup"].detail
    # the line doctor hands out runs as pasted (it said 'backup FILE', and a file named FILE was written)
    line = re.search(r"run '(recall secret key backup [^']+)' and keep that copy off this machine",
                     checks["vault key backup"].detail).group(1)
    r = subprocess.run(line.replace("recall ", f"{shlex.quote(sys.executable)} {REPO / 'recall.py'} ", 1),
                       shell=True, capture_output=True, text=True, cwd=tmp_path)
    dated = Path(os.environ["HOME"]) / f"recall-vault-{time.strftime('%Y-%m-%d')}.key"
    assert r.returncode == 0 and dated.is_file() and not (tmp_path / "FILE").exists(), r.stderr
    r = run_recall("secret", "key", "backup", tmp_path / "copy.key")
    assert r.returncode == 0 and "keep it off this machine" in r.stdout
    assert stat.S_IMODE((tmp_path / "copy.key").stat().st_mode) == 0o600
    assert run_recall("secret", "key", "backup", tmp_path / "copy.key").returncode == 1   # never overwrites
    assert {c.name: c for c in run_doctor(extras=False)}["vault key backup"].ok
    before = sealed.read_text()
    r = run_recall("secret", "rotate-key")               # the copy made above opens none of it now: said
    assert r.returncode == 0 and r.stderr.startswith("recall: rotated since the last backup: ") \
        and "run 'recall secret key backup ~/recall-vault-" in r.stderr, r.stderr
    after = sealed.read_text()
    assert ENC.sub("X", after) == ENC.sub("X", before) and set(ENC.findall(after)).isdisjoint(ENC.findall(before))
    assert _values(sealed)["block-one"] == VALUES["block-one"]       # the resealed file opens
    assert run_recall("secret", "sync").returncode == 0 and sealed.read_text() == after
    checks = {c.name: c for c in run_doctor(extras=False)}
    assert not checks["vault key backup"].ok and "rotated since the last backup" in checks["vault key backup"].detail


def test_a_key_backup_into_the_notes_is_refused_not_indexed(sealed, notes):
    """`recall secret key backup ~/notes/keybackup.md` was written and indexed: the key's bytes were
    searchable and read back by the agent."""
    for dest in (notes / "keybackup.md", notes / "sub" / ".." / "kb.txt"):
        r = run_recall("secret", "key", "backup", dest)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert "would be indexed as a note of source 'notes'; nothing written" in r.stderr and not dest.exists()
    for kept in (notes / "kb.key", notes / ".keys" / "kb.md"):     # names and folders no index run takes
        kept.parent.mkdir(exist_ok=True)
        assert run_recall("secret", "key", "backup", kept).returncode == 0 and kept.exists()


def test_a_key_backup_is_known_to_every_config_sharing_the_key_and_to_a_rebuilt_index(isolated_home, monkeypatch,
                                                                                     tmp_path):
    """The backup was recorded in one config's DB: another config sharing the person's key was told
    "never backed up" (to back up a key already kept), and so was the same config after its DB was rebuilt."""
    from recall.doctor import run_doctor
    monkeypatch.delenv("RECALL_HOME")
    assert run_recall("init").returncode == 0
    secrets = isolated_home / ".config" / "recall" / "secrets.yaml"
    secrets.write_text("- id: tok\n  value: a-token-of-some-length-42\n")
    other = tmp_path / "other.yaml"
    other.write_text(f"sources:\n  - name: n\n    path: {isolated_home / 'notes'}\nsecrets: [{secrets}]\n")
    for config in (None, str(other)):
        assert run_recall(*(["--config", config] if config else []), "secret", "sync").returncode == 0

    def backed(config=None):
        return {c.name: c for c in run_doctor(config, extras=False)}["vault key backup"]
    assert not backed().ok and not backed(str(other)).ok
    assert run_recall("secret", "key", "backup", tmp_path / "kept.key").returncode == 0
    assert backed().ok and backed(str(other)).ok and str(tmp_path / "kept.key") in backed(str(other)).detail
    load_config(str(other)).db_path.unlink()                            # rebuilt from nothing
    assert run_recall("--config", other, "secret", "sync").returncode == 0
    assert backed(str(other)).ok


def test_a_vault_key_that_is_a_directory_is_one_line(sealed):
    key = keyfile.key_path(load_config().home)
    key.rename(key.with_name("moved"))
    key.mkdir(mode=0o700)
    for args in (["secret", "sync"], ["secret", "exec", "plain-one", "--", "true"], ["index"]):
        r = run_recall(*args)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, (args, r.stderr)
        assert f"the vault key {key} is not a file" in r.stderr, r.stderr
    from recall.doctor import run_doctor
    assert "is not a file" in {c.name: c for c in run_doctor(extras=False)}["vault key"].detail


def test_rows_of_an_older_recall_say_to_sync_not_tampering(sealed):
    """Rows stored before values were bound to their use (id only): exec, index, doctor say to sync."""
    cfg = load_config()
    con = sqlite3.connect(cfg.db_path)
    key = keyfile.load_key(cfg.home, create=False)
    for (sid,) in con.execute("SELECT id FROM secrets").fetchall():
        nonce, blob = keyfile.encrypt(key, sid, b'{"": "old-value-1"}', b"")
        con.execute("UPDATE secrets SET nonce=?, ciphertext=? WHERE id=?", (nonce, blob, sid))
    con.commit()
    con.close()
    for args in (["secret", "exec", "plain-one", "--", "true"], ["index"]):
        r = run_recall(*args)
        assert r.returncode == 1 and "was stored by an older recall" in r.stderr, (args, r.stderr)
        assert "run 'recall secret sync' to re-encrypt" in r.stderr and "changed" not in r.stderr
    from recall.doctor import run_doctor
    detail = {c.name: c for c in run_doctor(extras=False)}["vault rows"].detail
    assert "older recall" in detail and "run 'recall secret sync' to re-encrypt" in detail
    assert run_recall("secret", "sync").returncode == 0
    assert run_recall("secret", "exec", "plain-one", "--", "true").returncode == 0


def test_secret_set_on_a_terminal_reads_without_echo(sealed):
    """On a real pty the value is typed at a prompt on /dev/tty and never echoed back."""
    import pty
    import select
    import subprocess
    import sys

    from tests.conftest import REPO
    fd, side = pty.openpty()            # the child makes the pty its controlling terminal (no fork here:
    launch = ("import fcntl, os, sys, termios; os.setsid(); t = int(sys.argv[1]); "
              "fcntl.ioctl(t, termios.TIOCSCTTY, 0); [os.dup2(t, n) for n in (0, 1, 2)]; "
              "os.execv(sys.executable, [sys.executable] + sys.argv[2:])")   # threads may hold locks)
    child = subprocess.Popen([sys.executable, "-c", launch, str(side), str(REPO / "recall.py"),
                              "secret", "set", "single-one"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(side,))
    os.close(side)
    out, typed = b"", False
    while select.select([fd], [], [], 10)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if b"New value for single-one (not shown" in out and not typed:
            os.write(fd, b"typed-at-the-tty-5\n")
            typed = True
    try:
        code = child.wait(timeout=20)
    except subprocess.TimeoutExpired:
        child.kill()
        raise AssertionError(out)
    assert code == 0 and typed, out
    assert b"typed-at-the-tty-5" not in out and b"sealed a new value for single-one" in out
    assert _values(sealed)["single-one"] == "typed-at-the-tty-5"
    assert "typed-at-the-tty-5" not in sealed.read_text()


def test_a_secrets_file_over_4_mb_is_one_line_before_parsing(make_world):
    big = make_world(secrets="- id: x\n  value: '" + "a" * (5 * 2**20) + "'\n").secrets
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"{big}: the file is 5.0 MB; recall reads YAML files of at most 4 MB" in r.stderr


def test_a_temp_file_recall_cannot_create_is_one_line_and_the_file_unchanged(make_world):
    secrets = make_world(secrets=SECRETS).secrets
    cfg = load_config()
    entries, _ = load_secret_files(cfg.secrets)
    edits = inplace.open_entries(entries, inplace.key_for(cfg.home, entries), cfg.home)
    (secrets.parent / f"secrets.yaml.recall-{os.getpid()}.tmp").mkdir()      # its temp name is taken
    with pytest.raises(RecallError, match="cannot write beside .*secrets.yaml: File exists; nothing was written"):
        inplace.write_edits(edits)
    assert secrets.read_text() == SECRETS


def test_a_rotation_stopped_before_its_commit_loses_no_value(sealed, monkeypatch):
    """The files were resealed under vault.key.next, the DB was not: rotate-key refuses to write
    over that key; sync reseals what it sealed under vault.key and drops it; rotate-key then works."""
    cfg = load_config()
    con = db.connect(cfg.db_path)
    real = db.transaction

    def stop(con):
        raise KeyboardInterrupt("stopped before the COMMIT")
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(db, "transaction", stop)
        vault.rotate_key(con, cfg)
    assert db.transaction is real
    pending = keyfile.next_path(keyfile.key_path(cfg.home))
    assert pending.exists()
    r = run_recall("secret", "rotate-key")
    assert r.returncode == 1 and "an earlier key rotation stopped before it finished" in r.stderr
    assert pending.exists()
    assert run_recall("secret", "sync").returncode == 0 and not pending.exists()
    entries, _ = load_secret_files(cfg.secrets)
    inplace.open_entries(entries, keyfile.load_key(cfg.home, create=False), cfg.home)
    assert {e.id: e.values[""] for e in entries if "" in e.values} == VALUES
    assert run_recall("secret", "rotate-key").returncode == 0
    assert _values(sealed) | {"db": None} == VALUES | {"db": None}


def test_a_secrets_file_with_another_hard_link_is_refused_before_anything_is_written(tmp_path, make_world):
    """Sealing renames a new file over the name: a second name would keep every plain value."""
    secrets = make_world(secrets=SECRETS).secrets
    other = tmp_path / "copy-in-notes.yaml"
    os.link(secrets, other)
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"{secrets} has 2 hard links (st_nlink > 1)" in r.stderr and "-samefile" in r.stderr
    assert secrets.read_text() == SECRETS and not keyfile.key_path(load_config().home).exists()
    other.unlink()
    assert run_recall("secret", "sync").returncode == 0
    os.link(secrets, other)
    sealed = secrets.read_text()
    for argv, stdin in ((["secret", "set", "plain-one"], "new-value-of-plain-one"), (["secret", "rotate-key"], None),
                        (["secret", "sync"], None)):
        r = run_recall(*argv, input=stdin)
        assert r.returncode == 1 and "hard links (st_nlink > 1)" in r.stderr, (argv, r.stderr)
    assert secrets.read_text() == sealed and secrets.stat().st_ino == other.stat().st_ino


def test_a_restore_into_a_hard_linked_file_is_refused(sealed):
    text = sealed.read_text()
    sealed.write_text(text[:text.index("- id: block-one")])       # block-one and db removed
    assert run_recall("secret", "sync", "--prune").returncode == 0
    os.link(sealed, sealed.with_name("other.yaml"))
    before = sealed.read_text()
    r = run_recall("secret", "restore", "block-one")
    assert r.returncode == 1 and "hard links (st_nlink > 1)" in r.stderr
    assert sealed.read_text() == before


@pytest.mark.parametrize("shape", ["crlf", "cr-no-final-break", "end-marker"])
def test_a_restore_keeps_the_files_line_breaks_or_writes_nothing(sealed, shape):
    text = sealed.read_text()
    kept = text[:text.index("- id: block-one")]                  # block-one and db removed
    kept = {"crlf": kept.replace("\n", "\r\n"), "cr-no-final-break": kept.replace("\n", "\r").rstrip("\r"),
            "end-marker": kept + "...\n"}[shape]
    sealed.write_bytes(kept.encode())
    assert run_recall("secret", "sync", "--prune").returncode == 0
    r = run_recall("secret", "restore", "block-one")
    after = sealed.read_bytes().decode()
    if shape == "end-marker":                                   # after '...' it would break the file
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "nothing was written" in r.stderr, r.stderr
        assert after == kept
        assert "block-one" in run_recall("secret", "log").stdout                # still kept
        return
    assert r.returncode == 0, r.stderr
    brk = "\r\n" if shape == "crlf" else "\r"
    assert after.startswith(kept) and "block-one" in after and CANARY not in after
    assert after.replace(brk, "").count("\n") == 0                            # no lone \n among them
    assert _values(sealed)["block-one"] == VALUES["block-one"]


def _killed_writer(path) -> None:
    """A temp file as a write killed with -9 leaves it: made and locked by a process that dies."""
    import subprocess
    import sys
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'- id: half')\n"
                               "print('writing', flush=True); time.sleep(60)\n", str(path)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "writing\n"
    holder.kill()
    holder.wait()


def test_temp_files_of_killed_writes_are_removed_by_the_next_write_whatever_their_pid(sealed):
    import subprocess
    import sys
    folder = sealed.parent
    _killed_writer(folder / "secrets.yaml.recall-4194000.tmp")      # its pid is gone
    (folder / f"secrets.yaml.recall-{os.getpid()}.tmp").write_text("stale")     # a reused pid: recall's own
    (folder / "secrets.yaml.recall-1.tmp").write_text("stale")      # a reused pid: a live process
    live = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                             "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)\n"
                             "fcntl.flock(fd, fcntl.LOCK_EX); print('writing', flush=True); time.sleep(60)\n",
                             str(folder / "secrets.yaml.recall-77.tmp")], stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline() == "writing\n"
        cfg = load_config()
        inplace.set_value(db.connect(cfg.db_path), cfg, "plain-one", None, "a-new-value-for-plain")
        left = sorted(p.name for p in folder.glob("secrets.yaml.recall-*"))
        assert left == ["secrets.yaml.recall-77.tmp"]                   # a write under way is left alone
    finally:
        live.kill()
        live.wait()
    r = run_recall("secret", "set", "plain-one", input="the-next-value-for-plain")
    assert r.returncode == 0, r.stderr
    assert _values(sealed)["plain-one"] == "the-next-value-for-plain"
    assert not list(folder.glob("secrets.yaml.recall-*"))


def test_a_sync_with_nothing_to_write_removes_what_killed_writes_left(sealed):
    """A sync (or set) killed mid-write left `secrets.yaml.recall-PID.tmp`, a rotation killed while it
    wrote its key `vault.key.next.new`: they stayed until a later write. The next sync removes them."""
    cfg = load_config()
    _killed_writer(sealed.parent / "secrets.yaml.recall-4194000.tmp")
    stale_key = keyfile.next_path(keyfile.key_path(cfg.home)).with_name("vault.key.next.new")
    keyfile.write_new(stale_key, os.urandom(keyfile.KEY_BYTES))
    before = sealed.read_bytes()
    r = run_recall("secret", "sync")
    assert r.returncode == 0 and "unchanged" in r.stdout, r.stdout + r.stderr
    assert sealed.read_bytes() == before and not list(sealed.parent.glob("secrets.yaml.recall-*"))
    assert not stale_key.exists() and keyfile.key_path(cfg.home).exists()


def test_a_save_made_while_recall_writes_is_kept(make_world, monkeypatch):
    """The user's editor writes the file in place while recall writes its temp file: recall's
    rename is refused and the user's text stays, even when the clock shows no change."""
    secrets = make_world(secrets=SECRETS).secrets
    cfg = load_config()
    entries, _ = load_secret_files(cfg.secrets)
    edits = inplace.open_entries(entries, inplace.key_for(cfg.home, entries), cfg.home)
    theirs = SECRETS.replace("kept by hand", "KEPT BY HAND")          # the same size
    real_fsync, stamp = os.fsync, entries[0].stamp

    def save_meanwhile(fd):
        if not secrets.read_text() == theirs:
            secrets.write_text(theirs)
        return real_fsync(fd)
    monkeypatch.setattr(os, "fsync", save_meanwhile)
    monkeypatch.setattr(inplace, "file_stamp", lambda path: stamp)    # a clock too coarse to show it
    with pytest.raises(RecallError, match="changed while recall was reading it; nothing was written"):
        inplace.write_edits(edits)
    assert secrets.read_text() == theirs
    assert not list(secrets.parent.glob("secrets.yaml.recall-*"))


def test_a_comment_after_a_plain_value_is_said_before_it_is_sealed(make_world):
    """`value: Pa55 #word` is `Pa55` to YAML, and '#word' stays in the file as written once the value
    is sealed: sync says so at its line, quoting neither; a quoted value's comment is not asked about,
    nor a sealed one's at the next sync."""
    secrets = make_world(secrets="- id: cut\n  value: Pa55w0rd-ab9 #word-of-it\n"
                                 "- id: quoted\n  value: 'a-quoted-value-9' # rotated in May\n"
                                 "- id: db\n  fields:\n    username: admin # who\n    password: Pw-9x81-aa # hm\n").secrets
    r = run_recall("secret", "sync")
    warned = [line for line in r.stderr.splitlines() if line.startswith("recall: warning: ")]
    assert r.returncode == 0 and len(warned) == 2, r.stderr
    assert "secrets.yaml:2: a comment follows the value of 'cut' on its line" in warned[0]
    assert "secrets.yaml:8: a comment follows the value of 'db.password' on its line" in warned[1]
    assert not re.search(r"Pa55w0|word-of|Pw-9x8", r.stderr)
    assert "#word-of-it" in secrets.read_text()                  # the user's file: the comment as written
    r = run_recall("secret", "sync")
    assert r.returncode == 0 and "warning" not in r.stderr


@pytest.mark.parametrize("value", ["plain", "quoted"])
def test_a_save_landing_just_after_sync_read_the_file_is_one_line_and_kept(make_world, monkeypatch, capsys, value):
    """The user saves a shorter file the moment after sync parsed it: the second look at the file (its
    comments) read the new text with the old parse's lines, an IndexError and a page of Python. Now
    sync says the file changed, writes nothing, and the user's save stays."""
    from recall import yaml
    from recall.cli import main
    quote = '"' if value == "quoted" else ""
    entries = "".join(f"- id: tok-{i}\n  value: {quote}{CANARY}-{i}{quote}\n" for i in range(6))
    secrets = make_world(secrets=entries).secrets
    theirs = f"- id: tok-0\n  value: {CANARY}-new\n"
    parse = yaml.load_entries

    def then_saved(path, what, each=False):
        items = parse(path, what, each)
        if path == str(secrets):
            secrets.write_text(theirs)
        return items
    monkeypatch.setattr(yaml, "load_entries", then_saved)
    assert main(["secret", "sync"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "changed while recall was reading it; nothing was written" in err, err
    assert CANARY[:6] not in err and secrets.read_text() == theirs


def test_a_set_whose_sync_fails_says_the_new_value_is_in_the_file(sealed, monkeypatch, capsys):
    """A full disk under the DB: set sealed the new value into the file, then its sync failed and it said
    only 'the disk … is full … what was committed before is kept' — as if nothing had changed, while
    the file held the new value and the vault the old. Now it says which is where, and what to run."""
    import sqlite3

    from recall.cli import main

    def full(*args, **kw):
        raise sqlite3.OperationalError("database or disk is full")
    sync = vault.sync
    monkeypatch.setattr(inplace, "read_value", lambda prompt: f"{CANARY}-new")
    monkeypatch.setattr(vault, "sync", full)
    assert main(["secret", "set", "plain-one"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and CANARY[:6] not in err, err
    assert err.startswith("recall: the new value for plain-one is sealed in its file, but the vault still has the "
                          "old one: the disk holding ") and "run 'recall secret sync'" in err, err
    assert _values(sealed)["plain-one"] == VALUES["plain-one"]
    monkeypatch.setattr(vault, "sync", sync)
    assert run_recall("secret", "sync").returncode == 0 and _values(sealed)["plain-one"] == f"{CANARY}-new"


def test_a_set_whose_value_no_longer_opens_never_says_there_is_no_need_to_type_it_again(sealed, monkeypatch, capsys):
    """The sync after set fails and the value set sealed is gone from reach (its key removed
    meanwhile): saying 'no need to type the value again' would lose it. Now it says to set it again."""
    from recall.cli import main
    sync = vault.sync

    def key_gone_then_sync(con, cfg, **kw):
        keyfile.key_path(cfg.home).unlink()
        return sync(con, cfg, **kw)
    monkeypatch.setattr(inplace, "read_value", lambda prompt: f"{CANARY}-new")
    monkeypatch.setattr(vault, "sync", key_gone_then_sync)
    assert main(["secret", "set", "plain-one"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and CANARY[:6] not in err, err
    assert "no need to type" not in err and "set it again: 'recall secret set plain-one'" in err, err


def _rotation_killed_before_its_rename() -> None:
    """`recall secret rotate-key` killed (exit 9) after its COMMIT, before vault.key.next is renamed."""
    code = ("import os, sys\nreal = os.replace\n"
            "def killed(src, dst):\n"
            "    if str(src).endswith('.next'):\n        os._exit(9)\n    return real(src, dst)\n"
            "os.replace = killed\nfrom recall.cli import main\nmain(['secret', 'rotate-key'])\n")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True).returncode == 9


def test_a_set_after_a_rotation_killed_before_its_rename_keeps_the_new_value(sealed):
    """The rows were under the next key, the old one still vault.key: set sealed the value with the
    old key, the sync after it renamed the next one over it, and the value opened with no key (every
    later sync stopped at its line). Now set uses the key the rows need and finishes the rotation."""
    cfg = load_config()
    key = keyfile.key_path(cfg.home)
    old = key.read_bytes()
    _rotation_killed_before_its_rename()
    assert key.read_bytes() == old and keyfile.next_path(key).exists()
    r = run_recall("secret", "set", "plain-one", input=f"{CANARY}-new")
    assert r.returncode == 0, r.stderr
    assert key.read_bytes() != old and not keyfile.next_path(key).exists()
    assert run_recall("secret", "sync").returncode == 0
    r = run_recall("secret", "exec", "plain-one", "--", sys.executable, "-c",
                   "import os, sys; print(os.environ['PLAIN_ONE'] == sys.argv[1])", f"{CANARY}-new")
    assert (r.returncode, r.stdout) == (0, "True\n"), r.stderr
    entries, _ = load_secret_files(cfg.secrets)          # every value in the file opens with the key
    inplace.open_entries(entries, key.read_bytes(), cfg.home)
    assert {e.id: e.values[""] for e in entries if "" in e.values} == {**VALUES, "plain-one": f"{CANARY}-new"}
