"""The leak matrix (issue 11): every side door an honest agent can walk through, run as a real
command with the canary; the canary is in no stdout, stderr, DB byte, WAL, log or MCP response.
Each door has its positive control: the marker appears, the exit code passes through."""
import base64
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

from tests.conftest import CANARY, REPO, run_recall  # noqa: E402
from tests.world import build, stored_bytes  # noqa: E402

# A value every escaper changes: quotes, a backslash, $, a backtick, a space, non-ASCII.
TRICKY = CANARY + "'q\"b\\s$d `t é"
MARK = "[recall:canary-token]"
TRICKY_MARK = "[recall:tricky]"
CHECKED = [CANARY, base64.b64encode(CANARY.encode()).decode(), CANARY.upper(), CANARY.lower(), CANARY[::-1]]


def clean(where: str, data) -> None:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    for form in CHECKED:
        assert form not in text, f"the canary leaked into {where}: {text[-400:]!r}"


def state_clean(tmp_path: Path) -> None:
    """No DB byte, WAL frame, journal or log under RECALL_HOME or HOME holds the canary."""
    for root in (Path(os.environ["RECALL_HOME"]), tmp_path / "home"):
        for path in root.rglob("*"):
            if path.is_file() and path.name not in ("vault.key", "vault.key.next"):
                clean(str(path), stored_bytes(path))


@pytest.fixture
def world(tmp_path, monkeypatch):
    w = build(tmp_path, notes={
        "pasted.md": f"# Pasted\n\nThe token was {CANARY} here.\n\nlog in as admin with the db-admin credential\n",
        "plain.md": "# Plain\n\nNothing secret in here at all.\n",
    }, secrets=f"""\
- id: canary-token
  env: CANARY_TOKEN
  value: "{CANARY}"
- id: tricky
  env: TRICKY
  value: {json.dumps(TRICKY)}
- id: db-admin
  fields: {{username: admin, password: "pw-{CANARY}"}}
""", inventory="- id: box\n  kind: host\n  secrets: [canary-token]\n")
    monkeypatch.setenv("RECALL_CONFIG", str(w.config))
    r = run_recall("secret", "sync")
    assert r.returncode == 0, r.stderr
    assert run_recall("index").returncode == 0
    return w


def ok(r, *, code=0):
    assert "Traceback" not in r.stderr, r.stderr
    clean("stdout", r.stdout)
    clean("stderr", r.stderr)
    assert r.returncode == code, (r.returncode, r.stderr)
    return r


# -- 1. forms ordinary programs print ------------------------------------------------------------

@pytest.mark.parametrize("program", [
    ["bash", "-c", "set"], ["bash", "-c", "declare -p TRICKY"], ["bash", "-c", "export -p"],
    ["bash", "-c", 'printf "%q\\n" "$TRICKY"'], ["env", "LC_ALL=C", "bash", "-c", "declare -p TRICKY"],
    [sys.executable, "-c", "import os; print(repr(os.environ['TRICKY']))"],
    [sys.executable, "-c", "import os; print(os.environ)"],
    [sys.executable, "-c", "import os, shlex; print(shlex.quote(os.environ['TRICKY']))"],
    [sys.executable, "-c", "import os, html; print(html.escape(os.environ['TRICKY']))"],
    ["sh", "-c", 'printf %s "$TRICKY" | tr a-z A-Z'],
], ids=lambda a: " ".join(a)[-36:])
def test_forms_printed_by_real_programs_under_exec(world, program):
    r = ok(run_recall("secret", "exec", "tricky", "--", *program))
    assert TRICKY_MARK in r.stdout                      # positive control: it was printed, masked


def test_exit_code_passes_through_exec(world):
    ok(run_recall("secret", "exec", "canary-token", "--", "sh", "-c", 'echo "$CANARY_TOKEN"; exit 7'), code=7)


# -- 3. access exec: a failing setup script --------------------------------------------------------

