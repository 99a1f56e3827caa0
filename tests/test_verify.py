"""Verify: dry-run verdicts (nothing runs), classification, and sweeps against real tools."""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from recall import db, inventory
from recall.config import load_config
from recall.guard import classify
from recall.verify import run_verify
from tests.conftest import CANARY, free_port, run_recall, wait_for_port

TOOLS = ["kubectl", "aws", "curl", "ssh", "az", "sudo"]


@pytest.fixture
def standins(tmp_path, monkeypatch):
    """Stand-in tools on PATH that record being called."""
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    for tool in TOOLS:
        p = bindir / tool
        p.write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {calls}\n")
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return calls


def write_inventory(make_world, text, secrets=""):
    world = make_world(inventory=text, secrets=secrets or None)
    inventory.forget_checks()
    return world


SWEEP = """\
- id: vpn
  check: tcp 127.0.0.1:{vpn}
  timeout: 1
  hint: connect the VPN client and retry
- id: ops-cluster
  kind: cluster
  requires: [vpn]
  verify: kubectl --context ops-cluster get nodes
- id: aws-ops-prod
  kind: account
  verify: aws sts get-caller-identity --profile ops
- id: jump01
  kind: host
  verify: ssh jump01.example.com hostname
- id: sub
  verify: az account show --subscription 0000-1111
- id: writer
  verify: kubectl --context ops-cluster delete pod x
"""
SECRETS = f"""\
- id: jira-api-token
  url: https://jira.example.com
  check: 'curl -s -o /dev/null -w "%{{http_code}}" -H "Authorization: Bearer $JIRA_API_TOKEN" https://jira.example.com/rest/api/2/myself'
  value: "{CANARY}"
- id: leaky
  url: https://x.example.com
  check: 'curl -s https://x.example.com/?t=$LEAKY'
  value: "leaky-{CANARY}"
"""


def test_dry_run_prints_every_verdict_and_runs_nothing(tmp_path, make_world, standins, cli):
    write_inventory(make_world, SWEEP.format(vpn=free_port()), SECRETS)
    pytest.importorskip("cryptography")
    cli("secret", "sync")
    code, out, _ = cli("verify", "--dry-run")
    assert code == 0
    assert not standins.exists(), standins.read_text() if standins.exists() else ""
    assert "entry:writer" in out and "deny" in out and "kubectl.command" in out
    code, out, _ = cli("--json", "verify", "--dry-run")
    data = {e["id"]: e for e in json.loads(out)["entries"]}
    assert data["ops-cluster"]["commands"][0]["verdict"] == "allow"
    assert data["ops-cluster"]["commands"][0]["rule"] == "kubectl.get"
    assert data["vpn"]["commands"][0]["rule"] == "tcp.connect"
    assert data["writer"]["commands"][0]["verdict"] == "deny"
    assert data["jira-api-token"]["commands"][0]["verdict"] == "allow"
    assert data["leaky"]["commands"][0]["verdict"] == "deny"     # a value in a URL would reach argv
    assert all(set(c) >= {"verdict", "rule", "reason"} for e in data.values() for c in e["commands"])
    assert not standins.exists()


def test_down_prerequisite_skips_dependants_naming_it(tmp_path, make_world, standins):
    write_inventory(make_world, SWEEP.format(vpn=free_port()))
    cfg = load_config()
    report = run_verify(db.connect(cfg.db_path), cfg, ["vpn", "ops-cluster", "writer"])
    by = {p.id: p for p in report.probes}
    assert by["vpn"].status == "unreachable"
    assert by["ops-cluster"].status == "skipped"
    assert by["ops-cluster"].detail == "prerequisite 'vpn' is down: connect the VPN client and retry"
    assert by["writer"].status == "skipped" and "guard denied" in by["writer"].detail
    assert not standins.exists()      # neither the skipped nor the denied command ran


def test_results_are_stored_and_shown_a_skip_or_an_older_entrys_as_history(tmp_path, make_world, standins, cli):
    """A prerequisite skip says nothing of the entry itself, and a result from before the entry
    changed is not its state now: both read as history, their age and 'then' (issue 37 point 6)."""
    with socket.socket() as vpn:
        vpn.bind(("127.0.0.1", 0))
        inv = write_inventory(make_world, SWEEP.format(vpn=vpn.getsockname()[1])).inventory
        cli("verify", "vpn", "ops-cluster")
        code, out, _ = cli("access", "show", "ops-cluster")
        assert "  last verified: skipped just now then: prerequisite 'vpn' is down: connect the VPN" in out, out
        vpn.listen()                                         # the VPN is back
        inventory.forget_checks()
        cli("verify", "vpn", "ops-cluster")
    code, out, _ = cli("--json", "access", "show", "ops-cluster")
    assert json.loads(out)["last_verified"] == "ok just now"
    inv.write_text(inv.read_text().replace("verify: kubectl --context ops-cluster get nodes",
                                           "verify: kubectl --context ops-cluster get pods"))
    code, out, _ = cli("access", "show", "ops-cluster")
    assert "  last verified: ok just now then (the entry changed since)" in out, out
    code, out, _ = cli("--json", "search", "ops-cluster")             # the pin says the same
    assert json.loads(out)["access"][0]["last_verified"] == "ok just now then (the entry changed since)"
    inv.write_text(inv.read_text().replace("hint: connect", "hint: please connect"))   # not what it proves
    code, out, _ = cli("access", "show", "vpn")
    assert "  last verified: ok just now\n" in out + "\n" and "then" not in out


@pytest.mark.parametrize("tool,code,text,status", [
    ("aws", 255, "The config profile (ops) could not be found", "missing"),
    ("aws", 255, "Unable to locate credentials. You can configure", "stale"),
    ("aws", 254, "An error occurred (ExpiredToken) when calling", "stale"),
    ("aws", 254, "An error occurred (InvalidClientTokenId) when calling", "stale"),
    ("aws", 255, "Error loading SSO Token: Token for x does not exist", "stale"),
    ("aws", 255, 'Could not connect to the endpoint URL: "http://x/"', "unreachable"),
    ("kubectl", 1, "error: context was not found for specified context: x", "missing"),
    ("kubectl", 1, "error: You must be logged in to the server (Unauthorized)", "stale"),
    ("kubectl", 1, "dial tcp 10.0.0.1:443: connect: connection refused", "unreachable"),
    ("kubectl", 1, "dial tcp: lookup x.example.com: no such host", "unreachable"),
    ("kubectl", 1, "Unable to connect to the server: dial tcp 1.2.3.4:443: i/o timeout", "unreachable"),
    ("ssh", 255, "user@host: Permission denied (publickey).", "stale"),
    ("ssh", 255, "ssh: Could not resolve hostname x: Name or service not known", "unreachable"),
    ("ssh", 255, "ssh: connect to host x port 22: Connection refused", "unreachable"),
    ("ssh", 255, "Host key verification failed.", "missing"),
    ("curl", 6, "", "unreachable"), ("curl", 7, "", "unreachable"), ("curl", 28, "", "unreachable"),
    ("curl", 35, "", "unreachable"), ("curl", 0, "401", "stale"), ("curl", 0, "403", "stale"),
    ("curl", 0, "200", "ok"), ("curl", 22, "curl: (22) The requested URL returned error: 401", "stale"),
    ("az", 1, "Please run 'az login' to setup account.", "stale"),
    ("az", 1, "Subscription '0000' not found. Check the spelling", "missing"),
    ("sudo", 1, "Sorry, try again.\nsudo: 1 incorrect password attempt", "stale"),
    ("kubectl", 0, "NAME STATUS", "ok"),
    ("kubectl", 1, "something nobody expected", "error"),
    # exit code first: aws CLI v2's 253 is configuration or credentials, 252 a command line it rejects
    ("aws", 253, "The config profile (ops) could not be found", "missing"),
    ("aws", 253, "Unable to locate credentials. You can configure", "stale"),
    ("aws", 253, "a message no rule knows", "missing"),
    ("aws", 252, "Unable to locate credentials", "error"),
    ("aws", 254, "An error occurred (Throttling) when calling", "error"),
    ("aws", 255, "You must specify a region.", "missing"),
    ("aws", 1, 'Could not connect to the endpoint URL: "http://x/"', "error"),
    # ssh: only 255 is ssh's own failure; any other code is the remote command's
    ("ssh", 1, "hostname: Permission denied", "error"),
    ("ssh", 255, "kex_exchange_identification: something odd", "error"),
    ("curl", 22, "curl: (22) The requested URL returned error: 404", "error"),
    ("curl", 22, "curl: (22) The requested URL returned error: 403 Forbidden", "stale"),
    ("curl", 52, "curl: (52) Empty reply from server", "unreachable"),
    ("curl", 60, "curl: (60) SSL certificate problem", "error"),
    ("az", 3, "", "missing"),
    ("az", 2, "Please run 'az login'", "error"),
    # tools the issue-14 allow-list added
    ("sudo", 1, "sudo: a password is required", "stale"),
    ("gcloud", 1, "ERROR: (gcloud.projects.list) You do not currently have an active account selected.", "stale"),
    ("gcloud", 1, "ERROR: (gcloud.projects.list) There was a problem refreshing your current auth tokens: "
                  "Reauthentication failed.", "stale"),
    ("gcloud", 1, "ERROR: (gcloud.compute.instances.list) Some requests did not succeed: - Required "
                  "'compute.instances.list' permission for 'projects/p' PERMISSION_DENIED", "stale"),
    ("gcloud", 1, "ERROR: (gcloud.projects.describe) NOT_FOUND: Project 'nope' not found", "missing"),
    ("gcloud", 1, "ERROR: gcloud crashed (ConnectionError): HTTPSConnectionPool: Max retries exceeded", "unreachable"),
    ("gcloud", 0, "NAME  ZONE", "ok"),
    ("gcloud", 2, "ERROR: (gcloud) Invalid choice: 'lst'.", "error"),
    ("true", 0, "", "ok"),
])
def test_classification(tool, code, text, status):
    assert classify(tool, code, text)[0] == status


