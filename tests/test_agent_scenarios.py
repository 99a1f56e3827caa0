"""The seed's stories as an agent lives them: the MCP SDK client starts `recall mcp` over stdio with
only an env block, against a small world built here (notes, a secrets file, an inventory with a VPN
on a local port, a setup script exporting a token, a local Jira that answers 200 or 401, a stand-in
kubectl). Each story pins how many tool calls it takes; no response carries the canary."""
import base64
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")
pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

import anyio  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from tests.conftest import CANARY, REPO  # noqa: E402
from tests.world import build  # noqa: E402

SESSION_TOKEN = f"sess-{CANARY}"          # what the ops cluster's setup script exports

NOTES = {
    "runbooks/ops-cluster.md": """\
        ---
        date: 2025-02-10
        ---
        # Ops cluster

        ## Connecting to the ops cluster

        Connect the corporate VPN first. Then every kubectl command goes through the ops-cluster
        access entry: the setup script logs in and exports a session token.

        ## Scaling the web deployment

        Scale the web deployment with kubectl scale during the morning peak.
        """,
    "incidents/2024-05-12-cert-rotation.md": """\
        ---
        date: 2024-05-12
        ---
        # INC-4412 the ingress certificate expired during rotation

        ## What happened

        The wildcard certificate on the ingress expired at 09:00; browsers refused the site.
        The automatic rotation had been failing for two weeks without an alert.

        ## How we fixed it

        We renewed the certificate by hand with cert-manager, restarted the ingress pods, and fixed
        the rotation job: its service account had lost permission to write the secret.

        ## Follow-ups

        An alert fires when a certificate has less than 14 days left.
        """,
    "meetings/2024-06-01-planning.md": """\
        # Planning

        Talked about the rotation of the on-call schedule and the certificate training budget.
        """,
    "jira/how-we-use-jira.md": """\
        # Jira

        The Jira REST API takes a personal bearer token; ours is the jira-api-token credential.
        """,
}


class Jira(http.server.BaseHTTPRequestHandler):
    """A Jira stand-in: 200 for the right bearer token while `valid`, else 401; echoes the header."""
    valid = True

    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        ok = Jira.valid and auth == f"Bearer {CANARY}"
        body = (json.dumps({"name": "ops", "seen": auth}) if ok else f"401 bad token: {auth}").encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


KUBECTL = """\
#!/bin/sh
echo "kubectl $*"
case "$*" in
  *"get nodes"*) printf 'NAME STATUS\\nnode-1 Ready\\n' ;;
  *"get pods"*) printf 'web-1 Running\\nweb-2 Running\\ndb-1 Running\\n' ;;
esac
echo "session=$OPS_SESSION_TOKEN" >&2
"""


