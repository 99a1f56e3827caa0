"""Inventory and access: validation, find/show, pins in search, prerequisites, access exec."""
import json
import os
import socket
import sys
import threading
import time

import pytest

from recall import db, inventory
from recall.config import load_config
from recall.errors import PrerequisiteDown, RecallError
from tests.conftest import free_port, run_recall
from tests.world import stored_bytes


def inventory_text(vpn_port, script=""):
    return f"""\
- id: vpn
  kind: vpn
  name: corporate VPN
  check: tcp 127.0.0.1:{vpn_port}
  timeout: 1
  hint: connect the VPN client and retry
- id: aws-ops-prod
  kind: account
  environment: prod
  requires: [vpn]
  access:
    - source {script or '/dev/null'}
  verify: aws sts get-caller-identity
- id: ops-cluster
  kind: cluster
  aliases: [ops, platform cluster]
  environment: prod
  account: aws-ops-prod
  requires: [aws-ops-prod]
  tags: [kubernetes, eks]
  notes: the main EKS cluster for platform services
  access:
    - source {script or '/dev/null'}
    - kubectl config use-context ops-cluster
  verify: kubectl --context ops-cluster get nodes
"""


@pytest.fixture
def inv(tmp_path, make_world, listener):
    path = make_world(inventory=inventory_text(listener)).inventory
    inventory.forget_checks()
    return path


def _load():
    cfg = load_config()
    return cfg, inventory.load_inventory(cfg)


@pytest.mark.parametrize("text,line,words", [
    ("- id: a\n  requires: [b]\n", 2, "requires 'b' is not an inventory id"),
    ("- id: a\n  account: zz\n", 2, "account 'zz'"),
    ("- id: a\n  secrets: [nope]\n", 2, "secret 'nope' is not in the secrets files"),
    ("- id: a\n  requires: [b]\n- id: b\n  requires: [a]\n", 2, "cycle in 'requires': a → b → a"),
    ("- id: a\n  requires: [b]\n- id: b\n  verify: 'true'\n", 2, "requires 'b', which has no check"),
    ("- id: a\n  colour: red\n", 2, "unknown field 'colour'"),
    ("- id: a\n  check: rm -rf /tmp/x\n", 2, "not a read-only command"),
])
def test_a_bad_entry_names_file_and_line_when_used(tmp_path, make_world, text, line, words):
    make_world(inventory=text)
    _, entries = _load()
    with pytest.raises(RecallError) as err:
        inventory.get_entry(entries, "a")
    assert f"inventory.yaml:{line}" in str(err.value) and words in str(err.value)


# (a bad entry between good1 and good2, a name that names it, what its own error says); it starts at line 4
BAD_ENTRIES = [
    ("- kind: host\n  name: no id box\n", "no id box", "an entry needs an 'id'"),
    ("- id: 'has space'\n  aliases: [spacey]\n", "spacey", "an entry needs an 'id'"),
    ("- id: GOOD1\n  kind: host\n", "GOOD1", "'GOOD1' already names entry 'good1' (INV:1), in any case"),
    ("- just a scalar\n", "inventory.yaml:4", "each inventory entry is a mapping starting with '- id: …'"),
    ("- - a\n  - list\n", "inventory.yaml:4", "each inventory entry is a mapping"),
    ("- id: twin\n  aliases: [first]\n- id: twin\n  aliases: [second]\n", "second",
     "inventory id 'twin' is also at INV:4"),
    ("- id: clash\n  aliases: [ops, good2]\n", "ops", "'good2' already names entry 'good2' (INV:"),
    ("- id: shadow\n  aliases: [g1]\n", "shadow", "'g1' already names entry 'good1' (INV:1)"),
    ("- id: typo\n  aliases: [ops]\n  verfy: 'true'\n", "ops",            # issue 37 point 5
     "unknown field 'verfy' in an inventory entry — did you mean 'verify'?"),
    ("- id: 12\n", "inventory.yaml:4", "'id' must be a string"),
    # not YAML at all, within the entry: the file's other entries still load
    ("- id: dup\n  verify: 'true'\n  verify: 'false'\n", "dup", "INV:6:3: duplicate key 'verify' (first on line 5)"),
    ("- id: open   # a quote left open\n  verify: 'true\n", "open", "INV:5:11: unterminated single-quoted string"),
    ("- id: 'tabbed'\n\tverify: 'true'\n", "tabbed", "INV:5:1: tab used for indentation"),
    ("- id: &a anchored\n", "inventory.yaml:4", "INV:4:7: anchors ('&name') are not supported"),
    ("- id: nul\n  verify: \"true\\0x\"\n", "nul", "INV:5: 'verify' holds a NUL byte"),   # bash would run truex
]


