"""The --json of search, read, verify and secret find on golden/ held byte for byte (after the paths
of this machine are named <REPO> and <WORLD>): the interface users script against does not move by
accident. A change meant to move it records the new output with RECALL_GOLDEN_RECORD=1 and says so.

Scores carry the recency prior, so the world holds still: the notes are a copy dated NOTES_DAY (no git
to read dates from) and recall runs with today pinned to TODAY — the verdict depends on neither the
calendar nor how the checkout was made."""
import datetime
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.world import build

pytest.importorskip("cryptography")
FIXTURES = REPO / "tests" / "golden_json"
SECRETS = """\
    - id: jira-api-token
      service: jira
      environment: prod
      kind: token
      username: ops@example.com
      url: https://jira.example.com
      tags: [atlassian, jira, api]
      notes: Personal Jira bearer token. Default project OPS.
      use: 'curl -s -H "Authorization: Bearer $JIRA_API_TOKEN" https://jira.example.com/rest/api/2/myself'
      value: golden-jira-7f3c9a1e5b
    - id: db-admin
      service: postgres
      kind: password
      fields: {username: admin, password: golden-db-2b8d4f6a0c}
"""
INVENTORY = """\
    - id: vpn
      kind: vpn
      check: tcp 127.0.0.1:9
      hint: connect the VPN client and retry
    - id: pg-prod
      kind: host
      aliases: [orders db]
      requires: [vpn]
      secrets: [db-admin]
      verify: ssh pg-prod-03.db.example.com true
    - id: ops-cluster
      kind: cluster
      environment: prod
      access:
        - export KUBECONFIG=~/.kube/ops
      verify: kubectl --context ops-cluster get nodes
"""
NOTES_DAY = datetime.datetime(2026, 11, 29, 12, tzinfo=datetime.timezone.utc).timestamp()
TODAY = "2026-12-05"
# recall as recall.py starts it, with the day search weighs recency against held at TODAY
LAUNCH = f"""import datetime, sys
sys.path.insert(0, {str(REPO)!r})
import recall.notes.search as search
assert search._date is datetime.date, "search no longer weighs recency against search._date: pin its day anew"
class Day(datetime.date):
    @classmethod
    def today(cls):
        return cls.fromisoformat({TODAY!r})
search._date = Day
from recall.cli import run
run()
"""
CASES = {
    "search-identifier": ["search", "INC-10963"],
    "search-words": ["search", "disk filled up on the build server", "-n", "5"],
    "search-pinned": ["search", "orders db failover"],
    "read-section": ["read", "incidents/2023/INC-10963-db-failover.md:7"],
    "verify-dry-run": ["verify", "--dry-run"],
    "secret-find": ["secret", "find", "jira"],
    "secret-find-all": ["secret", "find"],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden-world")
    notes = shutil.copytree(REPO / "golden" / "notes", root / "notes")
    for path in notes.rglob("*"):
        os.utime(path, (NOTES_DAY, NOTES_DAY))
    w = build(root, notes=notes, secrets=SECRETS, inventory=INVENTORY, source="golden")
    env = {**os.environ, "RECALL_HOME": str(root / "state"), "RECALL_CONFIG": str(w.config)}
    for verb in (["index"], ["secret", "sync"]):
        done = subprocess.run([sys.executable, str(REPO / "recall.py"), *verb], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    return root, env


def _normal(text: str, root) -> str:
    """This machine's paths named; the time of a verify run as <when>."""
    text = text.replace(str(root), "<WORLD>").replace(str(REPO), "<REPO>")
    return re.sub(r'"last_verified": "[^"]*"', '"last_verified": "<when>"', text)


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_output_is_unchanged(world, name):
    root, env = world
    done = subprocess.run([sys.executable, "-c", LAUNCH, "--json", *CASES[name]], env=env,
                          capture_output=True, text=True, timeout=60, cwd=root)
    assert done.returncode == 0, done.stderr
    got = _normal(done.stdout, root)
    json.loads(got)
    fixture = FIXTURES / f"{name}.json"
    if os.environ.get("RECALL_GOLDEN_RECORD"):
        FIXTURES.mkdir(exist_ok=True)
        fixture.write_text(got)
    assert got == fixture.read_text(), f"recall --json {' '.join(CASES[name])} changed its output"
