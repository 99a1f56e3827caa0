"""Secrets are sacred: one canary value, every verb, every output, file, log, argv and error."""
import base64
import glob
import os
import re
import sqlite3
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

from tests.conftest import CANARY, NOTES, free_port, run_recall, write_tree  # noqa: E402

B64 = base64.b64encode(CANARY.encode()).decode()
FORMS = [CANARY, B64, CANARY[::-1]]
# The full-text index keeps terms lower-cased and split at punctuation: in DB bytes, look for those.
PIECES = [p.lower() for p in re.split(r"[^0-9A-Za-z]+", CANARY) if p]
PASTED = (f"# Jira\n\nThe old token was {CANARY}.\n\n## Encoded\n\n"
          f"base64 {B64} and in a URL ?token={quote(CANARY + '/x')}\n")

CHILD = ("import os, sys; v = os.environ['CANARY_TOKEN']; "
         "argv = open('/proc/self/cmdline', 'rb').read(); "
         "parent = open('/proc/%d/cmdline' % os.getppid(), 'rb').read(); "
         "print('argv-clean' if v.encode() not in argv + parent else 'argv-DIRTY'); "
         "print(v); sys.stderr.write(v + '\\n')")


@pytest.fixture
def world(tmp_path, monkeypatch):
    notes = write_tree(tmp_path / "notes", {**NOTES, "jira/pasted.md": PASTED})
    secrets = notes / "secrets.yaml"          # inside the notes tree, as people keep it
    secrets.write_text(f"""\
- id: canary-token
  service: canary
  kind: token
  url: http://127.0.0.1:9/
  env: CANARY_TOKEN
  tags: [test]
  notes: the test canary
  use: 'printenv CANARY_TOKEN'
  check: 'curl -s -o /dev/null -w "%{{http_code}}" -H "X-Token: $CANARY_TOKEN" http://127.0.0.1:9/'
  value: "{CANARY}"
- id: canary-sudo
  service: sudo
  kind: password
  inject: stdin
  value: "sudo-{CANARY}"
""")
    secrets.chmod(0o600)
    inv = tmp_path / "inventory.yaml"
    inv.write_text(f"""\
- id: vpn
  check: tcp 127.0.0.1:{free_port()}
  timeout: 1
  hint: connect the VPN client and retry
- id: canary-host
  kind: host
  secrets: [canary-token]
  verify: {sys.executable} -c "print(1)"
- id: canary-stdin-host
  kind: host
  secrets: [canary-sudo]
- id: behind-vpn
  requires: [vpn]
  secrets: [canary-token]
  verify: kubectl get nodes
""")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"sources:\n  - name: notes\n    path: {notes}\n    include: ['*.md', '*.yaml']\n"
                   f"secrets: [{secrets}]\ninventory: [{inv}]\n")
    monkeypatch.setenv("RECALL_CONFIG", str(cfg))
    return tmp_path, secrets


COMMANDS = [
    ["secret", "sync"], ["index"], ["index", "--full"], ["search", "canary"], ["search", "old", "token"],
    ["read", "jira/pasted.md"], ["search", "canary"], ["search", "token"], ["--json", "search", "canary-host"],
    ["read", "incidents/2023/INC-10963-db-failover.md"], ["read", "secrets.yaml"], ["doctor"],
    ["secret", "sync"], ["secret", "find", "canary"], ["--json", "secret", "find", "token"],
    ["secret", "show", "canary-token"], ["--json", "secret", "show", "canary-token"],
    ["secret", "command", "canary-token"], ["secret", "command", "canary-token", "--", "env"],
    ["secret", "exec", "canary-token", "--", sys.executable, "-c", CHILD],
    ["secret", "exec", "canary-token", "--stdin", "--", sys.executable, "-c", "import sys; print(sys.stdin.read())"],
    ["secret", "exec", "canary-token", "--", "no-such-program-xyz"],
    ["secret", "exec", "canary-token", "--", "env"],
    ["secret", "get", "canary-token"], ["secret", "log"], ["--json", "secret", "log", "canary-token"],
    ["access", "find", "canary"], ["access", "show", "canary-host"],
    ["access", "exec", "canary-host", "--", sys.executable, "-c", CHILD],
    ["access", "exec", "canary-host"], ["access", "exec", "behind-vpn"],
    ["access", "exec", "canary-stdin-host", "--", sys.executable, "-c", "import sys; print(sys.stdin.read())"],
    ["verify", "--dry-run"], ["--json", "verify", "--dry-run"], ["verify"], ["--json", "verify"],
    ["access", "show", "canary-host"], ["secret", "show", "canary-token"], ["secret", "rotate-key"],
    ["secret", "exec", "canary-token", "--", sys.executable, "-c", CHILD], ["instructions"],
]


def _assert_clean(where: str, data) -> None:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    for form in FORMS:
        assert form not in text, f"the canary leaked into {where}"


def _assert_db_clean(db_file: Path) -> None:
    """No form of the canary in the DB, its WAL, or the full-text index's own term list."""
    for path in db_file.parent.glob(db_file.name + "*"):
        data = path.read_bytes()
        _assert_clean(str(path), data)
        low = data.lower()
        for piece in PIECES:
            assert piece.encode() not in low, f"a piece of the canary ({piece}) is in {path}"
    con = sqlite3.connect(db_file)
    con.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, chunks_fts, 'row')")
    terms = {t for (t,) in con.execute("SELECT term FROM temp.vocab")}
    con.close()
    assert not terms & set(PIECES), terms & set(PIECES)


def by_args(outputs, args):
    return next(r for a, r in outputs if a == args)