def test_timeout_is_unreachable():
    assert classify("kubectl", 124, "", timed_out=True)[0] == "unreachable"


# -- real tools ------------------------------------------------------------------------------------

@pytest.fixture
def moto():
    if shutil.which("moto_server") is None or shutil.which("aws") is None:
        pytest.skip("moto_server and aws are installed by .ci/install")
    port = free_port()
    proc = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.e2e
def test_aws_against_moto(tmp_path, make_world, moto, monkeypatch):
    creds = tmp_path / "aws"
    creds.mkdir()
    (creds / "config").write_text("[profile ops]\nregion = us-east-1\n[profile nocreds]\nregion = us-east-1\n"
                                  "[profile noregion]\n")
    (creds / "credentials").write_text("[ops]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
                                       "[noregion]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    dead = free_port()
    script = tmp_path / "aws.sh"
    script.write_text(f"export AWS_CONFIG_FILE={creds / 'config'}\nexport AWS_SHARED_CREDENTIALS_FILE={creds / 'credentials'}\n"
                      f"export AWS_ENDPOINT_URL=http://127.0.0.1:{moto}\nexport AWS_MAX_ATTEMPTS=1\n"
                      "export AWS_EC2_METADATA_DISABLED=true\n")
    dead_script = tmp_path / "dead.sh"
    dead_script.write_text(script.read_text().replace(f":{moto}", f":{dead}"))
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    write_inventory(make_world, f"""\
- id: ok
  access: [source {script}]
  verify: aws sts get-caller-identity --profile ops
- id: noprofile
  access: [source {script}]
  verify: aws sts get-caller-identity --profile absent
- id: down
  access: [source {dead_script}]
  verify: aws sts get-caller-identity --profile ops
- id: nocreds
  access: [source {script}]
  verify: aws sts get-caller-identity --profile nocreds
- id: noregion
  access: [source {script}]
  verify: aws sts get-caller-identity --profile noregion
""")
    cfg = load_config()
    by = {p.id: p for p in run_verify(db.connect(cfg.db_path), cfg, timeout=60).probes}
    assert by["ok"].status == "ok", by["ok"].detail
    assert by["noprofile"].status == "missing" and "absent" in by["noprofile"].detail
    assert by["down"].status == "unreachable", by["down"].detail
    assert by["nocreds"].status == "stale" and "no AWS credentials" in by["nocreds"].detail
    assert by["noregion"].status == "missing" and "region" in by["noregion"].detail


@pytest.mark.e2e
def test_kubectl_against_a_tls_api_server(tmp_path, make_world):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    from tests.fake_kube import FakeKube, kubeconfig
    good, bad = FakeKube(tmp_path), FakeKube(tmp_path, "unauthorized")
    try:
        kc = kubeconfig(tmp_path / "kubeconfig", {"good": (good.port, good.cert), "bad": (bad.port, bad.cert),
                                                  "dead": (free_port(), good.cert)})
        script = tmp_path / "kube.sh"
        script.write_text(f"export KUBECONFIG={kc}\n")
        kubectl = shutil.which("kubectl")       # a full path is allowed when it is the kubectl on PATH
        names = ("good", "bad", "dead", "absent")
        entries = "".join(f"- id: {n}{suffix}\n  access: [source {script}]\n  verify: {tool} --context {n} "
                          f"--request-timeout 5s get nodes\n"
                          for n in names for suffix, tool in (("", "kubectl"), ("-path", kubectl)))
        write_inventory(make_world, entries)
        cfg = load_config()
        by = {p.id: p for p in run_verify(db.connect(cfg.db_path), cfg).probes}
        assert by["good"].status == "ok", by["good"].detail
        assert by["bad"].status == "stale"
        assert by["dead"].status == "unreachable"
        assert by["absent"].status == "missing"
        for n in names:      # /usr/bin/kubectl is classified as kubectl
            assert (by[n + "-path"].status, by[n + "-path"].detail) == (by[n].status, by[n].detail), n
    finally:
        good.stop()
        bad.stop()


def _isolated_root_home_works() -> bool:
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return r.returncode == 0


@pytest.mark.e2e
def test_ssh_against_a_real_sshd(tmp_path, make_world):
    """ssh reads ~/.ssh from the password database, not $HOME; the run gets a private overlay on
    that home (a mount namespace) holding known_hosts, so the machine's real home is untouched."""
    from tests.sshd import SSHD, start_sshd, stop_sshd
    if SSHD is None or not _isolated_root_home_works():
        pytest.skip("needs openssh-server and unshare -m")
    server = start_sshd(tmp_path / "sshd")
    try:
        wrong = tmp_path / "wrong"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
        closed = free_port()
        write_inventory(make_world, f"""\
- id: good
  verify: ssh -p {server.port} -i {server.key} 127.0.0.1 hostname
- id: wrongkey
  verify: ssh -p {server.port} -i {wrong} 127.0.0.1 hostname
- id: closed
  verify: ssh -p {closed} -i {server.key} 127.0.0.1 true
- id: hostkey
  verify: ssh -4 -p {server.port} -i {server.key} localhost hostname
""")
        home = Path(os.path.expanduser("~" + __import__("pwd").getpwuid(os.getuid()).pw_name))
        upper, work = tmp_path / "upper", tmp_path / "work"
        (upper / ".ssh").mkdir(parents=True)
        work.mkdir()
        (upper / ".ssh" / "known_hosts").write_text((server.dir / "known_hosts").read_text())
        (upper / ".ssh" / "config").write_text("Host *\n  BatchMode yes\n  ConnectTimeout 5\n  IdentitiesOnly yes\n")
        script = (f"mount -t overlay overlay -o lowerdir={home},upperdir={upper},workdir={work} {home} && "
                  f"exec {sys.executable} {Path(__file__).parent.parent / 'recall.py'} --json verify")
        r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120)
        if r.returncode != 0 and "mount" in r.stderr:
            pytest.skip("overlay mounts are not allowed here: " + r.stderr.strip())
        by = {e["id"]: e["commands"][0] for e in json.loads(r.stdout)["entries"]}
        assert by["good"]["status"] == "ok", by["good"]
        assert by["wrongkey"]["status"] == "stale", by["wrongkey"]
        assert by["closed"]["status"] == "unreachable", by["closed"]
        assert by["hostkey"]["status"] == "missing", by["hostkey"]     # known_hosts names 127.0.0.1 only
    finally:
        stop_sshd(server)