@pytest.mark.parametrize("bad,name,says", BAD_ENTRIES, ids=[b.split("\n")[0] for b, _, _ in BAD_ENTRIES])
def test_a_bad_entry_breaks_only_itself(tmp_path, make_world, cli, bad, name, says):
    """A missing, malformed or repeated id, a scalar or a list for an entry, an alias that is another
    entry's id: every other entry is found, shown, verified and exec'd; naming the bad one (or one
    of its aliases) gives its own error with file:line (issue 36 point 5)."""
    path = make_world(inventory="- id: good1\n  aliases: [g1]\n  verify: 'true'\n" + bad
                                + "- id: good2\n  requires: [gate]\n  verify: 'true'\n- id: gate\n  check: 'true'\n").inventory
    inventory.forget_checks()
    code, out, err = cli("--json", "access", "find")
    found = {e["id"]: e for e in json.loads(out)}
    assert code == 0 and {"good1", "good2"} <= set(found) and "error" not in found["good2"], err
    assert len([e for e in found.values() if "error" in e]) == 1           # the bad one, listed with its error
    assert cli("access", "find")[1].count("\n  broken: ") == 1
    for good in ("good1", "g1", "good2"):
        code, out, err = cli("access", "show", good)
        assert code == 0 and out.startswith("Access: good"), err
    code, out, err = cli("access", "exec", "good2", "--", "echo", "reached")
    assert (code, out) == (0, "reached\n"), err
    code, out, _ = cli("--json", "verify", "good1", "good2")
    assert [e["commands"][0]["status"] for e in json.loads(out)["entries"]] == ["ok", "ok"]
    code, out, err = cli("access", "show", name)
    assert code == 1 and err.startswith(f"recall: {path}:"), err
    assert says.replace("INV", str(path)) in err and err.count("\n") == 1, err
    code, out, err = cli("access", "exec", name, "--", "echo", "reached")
    assert code == 1 and out == "" and says.replace("INV", str(path)) in err


def test_a_broken_prerequisite_stops_its_dependants_as_a_down_one_does(tmp_path, make_world, cli):
    """A prerequisite whose entry does not load cannot be checked: its dependants never run (before,
    a broken VPN entry counted as up, having no check left)."""
    path = make_world(inventory="- id: vpn\n  chekc: tcp 127.0.0.1:1\n- id: box\n  requires: [vpn]\n  verify: 'true'\n").inventory
    inventory.forget_checks()
    code, out, err = cli("access", "exec", "box", "--", "echo", "reached")
    assert (code, out) == (1, "") and err.startswith(f"recall: prerequisite 'vpn' cannot be checked: {path}:2: "
                                                     "unknown field 'chekc'"), err
    code, out, _ = cli("--json", "verify", "box")
    row = json.loads(out)["entries"][0]["commands"][0]
    assert row["status"] == "skipped" and row["detail"] == err[len("recall: "):].strip()


def test_a_prerequisite_with_nothing_to_check_is_never_taken_as_up(tmp_path, make_world, cli):
    """`requires: [vpn]` where vpn has a proof but no check ran the command as if the VPN were up:
    now the dependant runs nothing and says where to add the check; vpn itself, and an entry
    reached through a chain of requires ending in a check, still work."""
    marker = tmp_path / "ran"
    path = make_world(inventory="- id: vpn\n  verify: 'true'\n- id: box\n  requires: [vpn]\n  verify: 'true'\n"
                                "- id: gate\n  check: 'true'\n- id: acct\n  requires: [gate]\n"
                                "- id: db\n  requires: [acct]\n").inventory
    inventory.forget_checks()
    code, out, err = cli("access", "exec", "box", "--", "touch", str(marker))
    assert (code, out) == (1, "") and not marker.exists()
    assert err == (f"recall: {path}:4: entry 'box': requires 'vpn', which has no check, so recall cannot tell "
                   f"whether it is up — give 'vpn' ({path}:1) a 'check: tcp HOST:PORT' or a read-only command\n")
    code, out, _ = cli("--json", "verify", "box")
    assert json.loads(out)["entries"][0]["commands"][0]["status"] == "error"
    assert cli("access", "exec", "vpn", "--", "echo", "reached")[:2] == (0, "reached\n")
    assert cli("access", "exec", "db", "--", "echo", "reached")[:2] == (0, "reached\n")
    code, out, _ = cli("doctor")
    assert "NO  inventory entry box" in out and "which has no check" in out


