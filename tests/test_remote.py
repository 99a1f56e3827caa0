"""Remote notes over a real sshd on 127.0.0.1: install, index there, federated search, read, down."""
import json

import pytest

from recall.remote import federate
from recall.search import Hit, SearchResult
from tests.conftest import run_recall, write_tree
from tests.conftest import free_port

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
    (remote_root / "config.yaml").write_text(
        f"home: {remote_root / 'state'}\nsources:\n  - name: box\n    path: {remote_root / 'boxnotes'}\n")
    yield server, remote_root
    stop_sshd(server)


def _local_config(tmp_path, config, server, remote_root, *, host="testbox", timeout=20):
    config(f"remotes:\n  - name: box\n    host: {host}\n    path: {remote_root / 'recall'}\n"
           f"    config: {remote_root / 'config.yaml'}\n    ssh_config: {server.client_config}\n"
           f"    timeout: {timeout}\n")


@pytest.mark.e2e
def test_install_index_search_read_over_ssh(tmp_path, config, box):
    server, remote_root = box
    r = run_recall("remote", "install", "testbox", "--path", str(remote_root / "recall"),
                   "--ssh-config", server.client_config)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"installed recall on testbox at {remote_root / 'recall'}")
    assert (remote_root / "recall" / "recall.py").exists() and (remote_root / "recall" / "recall" / "cli.py").exists()
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
def test_remote_behind_a_prerequisite_is_checked_first(tmp_path, config, box):
    server, remote_root = box
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"- id: vpn\n  check: tcp 127.0.0.1:{free_port()}\n  timeout: 1\n  hint: connect the VPN client and retry\n"
                   f"- id: testbox\n  kind: host\n  requires: [vpn]\n")
    config(f"inventory: [{inv}]\nremotes:\n  - name: box\n    host: testbox\n    path: {remote_root / 'recall'}\n"
           f"    ssh_config: {server.client_config}\n")
    assert run_recall("index").returncode == 0
    r = run_recall("search", "INC-10963")
    assert r.returncode == 0 and "prerequisite 'vpn' is down: connect the VPN client and retry" in r.stderr
    r = run_recall("read", "box:kafka-rebalance.md")
    assert r.returncode == 69