class Recorder:
    """A local HTTP(S) API on 127.0.0.1 that records every request (path, Host, Authorization).

    /me answers 200 to 'Bearer CANARY' and 401 (with a JSON body) to anything else, /open always 200,
    /echo 200 with the Authorization header as its body, anything else 404."""

    def __init__(self, tmp_path=None, tls=False):
        import ssl
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        self.requests, self.cert = [], None
        requests = self.requests

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                auth = self.headers.get("Authorization")
                requests.append({"path": self.path, "host": self.headers.get("Host"), "auth": auth,
                                 "extra": {k: v for k, v in self.headers.items()
                                           if k.lower() not in ("host", "authorization", "user-agent", "accept")}})
                path = self.path.split("?")[0]
                code = {"/me": 200 if auth == f"Bearer {CANARY}" else 401, "/open": 200, "/echo": 200}.get(path, 404)
                body = (auth or "").encode() if path == "/echo" else json.dumps({"code": code}).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        scheme = "http"
        if tls:
            from tests.fake_kube import make_cert
            self.cert, key = make_cert(tmp_path)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.cert, key)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
            scheme = "https"
        self.port = self.srv.server_address[1]
        self.base = f"{scheme}://127.0.0.1:{self.port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True, kwargs={"poll_interval": 0.05}).start()

    @property
    def seen(self):
        return [r["auth"] for r in self.requests]

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def http_server():
    """Plain HTTP stand-in: yields (base URL, Authorization headers seen)."""
    server = Recorder()
    try:
        yield server.base, _SeenView(server)
    finally:
        server.stop()


class _SeenView:
    """The Authorization headers a Recorder saw, read live (`in`, iteration)."""

    def __init__(self, server):
        self.server = server

    def __iter__(self):
        return iter(self.server.seen)

    def __contains__(self, item):
        return item in self.server.seen


@pytest.fixture
def https_server(tmp_path):
    """TLS stand-in with a self-signed certificate for 127.0.0.1 (curl --cacert server.cert)."""
    server = Recorder(tmp_path, tls=True)
    try:
        yield server
    finally:
        server.stop()


def sweep(*ids, timeout=None):
    """`recall --json verify` as a real process: {id: its first command's result}."""
    args = ["--json", "verify", *ids] + (["--timeout", timeout] if timeout else [])
    r = run_recall(*args)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    data = json.loads(r.stdout)
    failed = any(data["summary"][s] for s in ("stale", "unreachable", "missing", "error"))
    assert r.returncode == (1 if failed else 0), data["summary"]        # the exit code is honest
    return {e["id"]: e["commands"][0] for e in data["entries"]}


@pytest.mark.e2e
def test_curl_secret_check_sends_the_value_on_stdin_not_argv(tmp_path, make_world, https_server):
    """A real curl against a local HTTPS server: the header arrives; 401 → stale; argv never holds it."""
    pytest.importorskip("cryptography")
    url, ca = f"{https_server.base}/me", https_server.cert
    check = f"curl -s --cacert {ca} -o /dev/null -w \\\"%{{http_code}}\\\" -H \\\"Authorization: Bearer $TOK\\\" {url}"
    write_inventory(make_world, "", secrets=f"""\
- id: good
  url: {url}
  env: TOK
  check: "{check}"
  value: "{CANARY}"
- id: revoked
  url: {url}
  env: TOK
  check: "{check}"
  value: "revoked-{CANARY}"
- id: plain
  url: {url}
  env: TOK
  check: "curl -s --cacert {ca} -H \\"Authorization: Bearer $TOK\\" {url}"
  value: "plain-{CANARY}"
- id: glued
  url: {url}
  env: TOK
  check: "curl -sSH \\"Authorization: Bearer $TOK\\" --cacert {ca} {url}"
  value: "{CANARY}"
""")
    r = run_recall("secret", "sync")
    assert r.returncode == 0, r.stderr
    r = run_recall("--json", "verify")
    assert r.returncode == 1, r.stderr            # two are stale
    by = {e["id"]: e["commands"][0] for e in json.loads(r.stdout)["entries"]}
    assert by["good"]["status"] == "ok", by["good"]
    assert by["glued"]["status"] == "ok", by["glued"]        # -sSH: the header still moves to stdin
    assert by["revoked"]["status"] == "stale", by["revoked"]
    assert by["plain"]["status"] == "stale", by["plain"]     # no -w: recall adds -f -S
    assert https_server.seen.count(f"Bearer {CANARY}") == 2
    assert CANARY not in r.stdout + r.stderr


def test_az_proofs_run_one_at_a_time_others_in_parallel(tmp_path, make_world, monkeypatch):
    """az keeps one global 'current subscription': its proofs never overlap; kubectl's may."""
    bindir, log = tmp_path / "bin", tmp_path / "spans"
    bindir.mkdir()
    for tool in ("az", "kubectl"):
        p = bindir / tool
        p.write_text(f"#!/bin/sh\nstart=$(date +%s.%N)\nsleep 0.4\necho {tool} $start $(date +%s.%N) >> {log}\n")
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    entries = "".join(f"- id: sub{i}\n  verify: az account show --subscription s{i}\n" for i in range(2))
    entries += f"- id: sub2\n  verify: {bindir / 'az'} account show --subscription s2\n"   # still az
    entries += "".join(f"- id: k{i}\n  verify: kubectl --context c{i} get nodes\n" for i in range(3))
    write_inventory(make_world, entries)
    cfg = load_config()
    report = run_verify(db.connect(cfg.db_path), cfg)
    assert {p.status for p in report.probes} == {"ok"}
    spans = {"az": [], "kubectl": []}
    for line in log.read_text().splitlines():
        tool, start, end = line.split()
        spans[tool].append((float(start), float(end)))
    az = sorted(spans["az"])
    assert all(a[1] <= b[0] for a, b in zip(az, az[1:])), az          # no two az runs overlap
    kube = sorted(spans["kubectl"])
    assert any(b[0] < a[1] for a, b in zip(kube, kube[1:])), kube     # kubectl ran side by side


# -- what a user sees: full paths, -w, exit codes, hangs, the pool, secret show ----------------------

@pytest.mark.e2e
def test_a_tool_given_by_full_path_is_that_tool(tmp_path, make_world, http_server):
    """`/usr/bin/curl` is curl: recall adds -f -S and reads the 401 exactly as for the bare name."""
    base, _ = http_server
    write_inventory(make_world, f"""\
- id: bare
  verify: curl -s {base}/me
- id: path
  verify: {shutil.which("curl")} -s {base}/me
""")
    by = sweep()
    assert by["bare"]["status"] == "stale", by["bare"]
    assert by["path"]["status"] == "stale", by["path"]
    assert by["path"]["detail"] == "the service refused the credential (HTTP 401): rotate it"


@pytest.mark.e2e
def test_curl_write_out_never_hides_an_http_error(tmp_path, make_world, http_server):
    """-w '%{http_code}' with or without the body: a 401 is stale, a 404 an error, a 200 ok."""
    base, _ = http_server
    write_inventory(make_world, f"""\
- id: code-alone
  verify: curl -s -o /dev/null -w '%{{http_code}}' {base}/me
- id: body-and-code
  verify: curl -s -w '%{{http_code}}' {base}/me
- id: bundled
  verify: curl -sw '%{{http_code}}' {base}/me
- id: quiet-first
  verify: curl -q -s -w '%{{http_code}}' {base}/me
- id: open
  verify: curl -s -w '%{{http_code}}' {base}/open
- id: gone
  verify: curl -s -w '%{{http_code}}' {base}/gone
""")
    by = sweep()
    for name in ("code-alone", "body-and-code", "bundled", "quiet-first"):
        assert by[name]["status"] == "stale", (name, by[name])
    assert by["open"]["status"] == "ok", by["open"]
    assert by["gone"]["status"] == "error" and "HTTP 404" in by["gone"]["detail"], by["gone"]