def test_an_upgrade_applies_its_rules_to_an_inventory_an_older_recall_cached(tmp_path, make_world):
    """The entries are cached in the DB, keyed by the inventory and secrets files: after an upgrade
    adding the rule above, the cache the older recall wrote still let `access exec box` run."""
    import shutil
    import subprocess

    from tests.conftest import REPO
    old = tmp_path / "older"                       # the same recall without that rule, as before the upgrade
    shutil.copytree(REPO / "recall", old / "recall", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "recall.py", old)
    code = (old / "recall" / "inventory.py").read_text()
    rule = "if r in by_id and not (by_id[r].check or by_id[r].requires or by_id[r].error)):"
    assert code.count(rule) == 1
    (old / "recall" / "inventory.py").write_text(code.replace(rule, "if False):"))
    make_world(inventory="- id: vpn\n  verify: 'true'\n- id: box\n  requires: [vpn]\n  verify: 'true'\n")
    older = subprocess.run([sys.executable, str(old / "recall.py"), "access", "exec", "box", "--", "echo", "reached"],
                           capture_output=True, text=True, timeout=60)
    assert (older.returncode, older.stdout) == (0, "reached\n"), older.stderr
    now = run_recall("access", "exec", "box", "--", "echo", "reached")
    assert (now.returncode, now.stdout) == (1, "") and "requires 'vpn', which has no check" in now.stderr


def test_one_typo_in_requires_breaks_only_its_entry(inv, cli):
    """A typo in one entry's requires failed every access and verify of every entry."""
    text = inv.read_text() + "- id: lab-box\n  kind: host\n  requires: [vnp]\n  verify: tcp 127.0.0.1:1\n"
    inv.write_text(text)
    typo_line = text.splitlines().index("  requires: [vnp]") + 1
    code, out, err = cli("access", "show", "lab-box")
    assert code == 1 and err.startswith(f"recall: {inv}:{typo_line}: entry 'lab-box': requires 'vnp' is not "
                                        "an inventory id — did you mean 'vpn'?"), err
    code, out, err = cli("access", "show", "ops")
    assert code == 0 and out.startswith("Access: ops-cluster"), err
    code, out, err = cli("access", "exec", "vpn", "--", "echo", "reached")
    assert code == 0 and out == "reached\n", err
    code, out, err = cli("--json", "verify", "vpn", "lab-box")
    rows = {e["id"]: e["commands"][0] for e in json.loads(out)["entries"]}
    assert rows["lab-box"]["status"] == "error" and "did you mean 'vpn'?" in rows["lab-box"]["detail"]
    assert rows["vpn"]["status"] == "ok" and code == 1
    from recall.doctor import run_doctor
    checks = {c.name: c for c in run_doctor(extras=False)}
    assert not checks["inventory entry lab-box"].ok and "vnp" in checks["inventory entry lab-box"].detail
    assert "1 of 4 entries broken" in checks["inventory references"].detail


def test_an_unknown_field_names_the_closest_known_one(tmp_path, make_world):
    path = make_world(inventory="- id: a\n  kind: host\n  requries: [b]\n").inventory
    _, entries = _load()
    with pytest.raises(RecallError) as err:
        inventory.get_entry(entries, "a")
    assert str(err.value) == f"{path}:3: unknown field 'requries' in an inventory entry — did you mean 'requires'?"


def test_find_exact_then_words(inv):
    cfg, entries = _load()
    assert [e.id for e in inventory.find(entries, "platform cluster")][:1] == ["ops-cluster"]
    assert [e.id for e in inventory.find(entries, "OPS")][:1] == ["ops-cluster"]
    assert [e.id for e in inventory.find(entries, "eks")] == ["ops-cluster"]


def test_show_prints_the_access_block(inv, cli):
    code, out, _ = cli("access", "show", "ops-cluster")
    assert code == 0
    assert out.splitlines()[0] == "Access: ops-cluster (cluster · prod)"
    assert "  requires: aws-ops-prod" in out
    assert "  2. kubectl config use-context ops-cluster" in out
    assert "  verify: kubectl --context ops-cluster get nodes" in out
    assert out.rstrip().endswith("last verified: never")
    code, out, _ = cli("--json", "access", "show", "ops")
    data = json.loads(out)
    assert data["id"] == "ops-cluster" and data["verify"].startswith("kubectl")


