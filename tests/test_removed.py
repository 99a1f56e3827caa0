"""A cut-short secrets file never loses a secret for good: removed ones are kept 30 days and restorable."""
import json
import sqlite3

import pytest

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

from recall import db
from recall.config import load_config  # noqa: E402
from recall.vault import store as vault  # noqa: E402
from tests.conftest import CANARY, run_recall  # noqa: E402

ENTRIES = [f"- id: s{n}\n  service: svc{n}\n  tags: [t{n}]\n  value: '{CANARY}-{n}'\n" for n in range(10)]
ENTRIES[7] = (f"- id: s7\n  kind: password\n  check: 'true'\n"
              f"  fields: {{username: {{value: admin7, public: true}}, password: '{CANARY}-7'}}\n")


@pytest.fixture
def cut(make_world):
    secrets = make_world(secrets="".join(ENTRIES)).secrets
    assert run_recall("secret", "sync").returncode == 0
    text = secrets.read_text()
    secrets.write_text(text[:text.index("- id: s6")])          # cut at an entry boundary: 6 of 10 left
    return secrets


def _value(sid):
    cfg = load_config()
    return vault.load_values(db.connect(cfg.db_path), cfg)[sid]


def test_a_sync_that_removes_secrets_names_them_and_keeps_them_restorable(cut):
    r = run_recall("secret", "sync")
    assert r.returncode == 0 and "6 secrets: 0 added, 0 updated, 4 removed" in r.stdout
    assert "removed: s6, s7, s8, s9 — kept 30 days: 'recall secret restore ID'" in r.stdout
    r = run_recall("secret", "log")
    assert "removed by a sync, restorable with 'recall secret restore ID':" in r.stdout
    assert all(f"  s{n}  from {cut}:" in r.stdout for n in (6, 7, 8, 9))
    r = run_recall("secret", "restore", "s7")
    assert r.returncode == 0 and f"restored s7 into {cut}" in r.stdout, r.stderr
    text = cut.read_text()
    assert CANARY not in text and "admin7" in text and text.startswith("".join(ENTRIES[:1])[:8])
    assert _value("s7") == {"username": "admin7", "password": f"{CANARY}-7"}
    assert run_recall("secret", "show", "s7").stdout.count("check: true") == 1   # metadata came back too
    assert run_recall("secret", "restore", "s7").returncode == 1                # once
    assert run_recall("secret", "rotate-key").returncode == 0                  # kept rows follow the key
    r = run_recall("secret", "restore", "s9")
    assert r.returncode == 0, r.stderr
    assert _value("s9") == {"": f"{CANARY}-9"}
    assert "s9" not in run_recall("secret", "log").stdout.split("restorable")[-1]
    assert CANARY not in cut.read_text()


def test_a_restore_over_an_entry_of_that_id_is_refused_and_after_30_days_it_is_gone(cut):
    assert run_recall("secret", "sync").returncode == 0
    cut.write_text(cut.read_text() + "- id: s8\n  value: 'another-one-8'\n")
    r = run_recall("secret", "restore", "s8")
    assert r.returncode == 1 and "secrets.yaml:" in r.stderr and "already; nothing was restored" in r.stderr
    con = sqlite3.connect(load_config().db_path)
    for key, value in con.execute("SELECT key, value FROM meta WHERE key LIKE 'secret_removed:%'").fetchall():
        record = json.loads(value)
        record["removed_at"] -= 31 * 86400
        con.execute("UPDATE meta SET value=? WHERE key=?", (json.dumps(record), key))
    con.commit()
    r = run_recall("secret", "restore", "s6")
    assert r.returncode == 1 and "no removed secret 's6' kept" in r.stderr
    assert run_recall("secret", "sync").returncode == 0
    assert con.execute("SELECT count(*) FROM meta WHERE key LIKE 'secret_removed:%'").fetchone()[0] == 0