def test_exit_codes_decide_before_messages(tmp_path, make_world, monkeypatch):
    """aws CLI v2 exits 253 for configuration or credentials (the aws here is v1, so a stand-in
    speaks v2); ssh exits 255 for its own failures, any other code is the remote command's."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "aws").write_text(
        '#!/bin/sh\ncase "$4" in\n'
        ' v2absent) echo "The config profile (v2absent) could not be found" >&2; exit 253;;\n'
        ' v2new) echo "aws: a message this recall has never seen" >&2; exit 253;;\n'
        ' throttled) echo "An error occurred (Throttling): Rate exceeded" >&2; exit 254;;\nesac\n')
    (bindir / "ssh").write_text(
        '#!/bin/sh\ncase "$1" in\n'
        ' remote-fails) echo "hostname: Permission denied" >&2; exit 1;;\n'
        ' refused) echo "me@refused: Permission denied (publickey)." >&2; exit 255;;\n'
        ' odd) echo "ssh: something odd" >&2; exit 255;;\nesac\n')
    for tool in ("aws", "ssh"):
        (bindir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    write_inventory(make_world, "".join(
        f"- id: {p}\n  verify: aws sts get-caller-identity --profile {p}\n" for p in ("v2absent", "v2new", "throttled"))
        + "".join(f"- id: {h}\n  verify: ssh {h} hostname\n" for h in ("remote-fails", "refused", "odd")))
    by = sweep()
    assert (by["v2absent"]["status"], by["v2absent"]["detail"]) == (
        "missing", "the AWS profile 'v2absent' is not configured on this machine")
    assert by["v2new"]["status"] == "missing" and "incomplete on this machine" in by["v2new"]["detail"]
    assert by["throttled"]["status"] == "error" and "Throttling" in by["throttled"]["detail"]
    assert by["remote-fails"]["status"] == "error" and "remote command exited 1" in by["remote-fails"]["detail"]
    assert by["refused"]["status"] == "stale", by["refused"]
    assert by["odd"]["status"] == "error" and "something odd" in by["odd"]["detail"]


def _alive(pid: int) -> bool:
    """A process that still runs (a zombie waiting for init to reap it has stopped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_hanging_proof_is_unreachable_and_leaves_no_process(tmp_path, make_world, monkeypatch):
    """A proof that never answers: `--timeout 2` ends it and everything it started, even what ignores SIGTERM."""
    import time
    bindir, pids = tmp_path / "bin", tmp_path / "pids"
    bindir.mkdir()
    (bindir / "kubectl").write_text(f"#!/bin/sh\ntrap '' TERM\necho $$ >> {pids}\nsleep 300 &\n"
                                    f"echo $! >> {pids}\nwait\n")
    (bindir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    write_inventory(make_world, "- id: hangs\n  verify: kubectl --context c get nodes\n")
    started = time.monotonic()
    by = sweep(timeout=2)
    assert time.monotonic() - started < 15
    assert (by["hangs"]["status"], by["hangs"]["detail"]) == ("unreachable", "no answer before the timeout")
    started_pids = [int(x) for x in pids.read_text().split()]
    assert len(started_pids) == 2
    assert not [p for p in started_pids if _alive(p)]


def test_a_sweep_starts_every_proof_at_once_up_to_the_pool_size(tmp_path, make_world, monkeypatch):
    """24 two-second proofs run in one wave: each had started before the first one ended."""
    bindir, log = tmp_path / "bin", tmp_path / "spans"
    bindir.mkdir()
    (bindir / "kubectl").write_text(f"#!/bin/sh\nstart=$(date +%s.%N)\nsleep 2\necho $start $(date +%s.%N) >> {log}\n")
    (bindir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    write_inventory(make_world, "".join(f"- id: k{i}\n  verify: kubectl --context c{i} get nodes\n"
                                              for i in range(24)))
    cfg = load_config()
    report = run_verify(db.connect(cfg.db_path), cfg)
    assert {p.status for p in report.probes} == {"ok"}
    spans = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    assert len(spans) == 24
    assert max(s for s, _ in spans) < min(e for _, e in spans)


@pytest.mark.e2e
def test_secret_show_says_when_it_was_last_verified(tmp_path, make_world, https_server):
    """After a sweep, `recall secret show` says how the last check went and when."""
    pytest.importorskip("cryptography")
    base = https_server.base
    check = f"curl -s --cacert {https_server.cert} -o /dev/null -H \\\"Authorization: Bearer $TOK\\\" {base}/me"
    write_inventory(make_world, "", secrets="".join(f"""\
- id: {name}
  url: {base}/me
  env: TOK
  check: "{check}"
  value: "{value}"
""" for name, value in (("good", CANARY), ("revoked", "revoked-" + CANARY))))
    assert run_recall("secret", "sync").returncode == 0
    assert "  last verified: never" in run_recall("secret", "show", "revoked").stdout.splitlines()
    sweep()
    lines = run_recall("secret", "show", "revoked").stdout.splitlines()
    assert "  last verified: stale just now: the service refused the credential (HTTP 401): rotate it" in lines
    assert "  last verified: ok just now" in run_recall("secret", "show", "good").stdout.splitlines()


# -- issue 14: ordinary proofs, honest results, setup steps judged -----------------------------------

def test_a_folded_verify_over_several_lines_is_one_command(tmp_path, make_world, standins, cli):
    write_inventory(make_world, """\
- id: jump01
  verify: >
    ssh -o BatchMode=yes -o ConnectTimeout=5
    -n -x jump01.example.com
    hostname -f
""")
    code, out, _ = cli("--json", "verify", "--dry-run")
    proof = json.loads(out)["entries"][0]["commands"][0]
    assert (proof["verdict"], proof["rule"]) == ("allow", "ssh.probe"), proof
    code, out, _ = cli("verify")
    assert code == 0 and out.startswith("ok "), out
    assert standins.read_text() == "ssh -o BatchMode=yes -o ConnectTimeout=5 -n -x jump01.example.com hostname -f\n"


def _stand_in(bindir: Path, tool: str, script: str) -> None:
    bindir.mkdir(exist_ok=True)
    (bindir / tool).write_text("#!/bin/sh\n" + script)
    (bindir / tool).chmod(0o755)


def test_exit_code_is_1_when_anything_failed_and_the_summary_counts_each_status(tmp_path, make_world, monkeypatch, cli):
    bindir = tmp_path / "bin"
    _stand_in(bindir, "kubectl", 'case "$2" in bad) echo "error: You must be logged in to the server (Unauthorized)" >&2; exit 1;; esac\n')
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    ok = "- id: good\n  verify: kubectl --context good get nodes\n- id: also\n  verify: 'true'\n"
    denied = "- id: writer\n  verify: kubectl --context good delete pod x\n"
    stale = "- id: stale\n  verify: kubectl --context bad get nodes\n"
    down = f"- id: down\n  check: tcp 127.0.0.1:{free_port()}\n  timeout: 1\n"

    write_inventory(make_world, ok)
    code, out, _ = cli("verify")
    assert code == 0
    assert out.splitlines()[-1] == "summary: 2 ok, 0 stale, 0 unreachable, 0 missing, 0 error, 0 skipped"

    write_inventory(make_world, ok + denied)
    code, out, _ = cli("verify")
    assert code == 0                                       # skipped alone is not a failure, but it is said
    assert out.splitlines()[-1].startswith("summary: 2 ok, 0 stale, 0 unreachable, 0 missing, 0 error, 1 skipped")
    assert "skipped ones did not run" in out
    code, out, _ = cli("verify", "writer")
    assert code == 0 and "0 ok" in out and "1 skipped" in out

    for extra, counted in ((stale, "1 stale"), (down, "1 unreachable")):
        write_inventory(make_world, ok + denied + extra)
        code, out, _ = cli("verify")
        assert code == 1, out
        assert counted in out.splitlines()[-1] and "2 ok" in out.splitlines()[-1]
        code, out, _ = cli("--json", "verify")
        assert code == 1 and json.loads(out)["summary"][counted.split()[1]] == 1

    code, out, _ = cli("verify", "--dry-run")                 # a dry run judges; it fails nothing
    assert code == 0 and "summary" not in out


def test_a_missing_tool_is_missing_and_fails_the_sweep(tmp_path, make_world, monkeypatch, cli):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    write_inventory(make_world, "- id: sub\n  verify: az account show\n")
    code, out, _ = cli("--json", "verify")
    got = json.loads(out)["entries"][0]["commands"][0]
    assert code == 1 and (got["status"], got["detail"]) == ("missing", "az is not installed here (not on PATH)")


# -- issue 14 point 3: a secret's variable names are safe ----------------------------------------

@pytest.mark.parametrize("body,line,says", [
    ("- id: a\n  env: PATH\n  value: x\n", 2, "'PATH' changes how programs run"),
    ("- id: a\n  env: LD_PRELOAD\n  value: x\n", 2, "'LD_PRELOAD' changes how programs run"),
    ("- id: a\n  env: BASH_ENV\n  value: x\n", 2, "'BASH_ENV' changes how programs run"),
    ("- id: a\n  env: PYTHONSTARTUP\n  value: x\n", 2, "'PYTHONSTARTUP' changes how programs run"),
    ("- id: a\n  env: SSL_CERT_FILE\n  value: x\n", 2, "'SSL_CERT_FILE' changes"),
    ("- id: a\n  env: KUBECONFIG\n  value: x\n", 2, "'KUBECONFIG' changes"),
    ("- id: a\n  env: KUBE_EDITOR\n  value: x\n", 2, "'KUBE_EDITOR' changes"),        # issue 33 point 8
    ("- id: a\n  env: CLOUDSDK_CORE_LOG_HTTP\n  value: x\n", 2, "'CLOUDSDK_CORE_LOG_HTTP' changes"),
    # not a variable name: it may be a value on the wrong line, so it is not quoted (issue 11)
    ("- id: a\n  env: token\n  value: x\n", 2, "(text not shown) is not a variable name of [A-Z_][A-Z0-9_]*"),
    ("- id: a\n  env: 9LIVES\n  value: x\n", 2, "(text not shown) is not a variable name"),
    ("- id: home\n  value: x\n", 1, "secret 'home' (its variable, from the id): 'HOME' changes"),
    ("- id: ok\n  value: x\n- id: db\n  env: GIT\n  fields:\n    dir: /tmp/evil\n    user: u\n", 6,
     "field 'dir' (variable GIT_DIR): 'GIT_DIR' changes"),
    ("- id: db\n  env: LD\n  fields:\n    preload: /tmp/evil.so\n", 4, "'LD_PRELOAD' changes"),
])
def test_sync_refuses_unsafe_variable_names_at_file_line(tmp_path, make_world, body, line, says):
    pytest.importorskip("cryptography")
    secrets = write_inventory(make_world, "", secrets=body).secrets
    r = run_recall("secret", "sync")
    assert r.returncode == 1, r.stdout
    where = f"{secrets}:{line}: "
    assert r.stderr.startswith(f"recall: {where}") and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def test_ordinary_variable_names_still_sync(tmp_path, make_world):
    pytest.importorskip("cryptography")
    write_inventory(make_world, "", secrets="- id: github-token\n  value: x\n- id: db\n  env: PG\n"
                    "  fields:\n    user: u\n    password: p\n- id: k\n  env: _OPS_PATH_HINT\n  value: y\n")
    r = run_recall("secret", "sync")
    assert r.returncode == 0, r.stderr
    shown = run_recall("--json", "secret", "show", "db").stdout
    assert sorted(json.loads(shown)["variables"]) == ["PG_PASSWORD", "PG_USER"]


# -- issue 14 points 1, 2, 4, 7: live, against local stand-ins ------------------------------------

def _by(report_json: str) -> dict:
    return {e["id"]: e for e in json.loads(report_json)["entries"]}


@pytest.mark.e2e
def test_a_credential_reaches_only_its_own_host_over_https(tmp_path, make_world):
    """Three recording servers: the secret's own (https), another (https, other port), a plain http
    one. Every proof that would carry the credential elsewhere is denied by name, and those two
    servers never see a single request; the own server sees only the allowed ones."""
    pytest.importorskip("cryptography")
    own, other, plain = Recorder(tmp_path, tls=True), Recorder(tmp_path, tls=True), Recorder()
    try:
        ca = own.cert
        other_ca = other.cert

        def curl(url, var="OWN", cacert=ca):
            return f"'curl -s --cacert {cacert} -H \"Authorization: Bearer ${var}\" {url}'"
        write_inventory(make_world, f"""\
- id: entry-ok
  secrets: [own]
  url: {own.base}/
  verify: {curl(own.base + '/me')}
- id: entry-widens
  secrets: [own]
  url: {other.base}/
  verify: {curl(other.base + '/me', cacert=other_ca)}
- id: entry-other-port
  secrets: [own]
  verify: {curl(other.base + '/me', cacert=other_ca)}
- id: entry-other-host
  secrets: [own]
  verify: {curl(f'https://localhost:{own.port}/me')}
- id: entry-http
  secrets: [own]
  verify: {curl(plain.base + '/me')}
- id: entry-secret-without-url
  secrets: [bare]
  verify: {curl(own.base + '/me', var='BARE')}
- id: entry-another-secrets-host
  secrets: [own, other-token]
  verify: {curl(other.base + '/me', var='OTHER_TOKEN', cacert=other_ca)}
""", secrets=f"""\
- id: own
  url: {own.base}/me
  check: {curl(own.base + '/me')}
  value: "{CANARY}"
- id: from-use
  use: {curl(own.base + '/me', var='FROM_USE')}
  check: {curl(own.base + '/me', var='FROM_USE')}
  value: "{CANARY}"
- id: check-elsewhere
  url: {own.base}/
  check: {curl(other.base + '/me', var='CHECK_ELSEWHERE', cacert=other_ca)}
  value: "{CANARY}"
- id: plain-url
  url: {plain.base}/me
  check: {curl(plain.base + '/me', var='PLAIN_URL')}
  value: "{CANARY}"
- id: other-token
  url: {other.base}/me
  value: "other-{CANARY}"
- id: bare
  value: "bare-{CANARY}"
""")
        assert run_recall("secret", "sync").returncode == 0
        dry = _by(run_recall("--json", "verify", "--dry-run").stdout)
        r = run_recall("--json", "verify")
        got = _by(r.stdout)
        want = {"entry-ok": ("allow", "ok"), "own": ("allow", "ok"), "from-use": ("allow", "ok"),
                "entry-widens": ("verify.entry-url", "skipped"), "entry-other-port": ("curl.host", "skipped"),
                "entry-other-host": ("curl.host", "skipped"), "entry-http": ("curl.http", "skipped"),
                "entry-secret-without-url": ("curl.host", "skipped"),
                "entry-another-secrets-host": ("curl.host", "skipped"),
                "check-elsewhere": ("curl.host", "skipped"),
                "plain-url": ("allow", "ok")}          # plain http to loopback when that is its own url: (issue 26)
        for name, (rule, status_) in want.items():
            proof = got[name]["commands"][0]
            assert proof["status"] == status_, (name, proof)
            if rule != "allow":
                assert (proof["verdict"], proof["rule"]) == ("deny", rule), (name, proof)
                assert dry[name]["commands"][0]["rule"] == rule
                assert rule in proof["detail"]
        assert "other-token's host" in got["entry-another-secrets-host"]["commands"][0]["reason"]
        assert "no url:" in got["entry-secret-without-url"]["commands"][0]["reason"]
        assert other.requests == []                                   # nothing reached another host
        assert [q["auth"] for q in plain.requests] == [f"Bearer {CANARY}"]      # plain-url's own check only
        assert len(own.requests) == 3 and all(q["host"] == f"127.0.0.1:{own.port}" for q in own.requests)
        assert all(q["auth"] == f"Bearer {CANARY}" for q in own.requests)
        assert r.returncode == 0 and CANARY not in r.stdout + r.stderr    # denied ones are skipped, not failed
    finally:
        for server in (own, other, plain):
            server.stop()


@pytest.mark.e2e
def test_setup_steps_are_judged_and_a_fake_curl_on_their_path_never_runs(tmp_path, make_world):
    """A setup step that exports a PATH with a fake curl first: verify still runs the real curl
    (by its absolute path from recall's own PATH). Steps that could run hidden code skip the
    entry and never run; the dry run lists every step with its verdict."""
    server = Recorder(tmp_path, tls=True)
    try:
        fake, ran = tmp_path / "fakebin", tmp_path / "ran"
        ran.mkdir()
        (tmp_path / "loosebin").mkdir()
        (tmp_path / "loosebin").chmod(0o777)
        _stand_in(fake, "curl", f"touch {ran}/fake-curl\nexit 0\n")
        rc = tmp_path / "curlhome"
        rc.mkdir()
        (rc / ".curlrc").write_text(f'output = "{ran}/curlrc-output"\nheader = "X-Planted: 1"\n')
        sourced = tmp_path / "ops.sh"
        sourced.write_text(f"export PATH={fake}:$PATH\nexport OPS_REGION=eu-west-1\nexport CURL_HOME={rc}\n")
        sourced.chmod(0o644)
        kube = Path(os.environ["HOME"]) / ".kube"
        kube.mkdir()
        (kube / "ops").write_text("apiVersion: v1\n")
        (kube / "ops").chmod(0o600)
        loose = tmp_path / "loose.sh"
        loose.write_text(f"touch {ran}/loose\n")
        loose.chmod(0o666)
        proof = f"curl -s --cacert {server.cert} {server.base}/open"
        steps = {
            "sourced-path": [f"source {sourced}"],
            "dot-sourced": [f". {sourced}", "unset OPS_REGION"],
            "inline-path": [f"export PATH={fake}:/usr/bin:/bin KUBECONFIG=~/.kube/ops"],
            "subst": [f"export X=$(touch {ran}/subst)"],
            "backticks": [f"export X=`touch {ran}/backticks`"],
            "command": [f"touch {ran}/command"],
            "global": ["kubectl config use-context ops"],
            "loose": [f"source {loose}"],
            "relative": ["source ops.sh"],
            "preload": ["export LD_PRELOAD=/tmp/evil.so"],
            "curl-home": [f"export CURL_HOME={rc}"],
            "foreign-kubeconfig": ["export KUBECONFIG=/tmp/kubeconfig-nobody-owns"],
            "loose-path": [f"export PATH={tmp_path}/loosebin:/usr/bin:/bin"],
            "second-step": [f"source {sourced}", f"export Y=$(touch {ran}/second)"],
        }
        write_inventory(make_world, "".join(
            f"- id: {name}\n  access: {json.dumps(s)}\n  verify: {proof}\n" for name, s in steps.items())
            + f"- id: fail-with-body\n  verify: curl -s --fail-with-body --cacert {server.cert} {server.base}/gone\n")
        dry = _by(run_recall("--json", "verify", "--dry-run").stdout)
        text = run_recall("verify", "--dry-run").stdout
        assert "entry:subst" in text and "deny   setup: export X=$(touch" in text
        assert [s["rule"] for s in dry["dot-sourced"]["setup"]] == ["setup.source", "setup.unset"]
        r = run_recall("--json", "verify")
        got = {name: e["commands"][0] for name, e in _by(r.stdout).items()}
        denied = {"subst": "shell-expansion", "backticks": "shell-expansion", "command": "setup.command",
                  "global": "setup.global-state", "loose": "setup.source-mode", "relative": "setup.source-path",
                  "preload": "setup.export-name", "second-step": "shell-expansion",
                  "foreign-kubeconfig": "setup.export-path", "loose-path": "setup.export-path"}
        for name, rule in denied.items():
            assert dry[name]["setup"][-1]["verdict"] == "deny" and dry[name]["setup"][-1]["rule"] == rule, name
            assert got[name]["status"] == "skipped", (name, got[name])
            assert got[name]["detail"].startswith(f"setup step not allowed ({rule})"), got[name]
        for name in ("sourced-path", "dot-sourced", "inline-path", "curl-home"):
            assert got[name]["status"] == "ok", (name, got[name])
        assert got["fail-with-body"]["status"] == "error" and "404" in got["fail-with-body"]["detail"]
        assert sorted(os.listdir(ran)) == []                   # no fake curl, no hidden command ran
        assert len([q for q in server.requests if q["path"] == "/open"]) == 4   # the real curl, four times
        assert not any("X-Planted" in q["extra"] for q in server.requests)     # no .curlrc was read
        assert r.returncode == 1                                 # the 404 failed the sweep
    finally:
        server.stop()


@pytest.mark.e2e
def test_a_value_cannot_inject_curl_configuration(tmp_path, make_world):
    """A value holding '\\noutput = FILE' (or CR) is refused before curl starts: no file is written,
    no request is sent; a value with quotes and backslashes arrives intact. (A NUL no variable can
    carry is refused by sync: test_vault.)"""
    pytest.importorskip("cryptography")
    server = Recorder(tmp_path, tls=True)
    try:
        dropped = tmp_path / "dropped"
        check = f"'curl -s --cacert {server.cert} -H \"Authorization: Bearer $V\" {server.base}/echo'"
        rows = {"newline": f"{CANARY}\\noutput = {dropped}", "cr": f"{CANARY}\\routput = {dropped}",
                "quoted": 'a\\"b\\\\c\\\\\\"d ' + CANARY}
        write_inventory(make_world, "", secrets="".join(
            f"- id: {name}\n  env: V\n  url: {server.base}/\n  check: {check}\n  value: \"{value}\"\n"
            for name, value in rows.items()))
        r = run_recall("secret", "sync")
        assert r.returncode == 0, r.stderr
        r = run_recall("--json", "verify")
        got = {name: e["commands"][0] for name, e in _by(r.stdout).items()}
        for name, what in (("newline", "a newline"), ("cr", "a carriage return")):
            assert got[name]["status"] == "error", got[name]
            assert got[name]["detail"].startswith(f"secret '{name}' holds {what}, which an HTTP header cannot carry")
        assert not dropped.exists()
        assert got["quoted"]["status"] == "ok", got["quoted"]
        assert [q["auth"] for q in server.requests] == [f'Bearer a"b\\c\\"d {CANARY}']   # only the safe one
        assert CANARY not in r.stdout + r.stderr and r.returncode == 1
    finally:
        server.stop()


def test_ssh_jumps_only_through_an_inventory_host(tmp_path, make_world, cli):
    write_inventory(make_world, """\
- id: bastion
  url: ssh://bastion.example.com
  check: tcp bastion.example.com:22
- id: db01
  verify: ssh -J ops@bastion.example.com -o BatchMode=yes db01.internal hostname
- id: db02
  verify: ssh -J bastion db02.internal true
- id: db03
  verify: ssh -J evil.example.net db03.internal true
""")
    code, out, _ = cli("--json", "verify", "--dry-run")
    rules = {e["id"]: e["commands"][0]["rule"] for e in json.loads(out)["entries"]}
    assert (rules["db01"], rules["db02"], rules["db03"]) == ("ssh.probe", "ssh.probe", "ssh.jump")


def test_sudo_proofs_get_the_password_on_stdin(tmp_path, make_world, monkeypatch):
    """sudo -v and sudo -n true from a secret with inject: stdin: recall adds -S and writes the
    password to sudo's stdin, never argv."""
    pytest.importorskip("cryptography")
    bindir, seen = tmp_path / "bin", tmp_path / "seen"
    seen.mkdir()
    _stand_in(bindir, "sudo", f'echo "$@" >> {seen}/argv\ncat >> {seen}/stdin\n')
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    write_inventory(make_world, "", secrets="".join(
        f"- id: {name}\n  inject: stdin\n  check: {check}\n  value: \"{CANARY}\"\n"
        for name, check in (("validate", "sudo -v"), ("cached", "sudo -n true"))))
    assert run_recall("secret", "sync").returncode == 0
    by = sweep()
    assert by["validate"]["status"] == by["cached"]["status"] == "ok", by
    assert sorted((seen / "argv").read_text().splitlines()) == ["-S -n true", "-S -v"]
    assert (seen / "stdin").read_text().count(CANARY) == 2


# -- issue 23 point 7: what the guard does not understand is denied, wherever it sits ------------

@pytest.mark.parametrize("char,rule", [("\x0b", "control-char"), ("\x0c", "control-char"),
                                       ("\u00a0", "unicode-space"), ("\u3000", "unicode-space")])
def test_a_trailing_vt_ff_nbsp_or_ideographic_space_is_denied_in_every_proof(tmp_path, make_world, char, rule):
    """The four proofs a str.strip() used to clean before the guard saw them: each is denied with its
    rule through the real CLI, a prerequisite so checked is never connected to, its dependant skipped."""
    pytest.importorskip("cryptography")
    own = tmp_path / "home" / "own.sh"
    own.write_text("export A=1\n")
    own.chmod(0o600)
    import socket
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    try:
        write_inventory(make_world, f"""\
- id: vpn
  check: tcp 127.0.0.1:{port}{char}
- id: cluster
  requires: [vpn]
  verify: kubectl get nodes{char}
- id: setup
  access:
    - export A=1{char}
  verify: 'true'
""", secrets=f"""\
- id: tok
  check: true{char}
  value: "{CANARY}"
""")
        assert run_recall("secret", "sync").returncode == 0
        dry = json.loads(run_recall("--json", "verify", "--dry-run").stdout)
        by = {e["id"]: e for e in dry["entries"]}
        for name in ("vpn", "cluster", "tok"):
            proof = by[name]["commands"][0]
            assert (proof["verdict"], proof["rule"]) == ("deny", rule), (name, proof)
            assert f"U+{ord(char):04X}" in proof["reason"], proof
        assert (by["setup"]["setup"][0]["verdict"], by["setup"]["setup"][0]["rule"]) == ("deny", rule)
        text = run_recall("verify", "--dry-run").stdout
        assert f"rule {rule}: U+{ord(char):04X}" in text
        swept = json.loads(run_recall("--json", "verify").stdout)
        got = {e["id"]: e["commands"][0] for e in swept["entries"]}
        assert got["vpn"]["status"] == "skipped" and rule in got["vpn"]["detail"], got["vpn"]
        assert got["cluster"]["status"] == "skipped", got["cluster"]
        assert f"prerequisite 'vpn' is down: its check is denied by the guard ({rule})" in got["cluster"]["detail"]
        assert got["setup"]["status"] == "skipped" and f"setup step not allowed ({rule})" in got["setup"]["detail"]
        assert got["tok"]["status"] == "skipped"
        with pytest.raises(socket.timeout):
            listener.accept()                    # the denied tcp check never ran
    finally:
        listener.close()


# -- issue 23 point 13: the rules nothing tested -------------------------------------------------

def test_a_secrets_variable_outside_a_curl_header_value_is_denied_verify_variable(tmp_path, make_world, standins):
    """Through the real CLI: a secret's variable in a URL, a plain argument, a header's name or -w is
    denied (verify.variable: it would reach argv); in a -H header's value it is allowed (sent on stdin)."""
    pytest.importorskip("cryptography")
    curl = "curl -s -o /dev/null {} https://jira.example.com/rest"
    checks = {"in-header-value": curl.format('-H \\"Authorization: Bearer $TOK\\"'),
              "glued-header-value": curl.format('-sH\\"Authorization: Bearer $TOK\\"'),
              "in-url": "curl -s https://jira.example.com/rest/$TOK",
              "in-url-braced": "curl -s https://jira.example.com/${TOK}/rest",
              "in-header-name": curl.format('-H \\"$TOK: x\\"'),
              "in-write-out": curl.format('-w \\"$TOK\\"'),
              "in-user-agent": curl.format('-A \\"$TOK\\"'),
              "kubectl-argument": "kubectl --context $TOK get nodes"}
    write_inventory(make_world, "", secrets="".join(f"""\
- id: {name}
  url: https://jira.example.com
  env: TOK
  check: "{check}"
  value: "{i}-{CANARY}"
""" for i, (name, check) in enumerate(checks.items())))     # no piece of an id in a value: ids are shown
    assert run_recall("secret", "sync").returncode == 0
    r = run_recall("--json", "verify", "--dry-run")
    got = {e["id"]: e["commands"][0] for e in json.loads(r.stdout)["entries"]}
    for name in checks:
        want = ("allow", "curl.get") if name.endswith("header-value") else ("deny", "verify.variable")
        assert (got[name]["verdict"], got[name]["rule"]) == want, (name, got[name])
    assert 'allowed: -H "Authorization: Bearer $VAR"' in got["in-url"]["reason"]      # the allowed form
    swept = json.loads(run_recall("--json", "verify", "in-url", "in-header-name").stdout)
    assert {e["commands"][0]["status"] for e in swept["entries"]} == {"skipped"}
    assert not standins.exists()                 # nothing ran, so no value reached any argv
    assert CANARY not in r.stdout + r.stderr


def test_ssh_for_an_entry_with_a_linked_secret_reaches_only_that_secrets_host(tmp_path, make_world, standins):
    """Through the real CLI: ssh.host and ssh.http decide an entry's ssh proof when it links a secret."""
    pytest.importorskip("cryptography")
    write_inventory(make_world, """\
- id: own-host
  secrets: [db-key]
  verify: ssh -o BatchMode=yes db01.example.com true
- id: other-host
  secrets: [db-key]
  verify: ssh -o BatchMode=yes jump01.example.com true
- id: plain
  secrets: [plain-key]
  verify: ssh db02.example.com true
- id: unlinked
  verify: ssh jump01.example.com true
""", secrets=f"""\
- id: db-key
  url: ssh://db01.example.com
  value: "{CANARY}"
- id: plain-key
  url: http://db02.example.com
  value: "plain-{CANARY}"
""")
    assert run_recall("secret", "sync").returncode == 0
    got = {e["id"]: e["commands"][0] for e in json.loads(run_recall("--json", "verify", "--dry-run").stdout)["entries"]}
    assert (got["own-host"]["verdict"], got["own-host"]["rule"]) == ("allow", "ssh.probe")
    assert (got["unlinked"]["verdict"], got["unlinked"]["rule"]) == ("allow", "ssh.probe")
    assert (got["other-host"]["verdict"], got["other-host"]["rule"]) == ("deny", "ssh.host")
    assert "db01.example.com" in got["other-host"]["reason"] and "db-key" in got["other-host"]["reason"]
    assert (got["plain"]["verdict"], got["plain"]["rule"]) == ("deny", "ssh.http")
    r = run_recall("--json", "verify", "other-host", "plain")
    assert {e["commands"][0]["status"] for e in json.loads(r.stdout)["entries"]} == {"skipped"}
    assert not standins.exists()                 # ssh never started toward the wrong host


# -- issue 26 point 8: the guard allows what the README teaches ------------------------------------

def _v6_server():
    """An HTTP server on [::1] answering 200 to anything: (server, port), or None without IPv6."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class V6(ThreadingHTTPServer):
        address_family = socket.AF_INET6

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
    try:
        srv = V6(("::1", 0), H)
    except OSError:
        return None
    threading.Thread(target=srv.serve_forever, daemon=True, kwargs={"poll_interval": 0.05}).start()
    return srv, srv.server_address[1]


@pytest.mark.e2e
def test_a_port_forward_proof_to_loopback_runs_and_a_credential_goes_only_to_its_own_loopback_url(
        tmp_path, make_world):
    """The `kubectl port-forward` + curl pattern through the real CLI: a proof to 127.0.0.1,
    localhost or [::1] that sends no credential runs for an entry that links one; a secret whose own
    url: is http://127.0.0.1:PORT is checked over plain http there; a credential aimed at loopback
    when its url: is elsewhere is denied, naming the allowed form; the proxy a sourced file sets is
    never used for loopback."""
    pytest.importorskip("cryptography")
    local, trap = Recorder(), Recorder()          # the forwarded service, and a proxy that must stay idle
    v6 = _v6_server()
    try:
        home = tmp_path / "home"
        (home / "proxy.sh").write_text(f"export http_proxy=http://127.0.0.1:{trap.port}\n"
                                       f"export HTTP_PROXY=http://127.0.0.1:{trap.port}\n")
        (home / "proxy.sh").chmod(0o600)
        v6_url = f"http://[::1]:{v6[1]}/open" if v6 else "http://[::1]:9/open"
        code = "-o /dev/null -w '%{http_code}'"
        write_inventory(make_world, f"""\
- id: cluster
  secrets: [kube-token]
  verify: curl -sf {code} http://127.0.0.1:{local.port}/open
- id: by-name
  secrets: [kube-token]
  verify: curl -sfk http://localhost:{local.port}/open
- id: by-v6
  secrets: [kube-token]
  verify: curl -sf {v6_url}
- id: own-loopback
  secrets: [local-api]
  access: [source ~/proxy.sh]
  verify: "curl -sf {code} -H \\"Authorization: Bearer $LOCAL_API\\" http://127.0.0.1:{local.port}/me"
- id: elsewhere
  secrets: [kube-token]
  verify: "curl -s -H \\"Authorization: Bearer $KUBE_TOKEN\\" http://127.0.0.1:{local.port}/me"
""", secrets=f"""\
- id: kube-token
  url: https://kube.example.com
  value: "kube-{CANARY}"
- id: local-api
  url: http://127.0.0.1:{local.port}
  check: "curl -sf {code} -H \\"Authorization: Bearer $LOCAL_API\\" http://127.0.0.1:{local.port}/me"
  value: "{CANARY}"
""")
        assert run_recall("secret", "sync").returncode == 0
        dry = _by(run_recall("--json", "verify", "--dry-run").stdout)
        for name in ("cluster", "by-name", "by-v6", "own-loopback", "local-api"):
            proof = dry[name]["commands"][0]
            assert (proof["verdict"], proof["rule"]) == ("allow", "curl.get"), (name, proof)
        denied = dry["elsewhere"]["commands"][0]
        assert (denied["verdict"], denied["rule"]) == ("deny", "curl.host"), denied
        assert "allowed: the proof pointed at kube.example.com" in denied["reason"]
        ids = ["cluster", "by-name", "own-loopback", "local-api", "elsewhere"] + (["by-v6"] if v6 else [])
        r = run_recall("--json", "verify", *ids)
        got = {e["id"]: e["commands"][0] for e in json.loads(r.stdout)["entries"]}
        for name in set(ids) - {"elsewhere"}:
            assert got[name]["status"] == "ok", (name, got[name])
        assert got["elsewhere"]["status"] == "skipped"
        assert trap.requests == []                    # a sourced http_proxy never saw the plain-http credential
        assert sorted(q["auth"] or "" for q in local.requests) == ["", "", f"Bearer {CANARY}", f"Bearer {CANARY}"]
        assert CANARY not in r.stdout + r.stderr
    finally:
        local.stop()
        trap.stop()
        if v6:
            v6[0].shutdown()
            v6[0].server_close()


@pytest.mark.e2e
def test_cacert_under_the_home_folder_is_expanded_by_recall(tmp_path, make_world, https_server):
    """`--cacert ~/certs/ca.pem`, as a user writes it in a shell: allowed, and recall expands the tilde
    itself (curl does not, and no shell runs) — for a secret's check and an entry's proof alike."""
    pytest.importorskip("cryptography")
    certs = tmp_path / "home" / "certs"
    certs.mkdir()
    shutil.copy(https_server.cert, certs / "ca.pem")
    base = https_server.base
    write_inventory(make_world, f"""\
- id: api
  verify: curl -sf --cacert ~/certs/ca.pem {base}/open
- id: not-a-cacert
  verify: curl -sf -A ~/certs/ca.pem {base}/open
""", secrets=f"""\
- id: tok
  url: {base}/me
  check: "curl -sf --cacert ~/certs/ca.pem -H \\"Authorization: Bearer $TOK\\" {base}/me"
  value: "{CANARY}"
""")
    assert run_recall("secret", "sync").returncode == 0
    dry = _by(run_recall("--json", "verify", "--dry-run").stdout)
    assert (dry["api"]["commands"][0]["verdict"], dry["tok"]["commands"][0]["verdict"]) == ("allow", "allow")
    no = dry["not-a-cacert"]["commands"][0]
    assert (no["verdict"], no["rule"]) == ("deny", "tilde") and "curl --cacert ~/FILE" in no["reason"]
    got = sweep("api", "tok")
    assert (got["api"]["status"], got["tok"]["status"]) == ("ok", "ok"), got
    assert [q["path"] for q in https_server.requests] == ["/open", "/me"] or \
        sorted(q["path"] for q in https_server.requests) == ["/me", "/open"]


def test_an_alias_with_a_space_names_one_entry_in_the_cli_and_in_recall_verify(tmp_path, make_world):
    """`platform cluster` is one alias (as recall_access_show takes it), in any case; commas separate
    several names, and plain words still name one entry each (`vpn jump`)."""
    write_inventory(make_world, """\
- id: ops-cluster
  aliases: [platform cluster]
  verify: 'true'
- id: vpn
  verify: 'true'
- id: jump
  verify: 'true'
""")
    from recall.mcp_server import recall_verify

    def checked(text):
        return sorted(e["id"] for e in json.loads(text)["entries"])
    assert checked(recall_verify(id="Platform Cluster")) == ["ops-cluster"]
    assert checked(recall_verify(id="platform cluster, vpn")) == ["ops-cluster", "vpn"]
    assert checked(recall_verify(id="vpn jump")) == ["jump", "vpn"]
    r = run_recall("--json", "verify", "platform cluster")
    assert r.returncode == 0 and [e["id"] for e in json.loads(r.stdout)["entries"]] == ["ops-cluster"], r.stderr
    r = run_recall("verify", "platform clustr")
    assert r.returncode == 1 and "no inventory entry or secret 'platform clustr'" in r.stderr
    assert "did you mean: platform cluster (ops-cluster)?" in r.stderr


def test_every_denial_in_a_dry_run_names_the_allowed_form(tmp_path, make_world, cli):
    """The guard's, the setup steps' and verify's own denials (no-proof, verify.entry-url,
    verify.variable) all end in '— allowed: …' in `verify --dry-run`."""
    pytest.importorskip("cryptography")
    write_inventory(make_world, """\
- id: nothing
  kind: host
- id: writer
  verify: kubectl delete pod x
- id: step
  access: ["echo hi"]
  verify: 'true'
- id: widens
  url: https://other.example.com
  secrets: [tok]
  verify: "curl -s -H \\"Authorization: Bearer $TOK\\" https://other.example.com/"
""", secrets=f"""\
- id: tok
  url: https://jira.example.com
  check: curl -s https://jira.example.com/$TOK
  value: "{CANARY}"
""")
    cli("secret", "sync")
    code, out, _ = cli("--json", "verify", "--dry-run")
    entries = json.loads(out)["entries"]
    denied = [c for e in entries for c in e["commands"] + e.get("setup", []) if c["verdict"] == "deny"]
    assert {c["rule"] for c in denied} == {"no-proof", "kubectl.command", "setup.command", "verify.entry-url",
                                           "verify.variable"}, denied
    for c in denied:
        assert " — allowed: " in c["reason"] and c["reason"].split(" — allowed: ")[1].strip(), c
    code, text, _ = cli("verify", "--dry-run")
    assert text.count(" — allowed: ") == len(denied)


def _curls_to(port: int) -> list:
    """The pids of live processes whose command line names 127.0.0.1:port (what `ps` would list)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"127.0.0.1:{port}".encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            pass
    return [p for p in found if _alive(p)]


def _read_pty(fd: int, until, bound: float = 60.0) -> bytes:
    """What the pty shows, read (so recall never blocks writing) until `until()`; once the pty has
    ended (recall closed it, exiting), only `until()` is polled. Gives up after `bound` seconds."""
    import select
    import time
    out, give_up, open_ = b"", time.monotonic() + bound, True
    while not until() and time.monotonic() < give_up:
        if not open_:
            time.sleep(0.05)
        elif select.select([fd], [], [], 0.1)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:          # EIO: every holder of the terminal has closed it
                chunk = b""
            out += chunk
            open_ = bool(chunk)
    return out


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_one_ctrl_c_or_sigterm_ends_a_sweep_whose_proofs_never_answer(make_world, listener, how):
    """Proofs against a server that accepts and never answers, under --timeout 3600: one Ctrl-C (typed
    at a real terminal) or a SIGTERM waited for every proof to time out. Now it ends them and recall,
    and stores no result for them."""
    import pty
    import signal

    from tests.conftest import REPO
    write_inventory(make_world, "".join(f"- id: hangs{i}\n  verify: curl -s https://127.0.0.1:{listener}/{i}\n"
                                        for i in range(2)))
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, str(REPO / "recall.py"), "verify", "--timeout", "3600"])
    status = None

    def ended() -> bool:
        nonlocal status
        if status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            status = raw if done else None
        return status is not None
    try:
        out = _read_pty(fd, lambda: len(_curls_to(listener)) == 2 or ended())
        assert len(_curls_to(listener)) == 2, out
        if how == "SIGINT":
            os.write(fd, b"\x03")          # Ctrl-C, as typed: the terminal sends SIGINT to recall
        else:
            os.kill(pid, signal.SIGTERM)
        out += _read_pty(fd, ended)
        left = _curls_to(listener)
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        for curl in _curls_to(listener):
            os.kill(curl, signal.SIGKILL)
        os.close(fd)
    assert status is not None, f"recall still runs after {how}: {out!r}"
    assert os.waitstatus_to_exitcode(status) == 128 + getattr(signal, how), out
    assert left == [], "a proof outlived recall"
    said = b"recall: interrupted" if how == "SIGINT" else b"recall: stopped by SIGTERM"
    assert b"Traceback" not in out and said in out, out
    shown = json.loads(run_recall("--json", "access", "show", "hangs0").stdout)
    assert shown["last_verified"] == "never"          # a proof stopped midway says nothing of its entry