def test_every_verb_takes_an_id_or_alias_in_any_case_and_a_typo_gets_the_closest_names(inv, cli, tmp_path):
    for name in ("OPS-CLUSTER", "Platform Cluster", "ops"):
        code, out, _ = cli("access", "show", name)
        assert (code, out.splitlines()[0]) == (0, "Access: ops-cluster (cluster · prod)")
    code, _, err = cli("access", "show", "ops-clustr")
    assert (code, err) == (1, "recall: no inventory entry 'ops-clustr' — did you mean: ops-cluster?\n")
    code, _, err = cli("access", "exec", "aws-ops", "--", "true")
    assert code == 1 and err.startswith("recall: no inventory entry 'aws-ops' — did you mean: aws-ops-prod")
    code, _, err = cli("access", "show", "qqqq")
    assert err == "recall: no inventory entry 'qqqq' — see 'recall access find QUERY'\n"
    code, out, _ = cli("verify", "--dry-run", "OPS")                # verify takes the alias too
    assert code == 0 and out.startswith("entry:ops-cluster ")


def test_an_empty_find_lists_every_entry(inv, cli):
    code, out, _ = cli("--json", "access", "find")
    assert code == 0 and [e["id"] for e in json.loads(out)] == ["vpn", "aws-ops-prod", "ops-cluster"]


def test_last_verified_is_shown(inv, cli):
    from recall import inventory
    cfg = load_config()
    con = db.connect(cfg.db_path)
    inventory.record_status(con, "entry:ops-cluster", "ok", "", "kubectl")
    con.execute("UPDATE verify_results SET at = at - 7300")
    _, out, _ = cli("access", "show", "ops-cluster")
    assert "last verified: ok 2h ago" in out


def test_query_naming_an_entry_pins_its_block_first(inv, cli):
    cli("index")
    code, out, _ = cli("search", "why is the Platform Cluster slow")
    assert out.startswith("Access: ops-cluster")
    code, out, _ = cli("--json", "search", "ops-cluster nodes")
    assert [a["id"] for a in json.loads(out)["access"]] == ["ops-cluster"]
    code, out, _ = cli("--json", "search", "devops pipeline")      # 'ops' only as part of a word
    assert json.loads(out)["access"] == []


def _down_within(seconds: float, entry_id: str) -> tuple:
    """(the PrerequisiteDown message, entries): checked from scratch, failing within `seconds`."""
    inventory.forget_checks()
    _, entries = _load()
    started = time.monotonic()
    with pytest.raises(PrerequisiteDown) as err:
        inventory.ensure_prerequisites(entries, inventory.get_entry(entries, entry_id))
    assert time.monotonic() - started < seconds
    return str(err.value), entries


def test_prerequisite_up_then_down_fails_fast_with_the_sentence(inv):
    cfg, entries = _load()
    ops = inventory.get_entry(entries, "ops-cluster")
    inventory.ensure_prerequisites(entries, ops)             # listening: fine
    closed = free_port()
    inv.write_text(inventory_text(closed))
    err, _ = _down_within(1.5, "ops-cluster")
    assert err == "prerequisite 'vpn' is down: connect the VPN client and retry"