def test_a_failing_setup_step_never_shows_what_it_exported(world):
    script = world.root / "setup.sh"
    script.write_text(f"export DATABASE_URL='postgres://app:{CANARY}@db.example.com/app'\n"
                      f"echo \"connecting with $DATABASE_URL\" >&2\nfalse\n")
    world.inventory.write_text(f"- id: box\n  kind: host\n  access:\n    - source {script}\n"
                                  "  verify: 'true'\n")
    r = ok(run_recall("access", "exec", "box", "--", "true"), code=1)
    assert "setup steps of 'box' failed: connecting with [recall:box:DATABASE_URL]" in r.stderr
    state_clean(world.root)


# -- 4. a broken secrets file ----------------------------------------------------------------------

@pytest.mark.parametrize("broken", [
    f"- id: canary-token\n  value: ok-value-1\n{CANARY}: x\n",           # the value on a line of its own
    f"- id: canary-token\n  value: '{CANARY}' trailing\n",
    f"- id: canary-token\n  {CANARY}: 1\n",
    f"- id: canary-token\n  value: ok-value-1\n  {CANARY}: 1\n  {CANARY}: 2\n",   # a duplicate key
    f"- id: canary-token\n  value: ok-value-1\n{{{CANARY} x: 1}}\n",
])
def test_a_broken_secrets_file_is_never_quoted(world, broken):
    world.secrets.write_text(broken)
    world.secrets.chmod(0o600)
    r = ok(run_recall("secret", "sync"), code=1)
    assert "secrets.yaml:" in r.stderr                  # positive control: the place is named
    for args in (["access", "show", "box"], ["verify", "--dry-run"], ["search", "token"],
                 ["access", "exec", "box", "--", "true"]):
        r = run_recall(*args)
        ok(r, code=r.returncode)
    state_clean(world.root)


def test_a_loose_secrets_file_is_refused_with_the_chmod(world):
    world.secrets.chmod(0o644)
    r = ok(run_recall("secret", "sync"), code=1)
    assert r.stderr.strip() == (f"recall: {world.secrets} is readable by group or others (0o644) — "
                                f"chmod 600 {world.secrets}")


# -- 5. fail closed: no crypto package, no key ---------------------------------------------------------

