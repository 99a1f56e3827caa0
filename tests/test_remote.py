"""Remote notes over a real sshd on 127.0.0.1: install, index there, federated search, read, down."""
import json
import os
import pwd
import socket
import time

import pytest

from recall.notes.search import Hit, SearchResult
from recall.remote import federate
from tests.conftest import free_port, run_recall, write_tree
from tests.world import build, config_path

REMOTE_NOTES = {
    "boxnotes/kafka-rebalance.md": """\
        # Kafka rebalance on the analytics box

        The consumer group analytics-etl rebalanced every five minutes until we raised
        max.poll.interval.ms on kafka-an-01.example.com.
        """,
    "boxnotes/INC-20001.md": """\
        # INC-20001 analytics disk

        The analytics box ran out of inodes.
        """,
}


def _hit(rel, source="notes"):
    return Hit(source=source, relpath=rel, path=rel, line=1, end_line=2, breadcrumb=rel, snippet="", score=1.0,
               date="2025-01-01")


def test_the_bundles_launcher_is_the_checkouts_recall_py():
    """An installed recall has no recall.py to copy: the bundle writes remote.LAUNCHER, which must
    stay the checkout's launcher word for word."""
    import io
    import tarfile

    from recall import remote
    from tests.conftest import REPO
    assert remote.LAUNCHER == (REPO / "recall.py").read_text()
    data, count = remote._bundle()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        assert tar.extractfile("recall.py").read().decode() == remote.LAUNCHER
    assert len(names) == count and "recall/cli/__init__.py" in names


def test_federate_merges_by_reciprocal_rank():
    result = SearchResult(query="q", mode="auto", route="keyword", hits=[_hit("a.md"), _hit("b.md")])
    federate(result, {"box": [{"relpath": "box:x.md", "source": "box"}, {"relpath": "box:y.md", "source": "box"}]}, 3)
    rels = [h.relpath for h in result.hits]
    assert len(rels) == 3 and set(rels[:2]) == {"a.md", "box:x.md"}


@pytest.fixture
def box(tmp_path):
    from tests.sshd import SSHD, start_sshd, stop_sshd
    if SSHD is None:
        pytest.skip("openssh-server is not installed (.ci/install installs it)")
    server = start_sshd(tmp_path / "sshd")
    remote_root = tmp_path / "remote"
    write_tree(remote_root, REMOTE_NOTES)
    build(remote_root, notes=remote_root / "boxnotes", source="box", config=f"home: {remote_root / 'state'}\n")
    yield server, remote_root
    stop_sshd(server)


def _local_config(tmp_path, config, server, remote_root, *, host="testbox", timeout=20):
    config(f"remotes:\n  - name: box\n    host: {host}\n    path: {remote_root / 'recall'}\n"
           f"    config: {config_path(remote_root)}\n    ssh_config: {server.client_config}\n"
           f"    timeout: {timeout}\n")