@pytest.fixture
def silent_port():
    """A listener whose accept queue is full: a connect gets no answer, so the timeout decides."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fillers = []
    for _ in range(8):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fillers.append(c)
    time.sleep(0.1)
    yield port
    for c in fillers:
        c.close()
    srv.close()


def test_silent_prerequisite_fails_within_its_timeout_plus_half_a_second(tmp_path, make_world, silent_port):
    make_world(inventory=f"- id: vpn\n  check: tcp 127.0.0.1:{silent_port}\n  timeout: 1\n"
                         f"- id: h\n  requires: [vpn]\n  verify: 'true'\n")
    err, _ = _down_within(1.5, "h")
    assert "did not answer within 1s" in err


def test_a_tcp_check_without_timeout_gets_three_seconds(tmp_path, make_world, listener, monkeypatch):
    make_world(inventory=f"- id: vpn\n  check: tcp 127.0.0.1:{listener}\n- id: h\n  requires: [vpn]\n"
                         f"- id: cmd\n  check: kubectl get nodes\n")
    inventory.forget_checks()
    cfg, entries = _load()
    assert inventory.check_timeout(inventory.get_entry(entries, "vpn")) == 3.0
    assert inventory.check_timeout(inventory.get_entry(entries, "cmd")) == 20.0
    used = []
    real = inventory.tcp_check
    monkeypatch.setattr(inventory, "tcp_check", lambda target, timeout: used.append(timeout) or real(target, timeout))
    inventory.ensure_prerequisites(entries, inventory.get_entry(entries, "h"))
    assert used == [3.0]


@pytest.mark.parametrize("kubectl, timeout, said", [
    ("exit 3", 5, "'kubectl get nodes' exit 3"),
    (None, 5, "'kubectl get nodes' could not run: No such file or directory"),
    ("exec /bin/sleep 5", 0.5, "'kubectl get nodes' did not finish within 0.5s")])
def test_a_command_check_is_one_probe_said_alike_by_access_and_doctor(tmp_path, make_world, cli, monkeypatch,
                                                                      kubectl, timeout, said):
    """access exec and doctor run a prerequisite's command the same way and say its failure in the same
    words: what ran and what came of it, for an agent to pass on."""
    from recall.doctor import run_doctor
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if kubectl:
        (bindir / "kubectl").write_text(f"#!/bin/sh\n{kubectl}\n")
        (bindir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))          # this kubectl, or none
    make_world(inventory=f"- id: vpn\n  check: kubectl get nodes\n  timeout: {timeout}\n"
                         "- id: h\n  requires: [vpn]\n")
    code, out, err = cli("access", "exec", "h", "--", "true")
    assert (code, out, err) == (69, "", f"recall: prerequisite 'vpn' is down: {said}\n")
    doctor = {c.name: (c.ok, c.detail) for c in run_doctor(extras=False)}
    assert doctor["prerequisite vpn"] == (False, f"down: {said}")


@pytest.mark.parametrize("tail, up", [("wait", False), ("exit 0", True)])
def test_what_a_command_check_starts_ends_with_it(tmp_path, make_world, monkeypatch, tail, up):
    """A check's tool that starts a helper (a kubectl credential plugin) and hangs, or exits and
    leaves it: the helper was left running after access exec returned (subprocess.run killed only
    the tool)."""
    from recall.db.pids import alive
    bindir, pid_file = tmp_path / "bin", tmp_path / "helper.pid"
    bindir.mkdir()
    (bindir / "kubectl").write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pid_file}\n{tail}\n")
    (bindir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    make_world(inventory="- id: vpn\n  check: kubectl get nodes\n  timeout: 0.5\n- id: h\n  requires: [vpn]\n")
    _cfg, entries = _load()
    assert inventory.check_one(inventory.get_entry(entries, "vpn"))[0] is up
    helper = int(pid_file.read_text())
    end = time.monotonic() + 3
    while alive(helper) and time.monotonic() < end:
        time.sleep(0.05)
    left = alive(helper)
    if left:
        os.kill(helper, 9)
    assert not left


def test_a_host_name_is_resolved_and_connected(tmp_path, config, listener):
    up, detail = inventory.tcp_check(f"tcp localhost:{listener}", 2)
    assert up, detail


@pytest.fixture
def dns_unreachable(monkeypatch):
    """Stand-in for an unreachable DNS server (none can run here): resolving *.unreachable.test
    blocks, as glibc does through its retries, until the test ends (an address-only lookup never
    asks DNS, so it fails at once as for real). Other names resolve for real."""
    real, release = socket.getaddrinfo, threading.Event()

    def getaddrinfo(host, *args, flags=0, **kwargs):
        if str(host).endswith(".unreachable.test") and not flags & socket.AI_NUMERICHOST:
            release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, flags=flags, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield
    release.set()


def test_a_hanging_name_resolution_is_bounded_by_the_timeout(tmp_path, make_world, dns_unreachable):
    make_world(inventory="- id: vpn\n  check: tcp vpn-gw.unreachable.test:443\n  timeout: 0.5\n"
                         "  hint: connect the VPN client and retry\n- id: h\n  requires: [vpn]\n")
    err, entries = _down_within(1.0, "h")
    assert err == "prerequisite 'vpn' is down: connect the VPN client and retry"
    assert inventory.check_one(inventory.get_entry(entries, "vpn")) == (
        False, "vpn-gw.unreachable.test did not resolve within 0.5s")


def test_prerequisite_checked_once_per_process(inv, monkeypatch):
    cfg, entries = _load()
    calls = []
    real = inventory.tcp_check
    monkeypatch.setattr(inventory, "tcp_check", lambda *a: calls.append(a) or real(*a))
    for _ in range(3):
        inventory.ensure_prerequisites(entries, inventory.get_entry(entries, "ops-cluster"))
    assert len(calls) == 1


def test_cli_exit_69_when_down(inv, tmp_path):
    inv.write_text(inventory_text(free_port()))
    r = run_recall("access", "exec", "ops-cluster", "--", "true")
    assert r.returncode == 69
    assert r.stderr == "recall: prerequisite 'vpn' is down: connect the VPN client and retry\n"


def test_exec_sets_up_env_masks_exported_tokens_and_never_switches_global_state(tmp_path, make_world, listener):
    """The setup's exports reach the command, masked; `kubectl config use-context` never runs: a
    command whose kubectl gets --context in its place runs, any other runs nothing."""
    script = tmp_path / "set_aws_ops_prod.sh"
    token = "FwoGZXIvYXdzEXAMPLEsessiontoken0123456789"
    script.write_text(f"export AWS_PROFILE=ops-prod\nexport AWS_SESSION_TOKEN={token}\necho setting up >&2\n")
    script.chmod(0o600)
    make_world(inventory=inventory_text(listener, script))
    inventory.forget_checks()
    marker = tmp_path / "kubectl-called"
    bin_dir = tmp_path / "bin"          # a stand-in kubectl that records every call
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f'#!/bin/sh\necho "$@" >> {marker}\necho "AWS_PROFILE=$AWS_PROFILE"\n')
    kubectl.chmod(0o755)
    path_env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    show = ("import os; print(os.environ['AWS_PROFILE'], os.environ['AWS_SESSION_TOKEN']);"
            "print(os.environ.get('RECALL_HOME'))")
    r = run_recall("access", "exec", "aws-ops-prod", "--", sys.executable, "-c", show, env=path_env)
    assert r.returncode == 0, r.stderr
    assert token not in r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "ops-prod [recall:aws-ops-prod:AWS_SESSION_TOKEN]"
    assert r.stdout.splitlines()[1] == "None"
    assert "setting up" in r.stderr
    r = run_recall("access", "exec", "ops-cluster", "--", sys.executable, "-c", show, env=path_env)
    assert (r.returncode, r.stdout) == (1, "") and "setting up" not in r.stderr       # nothing ran
    assert r.stderr.startswith("recall: setup step not allowed (setup.global-state): "
                               "'kubectl config use-context ops-cluster': "), r.stderr
    assert not marker.exists()
    r = run_recall("access", "exec", "ops-cluster", env=path_env)      # the verify command only
    assert (r.returncode, r.stdout) == (0, "AWS_PROFILE=ops-prod\n"), r.stderr
    r = run_recall("access", "exec", "ops-cluster", "--", "kubectl get pods | tr a-z A-Z", env=path_env)
    assert (r.returncode, r.stdout) == (0, "AWS_PROFILE=OPS-PROD\n"), r.stderr
    assert marker.read_text() == "--context ops-cluster get nodes\n--context ops-cluster get pods\n"
    log = run_recall("--json", "secret", "log", "ops-cluster")
    rows = json.loads(log.stdout)
    assert [(row["verdict"], row["exit_code"]) for row in rows[-3:]] == [
        ("setup refused", None), ("ran", 0), ("ran", 0)], rows
    assert token not in log.stdout


def test_exec_without_command_runs_verify(tmp_path, make_world, listener):
    make_world(inventory=f"- id: h\n  verify: {sys.executable} -c \"print('verified')\"\n")
    r = run_recall("access", "exec", "h")
    assert r.returncode == 0 and r.stdout == "verified\n"


def test_access_exec_and_verify_judge_the_setup_by_one_rule(tmp_path):
    """One decision for whether an entry's setup can run as promised (access.judge_setup): the steps
    the guard allows run; the first it denies is the refusal, worded as verify words it."""
    from recall.access import judge_setup
    from recall.guard import setup_verdict
    own = tmp_path / "a.sh"
    own.write_text("export A=2\n")
    own.chmod(0o600)
    steps = [f"source {own}", "source a.sh", "kubectl config use-context prod", "az account set -s 1",
             "export A=1", "export X=$(touch /tmp/ran)", "kubectl get nodes"]
    setup = judge_setup(inventory.Entry(id="x", access=steps), "true")
    assert setup.run == [f"source {own}", "export A=1"]
    assert setup.run == [s for s in steps if setup_verdict(s).allow]
    assert [v.rule for _, v in setup.judged] == [setup_verdict(s).rule for s in steps]
    assert setup.refusal == ("setup step not allowed (setup.source-path): 'source a.sh': "
                             + setup_verdict("source a.sh").reason)
    assert judge_setup(inventory.Entry(id="x", access=steps[:1]), "true").refusal == ""


@pytest.mark.parametrize("line,by_path,stood_for", [
    ("kubectl get pods | grep web", False, True),           # the shell function gives it --context ops
    ("kubectl get pods && echo done", False, True),
    ("echo $(kubectl get ns) && { kubectl get pods; }", False, True),
    ("kubectl --context other get ns", False, True),        # a context of its own: the current one is not read
    ("/usr/bin/kubectl --context ops get nodes", False, True),
    ("kubectl --context ops get nodes", True, True),        # verify: the tool runs by its path, context named
    ("echo hi", False, False),                              # no kubectl: helm, scripts … read the current one
    ("sh -c 'kubectl get pods'", False, False),             # not this shell's command: no function there
    ("kubectl get pods -o name | xargs kubectl describe", False, False),
    ("/usr/bin/kubectl get nodes", False, False),           # by its path: the function is not called
    ("kubectl get nodes", True, False),
    ("kubectl get 'pods", False, False),
])
def test_a_use_context_step_is_stood_for_only_when_every_kubectl_gets_a_context(line, by_path, stood_for):
    from recall.access import judge_setup
    entry = inventory.Entry(id="ops", access=["kubectl config use-context ops"])
    setup = judge_setup(entry, line, by_path=by_path)
    assert setup.run == []                                  # it never runs either way
    assert (setup.refusal == "") is stood_for, setup.refusal
    assert setup.judged[0][1].rule == ("setup.context" if stood_for else "setup.global-state")


def test_sensitive_inline_values_are_hidden_in_show_and_search(tmp_path, make_world, cli, listener):
    token = "ghp_1nl1neT0kenValue9"
    make_world(inventory=f"""\
