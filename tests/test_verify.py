"""Verify: dry-run verdicts (nothing runs), classification, and sweeps against real tools."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recall import db, inventory
from recall.classify import classify
from recall.config import load_config
from recall.verify import run_verify
from tests.conftest import CANARY, run_recall, wait_for_port
from tests.conftest import free_port

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


def write_inventory(tmp_path, config, text, secrets=""):
    inv = tmp_path / "inventory.yaml"
    inv.write_text(text)
    extra = f"inventory: [{inv}]\n"
    if secrets:
        sp = tmp_path / "secrets.yaml"
        sp.write_text(secrets)
        sp.chmod(0o600)
        extra += f"secrets: [{sp}]\n"
    config(extra)
    inventory.forget_checks()
    return inv


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


def test_dry_run_prints_every_verdict_and_runs_nothing(tmp_path, config, standins, cli):
    write_inventory(tmp_path, config, SWEEP.format(vpn=free_port()), SECRETS)
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


def test_down_prerequisite_skips_dependants_naming_it(tmp_path, config, standins):
    write_inventory(tmp_path, config, SWEEP.format(vpn=free_port()))
    cfg = load_config()
    report = run_verify(db.connect(cfg.db_path), cfg, ["vpn", "ops-cluster", "writer"])
    by = {p.id: p for p in report.probes}
    assert by["vpn"].status == "unreachable"
    assert by["ops-cluster"].status == "skipped"
    assert by["ops-cluster"].detail == "prerequisite 'vpn' is down: connect the VPN client and retry"
    assert by["writer"].status == "skipped" and "guard denied" in by["writer"].detail
    assert not standins.exists()      # neither the skipped nor the denied command ran


def test_results_are_stored_and_shown(tmp_path, config, standins, cli):
    write_inventory(tmp_path, config, SWEEP.format(vpn=free_port()))
    cli("verify", "vpn", "ops-cluster")
    code, out, _ = cli("access", "show", "ops-cluster")
    assert "last verified: skipped just now: prerequisite 'vpn' is down" in out


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
def test_aws_against_moto(tmp_path, config, moto):
    creds = tmp_path / "aws"
    creds.mkdir()
    (creds / "config").write_text("[profile ops]\nregion = us-east-1\n")
    (creds / "credentials").write_text("[ops]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    dead = free_port()
    script = tmp_path / "aws.sh"
    script.write_text(f"export AWS_CONFIG_FILE={creds / 'config'}\nexport AWS_SHARED_CREDENTIALS_FILE={creds / 'credentials'}\n"
                      f"export AWS_ENDPOINT_URL=http://127.0.0.1:{moto}\nexport AWS_MAX_ATTEMPTS=1\n")
    dead_script = tmp_path / "dead.sh"
    dead_script.write_text(script.read_text().replace(f":{moto}", f":{dead}"))
    write_inventory(tmp_path, config, f"""\
- id: ok
  access: [source {script}]
  verify: aws sts get-caller-identity --profile ops
- id: noprofile
  access: [source {script}]
  verify: aws sts get-caller-identity --profile absent
- id: down
  access: [source {dead_script}]
  verify: aws sts get-caller-identity --profile ops
""")
    cfg = load_config()
    by = {p.id: p for p in run_verify(db.connect(cfg.db_path), cfg, timeout=60).probes}
    assert by["ok"].status == "ok", by["ok"].detail
    assert by["noprofile"].status == "missing" and "absent" in by["noprofile"].detail
    assert by["down"].status == "unreachable", by["down"].detail


@pytest.mark.e2e
def test_kubectl_against_a_tls_api_server(tmp_path, config):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    from tests.fake_kube import FakeKube, kubeconfig
    good, bad = FakeKube(tmp_path), FakeKube(tmp_path, "unauthorized")
    try:
        kc = kubeconfig(tmp_path / "kubeconfig", {"good": (good.port, good.cert), "bad": (bad.port, bad.cert),
                                                  "dead": (free_port(), good.cert)})
        script = tmp_path / "kube.sh"
        script.write_text(f"export KUBECONFIG={kc}\n")
        entries = "".join(f"- id: {n}\n  access: [source {script}]\n  verify: kubectl --context {c} "
                          f"--request-timeout 5s get nodes\n"
                          for n, c in (("good", "good"), ("bad", "bad"), ("dead", "dead"), ("absent", "absent")))
        write_inventory(tmp_path, config, entries)
        cfg = load_config()
        by = {p.id: p for p in run_verify(db.connect(cfg.db_path), cfg).probes}
        assert by["good"].status == "ok", by["good"].detail
        assert by["bad"].status == "stale"
        assert by["dead"].status == "unreachable"
        assert by["absent"].status == "missing"
    finally:
        good.stop()
        bad.stop()


def _isolated_root_home_works() -> bool:
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return r.returncode == 0


@pytest.mark.e2e
def test_ssh_against_a_real_sshd(tmp_path, config):
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
        write_inventory(tmp_path, config, f"""\
- id: good
  verify: ssh -p {server.port} -i {server.key} 127.0.0.1 hostname
- id: wrongkey
  verify: ssh -p {server.port} -i {wrong} 127.0.0.1 hostname
- id: closed
  verify: ssh -p {closed} -i {server.key} 127.0.0.1 true
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
    finally:
        stop_sshd(server)


@pytest.mark.e2e
def test_curl_secret_check_sends_the_value_on_stdin_not_argv(tmp_path, config):
    """A real curl against a local HTTP server: the header arrives; 401 → stale; argv never holds it."""
    pytest.importorskip("cryptography")
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer
    seen = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(200 if self.headers.get("Authorization") == f"Bearer {CANARY}" else 401)
            self.end_headers()

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/me"
        check = f"curl -s -o /dev/null -w \\\"%{{http_code}}\\\" -H \\\"Authorization: Bearer $TOK\\\" {url}"
        write_inventory(tmp_path, config, "", secrets=f"""\
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
  check: "curl -s -H \\"Authorization: Bearer $TOK\\" {url}"
  value: "plain-{CANARY}"
""")
        (tmp_path / "inventory.yaml").write_text("")
        r = run_recall("secret", "sync")
        assert r.returncode == 0, r.stderr
        r = run_recall("--json", "verify")
        assert r.returncode == 0, r.stderr
        by = {e["id"]: e["commands"][0] for e in json.loads(r.stdout)["entries"]}
        assert by["good"]["status"] == "ok", by["good"]
        assert by["revoked"]["status"] == "stale", by["revoked"]
        assert by["plain"]["status"] == "stale", by["plain"]     # no -w: recall adds -f -S
        assert f"Bearer {CANARY}" in seen
        assert CANARY not in r.stdout + r.stderr
    finally:
        srv.shutdown()


def test_az_proofs_run_one_at_a_time_others_in_parallel(tmp_path, config, monkeypatch):
    """az keeps one global 'current subscription': its proofs never overlap; kubectl's may."""
    bindir, log = tmp_path / "bin", tmp_path / "spans"
    bindir.mkdir()
    for tool in ("az", "kubectl"):
        p = bindir / tool
        p.write_text(f"#!/bin/sh\nstart=$(date +%s.%N)\nsleep 0.4\necho {tool} $start $(date +%s.%N) >> {log}\n")
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    entries = "".join(f"- id: sub{i}\n  verify: az account show --subscription s{i}\n" for i in range(3))
    entries += "".join(f"- id: k{i}\n  verify: kubectl --context c{i} get nodes\n" for i in range(3))
    write_inventory(tmp_path, config, entries)
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