@pytest.mark.e2e
def test_install_index_search_read_over_ssh(tmp_path, config, box):
    server, remote_root = box
    r = run_recall("remote", "install", "testbox", "--path", str(remote_root / "recall"),
                   "--ssh-config", server.client_config)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"installed recall on testbox at {remote_root / 'recall'}")
    assert (remote_root / "recall" / "recall.py").exists() and (remote_root / "recall" / "recall" / "cli" / "__init__.py").exists()
    assert not (remote_root / "recall" / "tests").exists()
    r = run_recall("remote", "install", "testbox", "--path", str(remote_root / "recall"),
                   "--ssh-config", server.client_config)
    assert r.returncode == 0 and r.stdout.startswith("updated")
    _local_config(tmp_path, config, server, remote_root)
    r = run_recall("index", "--remote", "box")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("indexed on box: 2 new")
    assert (remote_root / "state" / "recall.db").exists()
    assert run_recall("index").returncode == 0
    r = run_recall("--json", "search", "INC-20001")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["hits"][0]["relpath"] == "box:INC-20001.md" and data["hits"][0]["source"] == "box"
    r = run_recall("--json", "search", "INC-10963")
    assert json.loads(r.stdout)["hits"][0]["relpath"] == "incidents/2023/INC-10963-db-failover.md"
    r = run_recall("search", "max.poll.interval.ms")
    assert "box:kafka-rebalance.md:1" in r.stdout
    r = run_recall("read", "box:kafka-rebalance.md:3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("box:kafka-rebalance.md lines 1-4")
    assert "3│ The consumer group analytics-etl" in r.stdout


@pytest.mark.e2e
def test_a_remote_that_is_down_costs_its_timeout_and_one_line(tmp_path, config, box):
    server, remote_root = box
    dead_cfg = tmp_path / "dead_ssh_config"
    dead_cfg.write_text(server.client_config.read_text().replace(f"Port {server.port}", f"Port {free_port()}"))
    config(f"remotes:\n  - name: box\n    host: testbox\n    path: {remote_root / 'recall'}\n"
           f"    ssh_config: {dead_cfg}\n    timeout: 3\n")
    assert run_recall("index").returncode == 0
    r = run_recall("search", "INC-10963")
    assert r.returncode == 0
    assert r.stdout.startswith("1. incidents/2023/INC-10963-db-failover.md")
    problems = [l for l in r.stderr.splitlines() if "box" in l]
    assert len(problems) == 1 and problems[0].startswith("recall: remote 'box'")


@pytest.mark.e2e
def test_remote_behind_a_prerequisite_is_checked_first(make_world, box):
    server, remote_root = box
    make_world(inventory=f"- id: vpn\n  check: tcp 127.0.0.1:{free_port()}\n  timeout: 1\n  hint: connect the VPN client and retry\n"
                         f"- id: testbox\n  kind: host\n  requires: [vpn]\n",
               config=f"remotes:\n  - name: box\n    host: testbox\n    path: {remote_root / 'recall'}\n"
                      f"    ssh_config: {server.client_config}\n")
    assert run_recall("index").returncode == 0
    r = run_recall("search", "INC-10963")
    assert r.returncode == 0 and "prerequisite 'vpn' is down: connect the VPN client and retry" in r.stderr
    r = run_recall("read", "box:kafka-rebalance.md")
    assert r.returncode == 69


def _install(server, path, host="testbox", ssh_config=None):
    r = run_recall("remote", "install", host, "--path", str(path), "--ssh-config", ssh_config or server.client_config)
    assert r.returncode == 0, r.stderr
    return r


def _url_only_ssh_config(tmp_path, server):
    """An ssh -F file with the key and known host but no HostName, Port or User: the url must say them."""
    path = tmp_path / "url_ssh_config"
    path.write_text("Host *\n" + "".join(line + "\n" for line in server.client_config.read_text().splitlines()
                                          if line.strip().split(" ")[0] in
                                          ("IdentityFile", "IdentitiesOnly", "UserKnownHostsFile",
                                           "StrictHostKeyChecking", "BatchMode")))
    return path


@pytest.mark.e2e
def test_queries_and_read_paths_reach_the_remote_as_plain_text(tmp_path, config, box, isolated_home):
    server, remote_root = box
    odd = "odd $(cd;touch owned-a) `cd;touch owned-b`; cd; touch owned-c.md"
    (remote_root / "boxnotes" / odd).write_text("# Odd name\n\nThe zanzibar runbook.\n")
    _install(server, remote_root / "recall")
    _local_config(tmp_path, config, server, remote_root)
    assert run_recall("index", "--remote", "box").returncode == 0
    assert run_recall("index").returncode == 0
    marks = tmp_path / "marks"
    marks.mkdir()
    for query in (f"~/$(touch${{IFS}}{marks}/q1)", f"`touch {marks}/q2`", f"analytics; touch {marks}/q3",
                  f"analytics $(touch {marks}/q4)", f"analytics && touch {marks}/q5 #"):
        r = run_recall("--json", "search", query)
        assert r.returncode == 0, r.stderr
        data = json.loads(r.stdout)
        assert data["notices"] == [], query
        if "analytics" in query:    # the words around the shell syntax were searched on the remote
            assert any(h["relpath"].startswith("box:") for h in data["hits"]), query
    r = run_recall("read", f"box:~/$(touch${{IFS}}{marks}/r1)")
    assert r.returncode == 1 and f"~/$(touch${{IFS}}{marks}/r1)" in r.stderr
    r = run_recall("read", f"box:`touch {marks}/r2`.md")
    assert r.returncode == 1 and f"`touch {marks}/r2`.md" in r.stderr
    r = run_recall("read", f"box:{odd}:3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"box:{odd} lines 1-3") and "The zanzibar runbook." in r.stdout
    assert list(marks.iterdir()) == []
    assert not list(isolated_home.glob("owned-*"))


@pytest.mark.e2e
def test_install_at_the_default_path_then_again_updates(tmp_path, config, box, isolated_home):
    """The sshd session's HOME is this test's sandboxed home, so ~/recall lands there."""
    server, remote_root = box
    for word in ("installed", "updated"):
        r = run_recall("remote", "install", "testbox", "--ssh-config", server.client_config)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"{word} recall on testbox at {isolated_home / 'recall'}:")
    assert (isolated_home / "recall" / "recall.py").exists()
    (isolated_home / "box.yaml").write_text(config_path(remote_root).read_text())
    config(f"remotes:\n  - name: box\n    host: testbox\n    path: ~/recall\n    config: ~/box.yaml\n"
           f"    ssh_config: {server.client_config}\n")
    r = run_recall("index", "--remote", "box")
    assert r.returncode == 0 and r.stdout.startswith("indexed on box: 2 new"), r.stderr
    assert run_recall("index").returncode == 0
    r = run_recall("search", "INC-20001")
    assert "box:INC-20001.md:1" in r.stdout, r.stdout + r.stderr


@pytest.mark.e2e
def test_install_by_inventory_id_connects_to_its_ssh_url(tmp_path, make_world, box, listener):
    server, remote_root = box
    user = pwd.getpwuid(os.getuid()).pw_name
    inv = (f"- id: vpn\n  check: tcp 127.0.0.1:{listener}\n"
           f"- id: analytics-box\n  kind: host\n  requires: [vpn]\n"
           f"  url: ssh://{user}@127.0.0.1:{server.port}\n")
    ssh_config = _url_only_ssh_config(tmp_path, server)
    make_world(inventory=inv)
    r = _install(server, remote_root / "recall", host="analytics-box", ssh_config=ssh_config)
    assert r.stdout.startswith(f"installed recall on analytics-box at {remote_root / 'recall'}:")
    assert (remote_root / "recall" / "recall.py").exists()
    make_world(inventory=inv, config=f"remotes:\n  - name: box\n    host: analytics-box\n"
                                     f"    path: {remote_root / 'recall'}\n    config: {config_path(remote_root)}\n"
                                     f"    ssh_config: {ssh_config}\n")
    assert run_recall("index", "--remote", "box").returncode == 0
    assert run_recall("index").returncode == 0
    r = run_recall("search", "INC-20001")
    assert "box:INC-20001.md:1" in r.stdout, r.stdout + r.stderr


@pytest.mark.e2e
def test_install_behind_a_vpn_that_is_down_never_runs_ssh(tmp_path, make_world):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f"#!/bin/sh\ntouch {tmp_path / 'ssh-ran'}\nexit 255\n")
    (bin_dir / "ssh").chmod(0o755)
    make_world(inventory=f"- id: vpn\n  check: tcp 127.0.0.1:{free_port()}\n  timeout: 1\n"
                         f"  hint: connect the VPN client and retry\n"
                         f"- id: analytics-box\n  kind: host\n  requires: [vpn]\n  url: ssh://127.0.0.1:{free_port()}\n")
    r = run_recall("remote", "install", "analytics-box", env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert r.returncode == 69
    assert r.stderr.strip() == "recall: prerequisite 'vpn' is down: connect the VPN client and retry"
    assert not (tmp_path / "ssh-ran").exists()


@pytest.mark.parametrize("url", ["ssh://127.0.0.1:notaport", "ssh://:22", "ssh://127.0.0.1:99999"])
def test_an_ssh_url_ssh_cannot_use_is_named_at_its_line(make_world, url):
    inv = make_world(inventory=f"- id: other\n  kind: host\n- id: analytics-box\n  kind: host\n  url: {url}\n").inventory
    r = run_recall("remote", "install", "analytics-box")
    assert r.returncode == 1
    assert r.stderr.startswith(f"recall: {inv}:3: inventory entry 'analytics-box' has url"), r.stderr
    assert "ssh://[user@]host[:port]" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.e2e
def test_install_rejects_a_remote_python_older_than_3_9(tmp_path, config):
    from tests.sshd import SSHD, start_sshd, stop_sshd
    if SSHD is None:
        pytest.skip("openssh-server is not installed (.ci/install installs it)")
    old = tmp_path / "oldpython"
    old.mkdir()
    (old / "python3").write_text("#!/bin/sh\necho 'Python 3.6.9'\n")
    (old / "python3").chmod(0o755)
    server = start_sshd(tmp_path / "sshd", env={"PATH": f"{old}:/usr/bin:/bin"})
    try:
        r = run_recall("remote", "install", "testbox", "--path", str(tmp_path / "there"),
                       "--ssh-config", server.client_config)
        assert r.returncode == 1
        assert r.stderr.startswith("recall: testbox has Python 3.6.9; recall needs Python ≥ 3.9 there")
        assert not (tmp_path / "there").exists()
    finally:
        stop_sshd(server)


@pytest.mark.e2e
def test_hanging_remotes_are_asked_in_parallel_and_each_named_once(tmp_path, config, box):
    """Two listeners that accept and never speak ssh, and a real sshd whose recall never answers."""
    server, remote_root = box
    slow = remote_root / "slow"
    slow.mkdir()
    (slow / "recall.py").write_text("import time\ntime.sleep(10)\n")
    mutes, text = [], ""
    try:
        for name in ("mute1", "mute2"):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(4)
            mutes.append(sock)
            cfg = tmp_path / f"{name}_ssh_config"
            cfg.write_text(server.client_config.read_text().replace(f"Port {server.port}",
                                                                    f"Port {sock.getsockname()[1]}"))
            text += f"  - name: {name}\n    host: testbox\n    ssh_config: {cfg}\n    timeout: 2\n"
        text += f"  - name: sleepy\n    host: testbox\n    path: {slow}\n    ssh_config: {server.client_config}\n" \
                f"    timeout: 2\n"
        config("remotes:\n" + text)
        assert run_recall("index").returncode == 0
        started = time.monotonic()
        r = run_recall("search", "INC-10963")
        elapsed = time.monotonic() - started
    finally:
        for sock in mutes:
            sock.close()
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("1. incidents/2023/INC-10963-db-failover.md")
    for name in ("mute1", "mute2", "sleepy"):
        lines = [l for l in r.stderr.splitlines() if f"'{name}'" in l]
        assert len(lines) == 1 and lines[0].startswith(f"recall: remote '{name}'"), r.stderr
    assert elapsed < 2 + 1.5, f"three 2 s remotes took {elapsed:.1f}s: asked one after another?"


def _fake_ssh(tmp_path, answer: str) -> dict:
    """An `ssh` first on PATH that prints `answer` as the remote recall's stdout: the env to run with."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "answer").write_text(answer)
    (bin_dir / "ssh").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >>{tmp_path / 'ssh-argv'}\ncat {tmp_path / 'answer'}\n")
    (bin_dir / "ssh").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


HIT_JSON = {"relpath": "r.md", "path": "/r.md", "line": 1, "end_line": 2, "breadcrumb": "R", "snippet": "zanzibar",
            "highlights": [[0, 8]], "score": 1.0, "date": "2025-01-01"}


@pytest.mark.parametrize("answer", [
    "[1, 2]", '{"hits": [1]}', '{"hits": [{}]}', '{"hits": {"a": 1}}', '{"hits": "xyz"}',
    json.dumps({"hits": [{**HIT_JSON, "line": "1"}]}), json.dumps({"hits": [{**HIT_JSON, "snippet": ["zanzibar"]}]}),
    "[" * 100_000 + "]" * 100_000], ids=lambda answer: answer[:24])     # short ids: the test's id is in its env
def test_a_remote_answering_a_wrong_shape_is_one_line_for_search_read_and_index(tmp_path, config, answer):
    config("remotes:\n  - name: box\n    host: testbox\n    path: ~/recall\n")
    env = _fake_ssh(tmp_path, answer)
    assert run_recall("index").returncode == 0
    r = run_recall("search", "INC-10963", env=env)
    assert r.returncode == 0 and r.stdout.startswith("1. incidents/2023/INC-10963-db-failover.md")
    assert r.stderr.startswith("recall: remote 'box' answered something that is not recall's JSON — "), r.stderr
    assert len(r.stderr.splitlines()) == 1
    for args in (("read", "box:r.md:1"), ("index", "--remote", "box")):
        r = run_recall(*args, env=env)
        assert r.returncode == 1 and r.stdout == "", r.stderr
        assert r.stderr.startswith("recall: remote 'box' answered something that is not recall's JSON — "), r.stderr
        assert len(r.stderr.splitlines()) == 1


def test_a_remote_hits_highlights_outside_its_snippet_are_dropped(tmp_path, config):
    config("remotes:\n  - name: box\n    host: testbox\n    path: ~/recall\n")
    spans = [[5, 3], [0, 2], [1, 4], [3, 100], ["x"]]
    env = _fake_ssh(tmp_path, json.dumps({"hits": [{**HIT_JSON, "snippet": "abcdefg", "highlights": spans}]}))
    assert run_recall("index").returncode == 0
    r = run_recall("--json", "search", "abcdefg", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hits"][0]["highlights"] == [[0, 2]]
    assert "   **ab**cdefg" in run_recall("search", "abcdefg", env=env).stdout


def test_a_remote_hits_read_field_is_what_read_takes(tmp_path, config):
    """The remote's own source is 'notes', the remote is 'box': the hit reads 'box:r.md:1', not 'box:box:r.md:1'."""
    config("remotes:\n  - name: box\n    host: testbox\n    path: ~/recall\n")
    env = _fake_ssh(tmp_path, json.dumps({"hits": [{**HIT_JSON, "source": "notes"}]}))
    assert run_recall("index").returncode == 0
    r = run_recall("--json", "search", "zanzibar", env=env)
    hit = json.loads(r.stdout)["hits"][0]
    assert (hit["source"], hit["relpath"], hit["read"]) == ("box", "box:r.md", "box:r.md:1")
    run_recall("read", hit["read"], env=env)
    assert (tmp_path / "ssh-argv").read_text().splitlines()[-1].endswith(" --json read r.md:1 --max-chars 8000 --offset 0")


@pytest.mark.e2e
@pytest.mark.parametrize("theirs", ["recall/todo.md", "recall.py", "recall/__init__.py recall/.git/HEAD"])
def test_install_never_replaces_a_recall_folder_or_file_that_is_not_a_copy_of_recall(tmp_path, box, theirs):
    """`--path ~` where ~/recall is the user's notes folder: refused, every file as it was."""
    server, remote_root = box
    there = tmp_path / "home-there"
    for rel in theirs.split():
        (there / rel).parent.mkdir(parents=True, exist_ok=True)
        (there / rel).write_text("mine\n")
    before = {p: p.read_bytes() for p in there.rglob("*") if p.is_file()}
    r = run_recall("remote", "install", "testbox", "--path", str(there), "--ssh-config", server.client_config)
    assert r.returncode == 1
    assert r.stderr.strip().startswith(f"recall: testbox:{there / theirs.split()[0].split('/')[0]} is there and "
                                       "is not a copy of recall; nothing was changed — "), r.stderr
    assert {p: p.read_bytes() for p in there.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in there.iterdir()) == sorted({rel.split("/")[0] for rel in theirs.split()})


@pytest.mark.e2e
def test_install_at_a_path_that_is_a_file_says_what_path_must_be(tmp_path, box):
    server, remote_root = box
    (tmp_path / "a-file").write_text("mine\n")
    r = run_recall("remote", "install", "testbox", "--path", tmp_path / "a-file", "--ssh-config", server.client_config)
    assert r.returncode == 1 and (tmp_path / "a-file").read_text() == "mine\n"
    assert r.stderr.startswith(f"recall: copying recall to testbox:{tmp_path / 'a-file'} failed: FileExistsError: ")
    assert r.stderr.rstrip().endswith("— --path names a folder for recall.py and recall/, one this user can create "
                                      "or write"), r.stderr


@pytest.mark.e2e
def test_install_over_a_copy_with_its_bytecode_replaces_it(tmp_path, box):
    server, remote_root = box
    there = tmp_path / "there"
    _install(server, there)
    import subprocess
    import sys
    subprocess.run([sys.executable, str(there / "recall.py"), "--version"], check=True, capture_output=True)
    assert list((there / "recall").glob("__pycache__/*.pyc"))
    (there / "recall" / "stale_module.py").write_text("# a module an older recall had\n")
    r = _install(server, there)
    assert r.stdout.startswith("updated") and not (there / "recall" / "stale_module.py").exists()
    assert sorted(p.name for p in there.iterdir()) == ["recall", "recall.py"]


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether process `pid` ended within `within` seconds (killed if not: nothing left behind)."""
    from recall.db.pids import alive
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.1)
    os.kill(pid, 9)
    return False


@pytest.mark.e2e
def test_a_remote_recall_past_its_timeout_is_ended_there_too(tmp_path, config, box):
    """ssh given up after the timeout: the recall it started on the remote does not run on by itself."""
    server, remote_root = box
    slow = remote_root / "slow"
    slow.mkdir()
    pid_file = tmp_path / "remote.pid"
    (slow / "recall.py").write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                    "time.sleep(300)\n")
    config(f"remotes:\n  - name: sleepy\n    host: testbox\n    path: {slow}\n    ssh_config: {server.client_config}\n"
           f"    timeout: 2\n")
    assert run_recall("index").returncode == 0
    r = run_recall("search", "INC-10963")
    assert r.returncode == 0 and r.stderr.strip() == "recall: remote 'sleepy' did not answer within 2s", r.stderr
    assert _gone(int(pid_file.read_text())), "the remote recall was still running"


def test_a_remote_answer_past_its_bound_is_refused_in_one_line(tmp_path, config):
    config("remotes:\n  - name: box\n    host: testbox\n    path: ~/recall\n")
    env = _fake_ssh(tmp_path, "")
    pid_file = tmp_path / "ssh.pid"
    (tmp_path / "fakebin" / "ssh").write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec yes '{{\"hits\": []}}'\n")
    assert run_recall("index").returncode == 0
    r = run_recall("search", "INC-10963", env=env)
    assert r.returncode == 0 and r.stdout.startswith("1. incidents/2023/INC-10963-db-failover.md")
    assert r.stderr.strip() == "recall: remote 'box' answered more than 64 MB; nothing of it was used", r.stderr
    assert _gone(int(pid_file.read_text()))


def test_a_nul_in_a_query_or_path_for_a_remote_is_one_sentence_not_a_traceback(tmp_path, config, monkeypatch):
    """What an MCP client can send (a CLI argument cannot hold a NUL): search asks the remote with a
    space in its place, read says it cannot be sent."""
    from recall import api
    from recall.errors import RecallError
    config("remotes:\n  - name: box\n    host: testbox\n    path: ~/recall\n")
    monkeypatch.setenv("PATH", _fake_ssh(tmp_path, json.dumps({"hits": [HIT_JSON]}))["PATH"])
    assert run_recall("index").returncode == 0
    data = api.search("zanzi\0bar").to_dict()
    assert data["notices"] == [] and [h["relpath"] for h in data["hits"]] == ["box:r.md"]
    assert (tmp_path / "ssh-argv").read_text().rstrip("\n").endswith(" -- 'zanzi bar'")
    with pytest.raises(RecallError) as caught:
        api.read("box:a\0b.md")
    assert str(caught.value) == "remote 'box': a NUL character cannot be sent over ssh — leave it out"


def test_a_relative_ssh_config_is_the_config_files_neighbour_from_any_folder(tmp_path, config):
    """README: paths in the config are relative to it; ssh_config is a file here (path and config are the remote's)."""
    cfg = config("remotes:\n  - name: box\n    host: testbox\n    path: notes/recall\n    ssh_config: ssh/box.conf\n")
    env = _fake_ssh(tmp_path, json.dumps({"hits": [HIT_JSON]}))
    assert run_recall("index").returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = run_recall("search", "zanzibar", env=env, cwd=elsewhere)
    assert r.returncode == 0 and "box:r.md:1" in r.stdout, r.stderr
    argv = (tmp_path / "ssh-argv").read_text()        # the guard's script spans lines: one call only
    assert argv.startswith(f"-F {cfg.parent / 'ssh' / 'box.conf'} ") and " notes/recall/recall.py " in argv, argv