def _core_only(*args):
    """recall under an interpreter that has no site-packages (no cryptography): the core alone."""
    import subprocess
    return subprocess.run([sys.executable, "-S", str(REPO / "recall.py"), *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("args", [["read", "pasted.md"], ["search", "token"], ["index", "--full"]])
def test_a_core_only_interpreter_refuses_to_show_unchecked_text(world, args):
    r = ok(_core_only(*args), code=1)
    assert len(r.stderr.strip().splitlines()) == 1 and "pip install 'recall[crypto]'" in r.stderr
    assert r.stdout == ""
    state_clean(world.root)


@pytest.mark.parametrize("args", [["read", "pasted.md"], ["search", "token"], ["index", "--full"]])
def test_a_missing_key_refuses_to_show_unchecked_text(world, args):
    (Path(os.environ["RECALL_HOME"]) / "vault.key").rename(world.root / "key.bak")
    r = ok(run_recall(*args), code=1)
    assert len(r.stderr.strip().splitlines()) == 1 and "vault key" in r.stderr and r.stdout == ""


def test_read_and_search_redact_with_the_vault_open(world):
    r = ok(run_recall("read", "pasted.md"))
    assert MARK in r.stdout                             # positive control
    assert "log in as admin with the db-admin credential" in r.stdout     # 8: usernames stay readable
    assert "pasted.md" in ok(run_recall("search", "token", "was", "here")).stdout
    state_clean(world.root)


# -- 6. secrets files reached by a symlink or a hard link; read serves indexed files only ----------

def test_linked_secrets_files_are_never_indexed_nor_read(world):
    notes = world.notes
    secrets = notes / "secrets.yaml"
    world.secrets.rename(secrets)                      # the secrets file inside a symlinked source
    (notes / "linked.yaml").symlink_to(secrets)
    link_src = world.root / "notes-link"
    link_src.symlink_to(notes)
    # this world again, its source the symlink and its secrets file inside it
    build(world.root, notes=link_src, include=["*.md", "*.yaml"], secrets=secrets, inventory=world.inventory)
    (notes / ".env").write_text(f"CANARY_TOKEN={CANARY}\n")
    ok(run_recall("secret", "sync"))
    os.link(secrets, notes / "hard.yaml")              # after: sync refuses a file with another name
    assert "hard links (st_nlink > 1)" in ok(run_recall("secret", "sync"), code=1).stderr
    ok(run_recall("index", "--full"))
    for name in ("linked.yaml", "hard.yaml", "secrets.yaml", ".env", f"{link_src}/secrets.yaml"):
        ok(run_recall("read", name), code=1)
    for path in (notes / "hard.yaml", notes / "linked.yaml", link_src / "secrets.yaml"):
        assert "is a secrets file" in ok(run_recall("read", str(path)), code=1).stderr
    assert "not an indexed note" in ok(run_recall("read", str(notes / ".env")), code=1).stderr
    assert "no indexed note" in ok(run_recall("read", "hard.yaml"), code=1).stderr
    assert "pasted.md" in ok(run_recall("search", "token", "was", "here")).stdout
    state_clean(world.root)


# -- 7. nothing stores a value ---------------------------------------------------------------------

def test_a_find_query_holding_the_value_is_masked_in_the_log(world):
    ok(run_recall("secret", "find", f"token {CANARY}"))
    log = ok(run_recall("--json", "secret", "log")).stdout
    assert MARK in log                                  # positive control: the query was logged, masked
    state_clean(world.root)


def test_inline_inventory_tokens_are_not_kept_in_the_db(world):
    world.inventory.write_text(f"- id: box\n  kind: host\n  access:\n    - export GITHUB_TOKEN={CANARY}\n"
                                  "  verify: 'true'\n")
    r = ok(run_recall("access", "show", "box"))
    assert "GITHUB_TOKEN=[recall:box:GITHUB_TOKEN]" in r.stdout
    ok(run_recall("search", "box"))
    state_clean(world.root)


def test_inline_tokens_in_proof_commands_are_not_stored(world):
    """A literal token (one the vault does not know) in an inventory verify command or step:
    verify and access exec store the command (access log, verify results) with it hidden."""
    inline = "inl1ne-Q7w3-Vb9k-Rt5z"
    world.inventory.write_text(
        "- id: box\n  kind: host\n"
        f"  access:\n    - export DEPLOY_TOKEN={inline}\n"
        f"  verify: \"curl -s -H 'Authorization: Bearer {inline}' http://127.0.0.1:9/ "
        f"https://app:{inline}@127.0.0.1:9/\"\n")
    for args in (["verify"], ["access", "exec", "box", "--", "true"], ["access", "exec", "box"]):
        r = run_recall(*args)
        ok(r, code=r.returncode)
    log = ok(run_recall("--json", "secret", "log")).stdout
    assert "Authorization: Bearer [recall:box:" in log and "app:[recall:box:" in log    # logged, labelled
    assert inline not in log
    for path in Path(os.environ["RECALL_HOME"]).rglob("*"):
        if path.is_file():
            assert inline.encode() not in stored_bytes(path), path
    state_clean(world.root)


def test_a_literal_in_a_command_is_stored_hidden_by_the_names_the_displays_hide(world):
    """`MYSQL_PWD=…`, `GITHUB_PAT=…`: names the displays hide (setupvars.sensitive_name); the access
    log stores the agent's command with those literals hidden too, and a harmless one as written."""
    pwd, pat = "Zq8-pwd-inline-7Hk", "Zq8-pat-inline-3Lm"
    world.inventory.write_text("- id: box\n  kind: host\n  verify: 'true'\n")
    command = f"MYSQL_PWD={pwd} GITHUB_PAT='{pat}' REGION=eu-west-1 true"
    ok(run_recall("access", "exec", "box", "--", command))
    log = ok(run_recall("--json", "secret", "log")).stdout
    assert "MYSQL_PWD=[hidden]" in log and "GITHUB_PAT=[hidden]" in log and "REGION=eu-west-1" in log
    for path in Path(os.environ["RECALL_HOME"]).rglob("*"):
        if path.is_file():
            data = stored_bytes(path)
            assert pwd.encode() not in data and pat.encode() not in data, path
    state_clean(world.root)


def test_usernames_stay_readable_in_exec_and_access_exec(world):
    world.inventory.write_text("- id: db\n  kind: database\n  secrets: [db-admin]\n  verify: 'true'\n")
    show = 'echo "$DB_ADMIN_USERNAME" "$DB_ADMIN_PASSWORD"'
    r = ok(run_recall("secret", "exec", "db-admin", "--", "sh", "-c", show))
    assert r.stdout == "admin [recall:db-admin]\n"
    r = ok(run_recall("access", "exec", "db", "--", "sh", "-c", show))
    assert r.stdout == "admin [recall:db-admin]\n"


# -- 9. get is for a person --------------------------------------------------------------------------

def test_get_through_a_pipe_never_shows_the_value(world):
    r = ok(run_recall("secret", "get", "canary-token"), code=1)
    assert "a person at a terminal" in r.stderr


# -- MCP: the same note and a failing tool through the server ----------------------------------------

def test_mcp_responses_carry_no_value(world, monkeypatch):
    pytest.importorskip("mcp")
    from recall.vault import audit
    from tests.test_mcp import call
    monkeypatch.setitem(audit.CALLER, "name", "cli")      # build_server() marks the process as mcp
    text, err = call("recall_read", path="pasted.md")
    assert not err and MARK in text
    clean("recall_read", text)
    for name, args in (("recall_search", {"query": f"token {CANARY}"}), ("recall_secret_find", {"query": CANARY}),
                       ("recall_access_exec", {"id": "box", "command": "printenv CANARY_TOKEN"})):
        text, _ = call(name, **args)
        clean(name, text)
    state_clean(world.root)


# -- a remote over the test sshd: its hits and reads are redacted on this side too --------------------

@pytest.mark.e2e
def test_remote_hits_and_reads_are_redacted_locally(world, tmp_path):
    from tests.sshd import SSHD, start_sshd, stop_sshd
    if SSHD is None:
        pytest.skip("openssh-server is not installed")
    server = start_sshd(tmp_path / "sshd")
    try:
        remote_root = tmp_path / "remote"
        box = build(remote_root, notes={"leak.md": f"# Box token\n\nThe box token is {CANARY} today.\n"}, source="box",
                    config=f"home: {remote_root / 'state'}\n")
        r = run_recall("remote", "install", "testbox", "--path", str(remote_root / "recall"),
                       "--ssh-config", str(server.client_config))
        assert r.returncode == 0, r.stderr
        text = world.config.read_text()
        world.config.write_text(text + f"remotes:\n  - name: box\n    host: testbox\n"
                                   f"    path: {remote_root / 'recall'}\n    config: {box.config}\n"
                                   f"    ssh_config: {server.client_config}\n    timeout: 20\n")
        assert run_recall("index", "--remote", "box").returncode == 0
        r = ok(run_recall("--json", "search", "box", "token", "today"))
        assert "box:leak.md" in r.stdout and MARK in r.stdout      # the remote hit, redacted here
        r = ok(run_recall("read", "box:leak.md"))
        assert MARK in r.stdout
    finally:
        stop_sshd(server)
    state_clean(world.root)


def test_db_and_wal_hold_no_piece_after_all_of_it(world):
    """After sync, index, read, search, exec: the DB, its WAL and the FTS vocabulary are clean."""
    for args in (["read", "pasted.md"], ["search", "token"], ["secret", "exec", "canary-token", "--", "env"]):
        ok(run_recall(*args))
    db = Path(os.environ["RECALL_HOME"]) / "recall.db"
    con = sqlite3.connect(db)
    con.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, chunks_fts, 'row')")
    terms = {t for (t,) in con.execute("SELECT term FROM temp.v")}
    con.close()
    assert not {p.lower() for p in CANARY.split("-") if len(p) > 3} & terms
    state_clean(world.root)