class World:
    """Files, servers and the env block; `vpn_up()` / `vpn_down()` switch the VPN's port."""

    def __init__(self, root: Path):
        self.root = root
        self.jira = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Jira)
        import ssl

        from tests.fake_kube import make_cert
        cert, key = make_cert(root)               # a credential goes only over https (verify denies http)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        self.jira.socket = tls.wrap_socket(self.jira.socket, server_side=True)
        threading.Thread(target=self.jira.serve_forever, daemon=True, kwargs={"poll_interval": 0.05}).start()
        self.vpn = None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.vpn_port = s.getsockname()[1]
        bindir = root / "bin"
        bindir.mkdir()
        (bindir / "kubectl").write_text(KUBECTL)
        (bindir / "kubectl").chmod(0o755)
        setup = root / "ops-login.sh"
        setup.write_text(f"export OPS_SESSION_TOKEN={SESSION_TOKEN}\nexport AWS_REGION=eu-west-1\n")
        url = f"https://127.0.0.1:{self.jira.server_address[1]}/rest/api/2/myself"
        self.jira_url = url
        built = build(root, notes=NOTES, secrets=f"""\
- id: jira-api-token
  service: jira
  environment: prod
  kind: token
  url: {url}
  tags: [atlassian, jira, api]
  notes: Personal Jira bearer token for the REST API.
  use: 'curl -s --cacert {cert} -H "Authorization: Bearer $JIRA_API_TOKEN" {url}'
  check: 'curl -s --cacert {cert} -o /dev/null -w "%{{http_code}}" -H "Authorization: Bearer $JIRA_API_TOKEN" {url}'
  value: "{CANARY}"
- id: ops-kube-token
  service: kubernetes
  environment: prod
  kind: token
  notes: service account token for the ops cluster
  value: "kube-{CANARY}"
""", inventory=f"""\
- id: vpn
  kind: vpn
  name: corporate VPN
  check: tcp 127.0.0.1:{self.vpn_port}
  timeout: 2
  hint: connect the corporate VPN and retry
- id: ops-cluster
  kind: cluster
  environment: prod
  aliases: [ops, ops cluster]
  requires: [vpn]
  secrets: [ops-kube-token]
  tags: [kubernetes, eks]
  notes: the main EKS cluster for platform services
  access:
    - source {setup}
    - kubectl config use-context ops
  verify: kubectl --context ops get nodes
- id: jira-prod
  kind: service
  environment: prod
  aliases: [jira]
  requires: [vpn]
  secrets: [jira-api-token]
  url: {url}
  verify: 'curl -s --cacert {cert} -H "Authorization: Bearer $JIRA_API_TOKEN" {url}'
""")
        self.config = built.config
        home = root / "home"
        home.mkdir()
        self.env = {"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
                    "RECALL_CONFIG": str(self.config), "RECALL_HOME": str(root / "state"),
                    "PYTHONPATH": str(REPO)}
        self.errlog = root / "server-stderr.log"
        for verb in (["index"], ["secret", "sync"]):
            r = subprocess.run([sys.executable, str(REPO / "recall.py"), *verb], env=self.env,
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr

    def vpn_up(self):
        if self.vpn is None:
            self.vpn = socket.socket()
            self.vpn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.vpn.bind(("127.0.0.1", self.vpn_port))
            self.vpn.listen(16)

    def vpn_down(self):
        if self.vpn is not None:
            self.vpn.close()
            self.vpn = None

    def close(self):
        self.vpn_down()
        self.jira.shutdown()
        self.jira.server_close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("agent-world"))
    w.vpn_up()
    try:
        yield w
    finally:
        w.close()


@pytest.fixture(autouse=True)
def fresh(world):
    world.vpn_up()
    Jira.valid = True
    yield


def _forms(value: str) -> list:
    return [value, base64.b64encode(value.encode()).decode(), value.encode().hex()]


class Agent:
    """One MCP session as an agent drives it: each tool call counted, every response searched for
    the canary in the forms an agent could paste."""

    def __init__(self, session, root):
        self.session, self.root = session, str(root)
        self.calls = []

    async def call(self, tool, **args):
        self.calls.append(tool)
        r = await self.session.call_tool(tool, args)
        text = "".join(c.text for c in r.content)
        for form in _forms(CANARY):
            assert form not in text, f"{tool}({args}) returned the value"
        assert len(text) < 16_000, tool
        # counted as with the 41-character world folder and the 10-character checkout (/work/main) the
        # figures were measured in: xdist's folder is longer, and so may a clone's path be
        SPENT[-1] += (len(text) - text.count(self.root) * (len(self.root) - 41)
                      - text.count(str(REPO)) * (len(str(REPO)) - 10))
        return text, r.is_error


SPENT = [0]       # characters of every response of the last story
# Characters a story's responses took before lean answers (indented JSON, the access block beside its
# fields, query and paths echoed): each story now takes at most half (docs/BENCHMARKS.md, "Lean answers").
BEFORE = {"connect": 1761, "kubectl": 297, "jira": 2916, "vpn down": 1277, "cert fix": 2112, "typos": 953}


def lean(story_name: str, share: float = 0.5) -> None:
    assert SPENT[-1] <= BEFORE[story_name] * share, (story_name, SPENT[-1], BEFORE[story_name])