- id: gh-box
  kind: host
  access:
    - export GITHUB_TOKEN={token}
    - export AWS_PROFILE=ops-prod DB_PASSWORD='pw with spaces'
    - export NPM_TOKEN=$(pass show npm)
  verify: gh auth status
""")
    code, out, _ = cli("access", "show", "gh-box")
    assert code == 0 and token not in out and "pw with spaces" not in out
    assert "  1. export GITHUB_TOKEN=[recall:gh-box:GITHUB_TOKEN]\n" in out
    assert "  2. export AWS_PROFILE=ops-prod DB_PASSWORD=[recall:gh-box:DB_PASSWORD]\n" in out
    assert "  3. export NPM_TOKEN=$(pass show npm)\n" in out       # where it comes from, not a value
    code, out, _ = cli("--json", "access", "show", "gh-box")
    data = json.loads(out)
    assert token not in out and "pw with spaces" not in out
    assert data["access"][0] == "export GITHUB_TOKEN=[recall:gh-box:GITHUB_TOKEN]"
    assert "1. export GITHUB_TOKEN=[recall:gh-box:GITHUB_TOKEN]" in data["block"]
    cli("index")
    code, out, _ = cli("search", "how do I reach gh-box")
    assert out.startswith("Access: gh-box") and token not in out
    code, out, _ = cli("--json", "search", "gh-box")
    assert token not in out and json.loads(out)["access"][0]["access"][0] == "export GITHUB_TOKEN=[recall:gh-box:GITHUB_TOKEN]"


@pytest.mark.e2e
def test_access_exec_over_a_real_sshd_masks_an_exported_token(tmp_path, make_world):
    from tests.sshd import SSHD, start_sshd, stop_sshd
    if SSHD is None:
        pytest.skip("openssh-server is not installed (.ci/install installs it)")
    server = start_sshd(tmp_path / "sshd", accept_env="DEPLOY_API_TOKEN")
    try:
        token = "dpl-7f3a9b2c5d1e0000-secret"
        script = tmp_path / "set_deploy.sh"
        script.write_text(f"export DEPLOY_API_TOKEN={token}\n")
        make_world(inventory=f"""\