def test_the_canary_never_leaves(world):
    tmp_path, secrets = world
    outputs = []
    for args in COMMANDS:
        r = run_recall(*args, timeout=120)
        assert "Traceback" not in r.stderr, (args, r.stderr)
        _assert_clean(f"`recall {' '.join(map(str, args))}` output", r.stdout + r.stderr)
        outputs.append((args, r))
    by = {tuple(a): r for a, r in outputs}
    child = by[tuple(next(c for c in COMMANDS if c[:2] == ["secret", "exec"] and c[-1] == CHILD))]
    assert child.stdout.splitlines() == ["argv-clean", "[recall:canary-token]"]
    assert by[("secret", "get", "canary-token")].returncode == 1
    assert "[recall:canary-token]" in by[("read", "jira/pasted.md")].stdout
    assert "jira/pasted.md" in by[("search", "old", "token")].stdout
    assert by[("access", "exec", "behind-vpn")].returncode == 69
    by_access_stdin = by[tuple(next(c for c in COMMANDS if "canary-stdin-host" in c))]
    assert (by_access_stdin.returncode, by_access_stdin.stdout) == (0, "[recall:canary-sudo]\n\n"), \
        by_access_stdin.stderr
    by_stdin = by[tuple(next(c for c in COMMANDS if "--stdin" in c))]
    assert (by_stdin.returncode, by_stdin.stdout) == (0, "[recall:canary-token]\n\n"), by_stdin.stderr
    state = Path(os.environ["RECALL_HOME"])
    files = [p for p in state.rglob("*") if p.is_file() and p.name != "vault.key"]
    assert any(p.name == "recall.db" for p in files)
    for path in files:
        _assert_clean(str(path), path.read_bytes())
    _assert_db_clean(state / "recall.db")
    for path in glob.glob(str(tmp_path / "home" / "**"), recursive=True):
        if os.path.isfile(path):
            _assert_clean(path, open(path, "rb").read())


def test_a_value_indexed_before_the_vault_knew_it_leaves_the_db_at_sync(world):
    """Index first (the note's token is just text then), sync after: no DB byte keeps it."""
    r = run_recall("index")
    assert r.returncode == 0, r.stderr
    db_file = Path(os.environ["RECALL_HOME"]) / "recall.db"
    r = run_recall("secret", "sync")
    assert r.returncode == 0, r.stderr
    _assert_db_clean(db_file)
    r = run_recall("search", "old", "token")
    assert "[recall:canary-token]" in r.stdout
    r = run_recall("read", "jira/pasted.md")
    assert r.stdout.count("[recall:canary-token]") == 3, r.stdout       # raw, base64, URL-encoded


@pytest.mark.parametrize("broken", [
    f'- id: canary-token\n  value: "{CANARY}\n',                      # unterminated quote
    f"- id: canary-token\n  value: {CANARY}: x\n",                    # a mapping where a scalar goes
    f"- id: canary-token\n\tvalue: '{CANARY}'\n",                     # a tab
    f"- id: canary-token\n  value: &a '{CANARY}'\n",                  # an anchor
    f"- id: canary-token\n  value: ['{CANARY}']\n",                   # wrong type
    f"- id: canary-token\n  value: '{CANARY}'\n  value: '{CANARY}'\n",  # duplicate key
    f"- id: canary-token\n  value: '{CANARY}'\n  bogus: '{CANARY}'\n",  # unknown field
])
def test_errors_about_a_secrets_file_never_quote_the_value(world, broken):
    tmp_path, secrets = world
    secrets.write_text(broken)
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and "secrets.yaml:" in r.stderr
    _assert_clean("the error message", r.stdout + r.stderr)
    from recall.doctor import run_doctor  # doctor parses the same file (its import probes aside)
    checks = run_doctor(extras=False)
    assert any(not c.ok and "secrets.yaml:" in c.detail for c in checks)
    _assert_clean("doctor's checks", repr(checks))


def test_a_host_bound_secret_never_reaches_the_child_nor_any_output(world, tmp_path):
    """inject: proxy (issue 18): the child, its output, the log and the DB see only a placeholder."""
    pytest.importorskip("cryptography")
    from tests.standin_https import StandIn
    _, secrets = world
    with StandIn(tmp_path / "certs", CANARY) as api:
        secrets.write_text(secrets.read_text() + f"""\
- id: canary-bound
  inject: proxy
  url: https://127.0.0.1:{api.port}/
  ca: {api.ca}
  value: "{CANARY}-b"
""")
        probe = (f'curl -s -H "Authorization: Bearer $CANARY_BOUND" https://127.0.0.1:{api.port}/echo; '
                 f'curl -s "https://localhost:{api.port}/echo?t=$CANARY_BOUND"; env; '
                 'printf %s "$CANARY_BOUND" | rev; printf %s "$CANARY_BOUND" | base64; '
                 'cat /proc/self/environ; exit 3')
        for args in (["secret", "sync"], ["secret", "show", "canary-bound"],
                     ["secret", "exec", "canary-bound", "--", "sh", "-c", probe],
                     ["secret", "command", "canary-bound", "--", "env"], ["secret", "log"],
                     ["--json", "secret", "log", "canary-bound"]):
            r = run_recall(*args, timeout=120)
            assert "Traceback" not in r.stderr, (args, r.stderr)
            _assert_clean(f"`recall {' '.join(args)}` output", r.stdout + r.stderr)
        assert api.seen[0]["auth"] == f"Bearer {CANARY}-b"          # it did reach its own service
        assert CANARY not in api.seen[1]["query"]                   # and nothing else
    _assert_db_clean(Path(os.environ["RECALL_HOME"]) / "recall.db")