def story(world, steps):
    """Run `steps(agent)` in one stdio session of `python recall.py mcp` started with only the env
    block; returns (what steps returned, the tools called)."""
    params = StdioServerParameters(command=sys.executable, args=[str(REPO / "recall.py"), "mcp"],
                                   env=dict(world.env), cwd=str(world.root))

    SPENT.append(0)

    async def go():
        with open(world.errlog, "a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    agent = Agent(session, world.root)
                    return await steps(agent), agent.calls

    result = anyio.run(go)
    assert CANARY not in world.errlog.read_text()
    return result


def plain_bash(line: str, root: Path) -> subprocess.CompletedProcess:
    """The agent's own shell: none of the MCP env block (no RECALL_*, another HOME, a plain PATH)."""
    other = root / "agent-home"
    other.mkdir(exist_ok=True)
    return subprocess.run(["bash", "-c", line], env={"PATH": "/usr/bin:/bin", "HOME": str(other)},
                          capture_output=True, text=True, timeout=60, cwd=str(other))


# -- the stories ------------------------------------------------------------------------------------

def test_how_do_i_connect_to_the_ops_cluster(world):
    """One search: the access block (with its linked secret) and the runbook section."""
    async def steps(agent):
        text, err = await agent.call("recall_search", query="how do I connect to the ops cluster")
        assert not err, text
        return json.loads(text)

    got, calls = story(world, steps)
    lean("connect")
    assert calls == ["recall_search"]
    assert [a["id"] for a in got["access"]] == ["ops-cluster"]
    entry = got["access"][0]
    assert entry["requires"] == ["vpn"] and entry["secrets"] == ["ops-kube-token"]
    assert entry["verify"].startswith("kubectl") and "block" not in entry          # the fields, once
    top = got["hits"][0]
    assert top["read"] == "notes:runbooks/ops-cluster.md:6" and "Connecting to the ops cluster" in top["breadcrumb"]


def test_run_a_kubectl_pipeline_on_the_ops_cluster(world):
    """The command runs in the setup's shell: a pipe works, kubectl gets the entry's context,
    the exported session token comes back masked."""
    async def steps(agent):
        return await agent.call("recall_access_exec", id="ops", command="kubectl get pods | grep web")

    (text, err), calls = story(world, steps)
    lean("kubectl")
    assert calls == ["recall_access_exec"] and not err, text
    assert "note" not in text        # the tool's description says kubectl gets the entry's context
    out = text.split("--- stdout ---\n", 1)[1].split("--- stderr ---", 1)[0]
    assert out == "web-1 Running\nweb-2 Running\n"
    assert "left out" not in text     # its `kubectl config use-context ops` step is the --context above
    assert "session=[recall:ops-cluster:OPS_SESSION_TOKEN]" in text


def test_is_my_jira_token_still_valid(world):
    """find → show → command; the line runs in the agent's plain shell; then the token is
    rotated away on the server and verify says stale with the reason. Four tool calls."""
    async def steps(agent):
        found, err = await agent.call("recall_secret_find", query="jira token")
        assert not err
        sid = json.loads(found)["secrets"][0]["id"]
        shown, err = await agent.call("recall_secret_show", id=sid)
        assert not err and json.loads(shown)["variables"] == ["JIRA_API_TOKEN"]
        line, err = await agent.call("recall_secret_command", id=sid)
        assert not err and "\n" not in line.strip()
        ran = plain_bash(line, world.root)                 # the line alone, as returned
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout) == {"name": "ops", "seen": "Bearer [recall:jira-api-token]"}
        Jira.valid = False                                  # someone revoked it
        ran = plain_bash(line, world.root)
        assert ran.stdout == "401 bad token: Bearer [recall:jira-api-token]"
        verdict, err = await agent.call("recall_verify", id=sid)
        assert not err
        return json.loads(verdict)

    got, calls = story(world, steps)
    lean("jira")
    assert calls == ["recall_secret_find", "recall_secret_show", "recall_secret_command", "recall_verify"]
    assert got["summary"].startswith("1 checked: 1 stale")
    row, = got["entries"]
    assert (row["id"], row["kind"], row["status"]) == ("jira-api-token", "secret (token)", "stale")
    assert row["reason"] == "the service refused the credential (HTTP 401): rotate it"