- id: testbox
  kind: host
  access:
    - source {script}
  verify: ssh -F {server.client_config} testbox hostname
""")
        r = run_recall("access", "exec", "testbox")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == socket.gethostname()
        r = run_recall("access", "exec", "testbox", "--", "ssh", "-F", str(server.client_config),
                       "-o", "SendEnv=DEPLOY_API_TOKEN", "testbox", "echo remote:$DEPLOY_API_TOKEN; exit 5")
        assert r.returncode == 5
        assert r.stdout == "remote:[recall:testbox:DEPLOY_API_TOKEN]\n"
        assert token not in r.stderr
    finally:
        stop_sshd(server)


def test_an_entry_whose_setup_sets_a_literal_secret_is_never_cached_in_the_db(make_world):
    """`export DB_PWD=…` (any value access exec would mask, not only *TOKEN* names) keeps the entry out
    of the DB's inventory cache, so the literal is in no DB byte; a harmless entry is cached."""
    from recall import db
    from recall.config import load_config
    literal = "Pw-9xq7Lm2Zr4"
    path = make_world(inventory=f"- id: box\n  access:\n    - export DB_PWD={literal}\n    - export AWS_REGION=eu-west-1\n"
                                "- id: other\n  access:\n    - export AWS_PROFILE=ops\n").inventory
    cfg = load_config()
    con = db.connect(cfg.db_path)
    assert [e.id for e in inventory.load_inventory(cfg, con)] == ["box", "other"]
    con.close()
    stored = b"".join(stored_bytes(p) for p in cfg.db_path.parent.glob(cfg.db_path.name + "*"))
    assert literal.encode() not in stored
    path.write_text("- id: other\n  access:\n    - export AWS_PROFILE=ops\n")
    con = db.connect(cfg.db_path)
    inventory.load_inventory(cfg, con)
    assert db.get_meta(con, "inventory_cache") is not None          # the control: a clean file is cached


def test_an_entry_with_a_user_password_or_bearer_token_inline_is_never_cached(make_world):
    """`-u user:password` or a bearer token in verify (or in a denied check, quoted by the entry's
    error) was cached in the DB's inventory cache in plain text, though shown as [recall:…]."""
    from recall import db
    from recall.config import load_config
    literal = "Pw-9xq7Lm2Zr4"
    for inline in (f"check: curl -s -X POST -u admin:{literal} https://vpn.example.com/x",    # broken
                   f"verify: curl -s -u admin:{literal} https://vpn.example.com/x",          # working
                   f"verify: 'curl -s -H \"Authorization: Bearer {literal}\" https://vpn.example.com/x'"):
        make_world(inventory=f"- id: vpn\n  {inline}\n- id: other\n  verify: 'true'\n")
        cfg = load_config()
        con = db.connect(cfg.db_path)
        assert [e.id for e in inventory.load_inventory(cfg, con)] == ["vpn", "other"]
        con.close()
        stored = b"".join(stored_bytes(p) for p in cfg.db_path.parent.glob(cfg.db_path.name + "*"))
        assert literal.encode() not in stored, inline
        r = run_recall("access", "show", "vpn")
        assert r.returncode == inline.startswith("check") and literal not in r.stdout + r.stderr


def test_a_bad_secrets_entry_stops_sync_as_a_whole_and_the_stored_secrets_keep_working(make_world, cli):
    """Issue 36 point 5 for the secrets file: a sync that skipped the bad entry would remove its secret
    from the vault, so sync refuses as a whole with file:line, changing nothing; find, show, exec and
    the inventory entries that link stored secrets keep working meanwhile."""
    pytest.importorskip("cryptography")
    secrets = make_world(secrets='- id: box-token\n  value: "b0x-t0ken-value-4242"\n- id: other-token\n  value: "0ther-t0ken-v4lue"\n',
                         inventory="- id: box\n  secrets: [box-token]\n  verify: 'true'\n").secrets
    assert cli("secret", "sync")[0] == 0
    sealed = secrets.read_text()
    secrets.write_text(sealed + "- just a scalar\n")
    code, out, err = cli("secret", "sync")
    assert code == 1 and err.startswith(f"recall: {secrets}:5: each secret is a mapping"), err
    assert secrets.read_text() == sealed + "- just a scalar\n"
    code, out, err = cli("--json", "secret", "find", "token")
    assert code == 0 and {s["id"] for s in json.loads(out)} == {"box-token", "other-token"}, err
    assert cli("secret", "show", "other-token")[0] == 0
    r = run_recall("access", "exec", "box", "--", "sh", "-c", "echo $BOX_TOKEN")
    assert (r.returncode, r.stdout) == (0, "[recall:box-token]\n"), r.stderr
    code, out, err = cli("access", "show", "box")
    assert code == 0 and "secrets: box-token" in out, err