def test_vpn_down_fails_fast_with_the_sentence_and_verify_skips_dependants(world):
    world.vpn_down()

    async def steps(agent):
        started = time.monotonic()
        text, err = await agent.call("recall_access_exec", id="ops-cluster", command="kubectl get nodes")
        took = time.monotonic() - started
        report, _ = await agent.call("recall_verify")
        return text, err, took, json.loads(report)

    (text, err, took, report), calls = story(world, steps)
    lean("vpn down")
    assert calls == ["recall_access_exec", "recall_verify"]
    assert err and text == ("prerequisite 'vpn' is down: "
                            "connect the corporate VPN and retry")
    assert took < 4
    rows = {r["id"]: r for r in report["entries"]}
    assert rows["vpn"]["status"] == "unreachable"
    for dependant in ("ops-cluster", "jira-prod"):
        assert rows[dependant]["status"] == "skipped"
        assert rows[dependant]["reason"] == "prerequisite 'vpn' is down: connect the corporate VPN and retry"
    assert report["summary"] == "4 checked: 2 skipped, 1 unreachable, 1 ok"


def test_how_did_we_fix_the_cert_rotation(world):
    """A narrative question finds the section titled 'How we fixed it' (fix/fixed, cert/certificate)
    in the top 3, and the hit's `read` target opens exactly that section."""
    async def steps(agent):
        text, err = await agent.call("recall_search", query="how did we fix the cert rotation")
        assert not err
        hits = json.loads(text)["hits"]
        fix = next((h for h in hits[:3] if "How we fixed it" in h["breadcrumb"]), None)
        assert fix is not None, [(h["read"], h["breadcrumb"]) for h in hits[:3]]
        section, err = await agent.call("recall_read", path=fix["read"])
        assert not err
        return fix, section

    (fix, section), calls = story(world, steps)
    lean("cert fix")
    assert calls == ["recall_search", "recall_read"]
    assert fix["read"].startswith("notes:incidents/2024-05-12-cert-rotation.md:")
    assert "the rotation job: its service account had lost permission" in section
    assert "Follow-ups" not in section and "What happened" not in section


def test_wrong_ids_and_typos_get_did_you_mean_then_work(world):
    """Each slip costs one call, and its answer names what to call instead."""
    async def steps(agent):
        said = []
        for tool, args in (("recall_access_exec", {"id": "ops-clustr", "command": "kubectl get nodes"}),
                           ("recall_secret_command", {"id": "jira-token"}),
                           ("recall_verify", {"id": "jira-prd"})):
            said.append(await agent.call(tool, **args))
        fixed = [await agent.call("recall_access_exec", id="OPS-CLUSTER", command="kubectl get nodes"),
                 await agent.call("recall_verify", id="JIRA")]
        return said, fixed

    (said, fixed), calls = story(world, steps)
    lean("typos")
    assert len(calls) == 5
    assert not any(t.startswith("Error executing tool") for t, _ in said)   # the SDK's prefix says nothing
    assert all(err for _, err in said)
    assert said[0][0].endswith("no inventory entry 'ops-clustr' — did you mean: ops-cluster?")
    assert said[1][0].endswith("no secret 'jira-token' — did you mean: jira-api-token?")
    assert said[2][0].endswith("no inventory entry or secret 'jira-prd' — did you mean: jira-prod?")
    assert not any("recall access" in t or "recall secret" in t for t, _ in said)
    text, err = fixed[0]
    assert not err and "node-1 Ready" in text
    assert "kubectl --context ops get nodes" in text   # the stand-in echoes its argv: the entry's context
    report = json.loads(fixed[1][0])
    assert [(r["id"], r["kind"], r["status"]) for r in report["entries"]] == [("jira-prod", "service", "ok")], report
