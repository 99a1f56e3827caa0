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

from tests.conftest import CANARY, NOTES, free_port, run_recall  # noqa: E402
from tests.world import build, stored_bytes  # noqa: E402

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
    w = build(tmp_path, notes={**NOTES, "jira/pasted.md": PASTED}, include=["*.md", "*.yaml"],
              secrets_in_notes=True,          # inside the notes tree, as people keep it
              secrets=f"""\
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
""", inventory=f"""\
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
    monkeypatch.setenv("RECALL_CONFIG", str(w.config))
    return tmp_path, w.secrets


# (argv, the exit code it must end with, stdin): a command that fails early must not pass unseen.
KEY_COPY = "/tmp/recall-canary-key-copy"      # replaced per test by the fixture's own folder
COMMANDS = [
    (["secret", "sync"], 0), (["index"], 0), (["index", "--full"], 0), (["search", "canary"], 0),
    (["search", "old", "token"], 0), (["read", "jira/pasted.md"], 0), (["search", "canary"], 0),
    (["search", "token"], 0), (["--json", "search", "canary-host"], 0),
    (["read", "incidents/2023/INC-10963-db-failover.md"], 0), (["read", "secrets.yaml"], 1), (["doctor"], 1),
    (["secret", "sync"], 0), (["secret", "find", "canary"], 0), (["--json", "secret", "find", "token"], 0),
    (["secret", "show", "canary-token"], 0), (["--json", "secret", "show", "canary-token"], 0),
    (["secret", "command", "canary-token"], 0), (["secret", "command", "canary-token", "--", "env"], 0),
    (["secret", "exec", "canary-token", "--", sys.executable, "-c", CHILD], 0),
    (["secret", "exec", "canary-token", "--stdin", "--", sys.executable, "-c",
      "import sys; print(sys.stdin.read())"], 0),
    (["secret", "exec", "canary-token", "--", "no-such-program-xyz"], 1),
    (["secret", "exec", "canary-token", "--", "env"], 0),
    (["secret", "get", "canary-token"], 1), (["secret", "get", "canary-token", "--print"], 1),
    (["secret", "log"], 0), (["--json", "secret", "log", "canary-token"], 0),
    (["access", "find", "canary"], 0), (["access", "show", "canary-host"], 0),
    (["access", "exec", "canary-host", "--", sys.executable, "-c", CHILD], 0),
    (["access", "exec", "canary-host"], 0), (["access", "exec", "behind-vpn"], 69),
    (["access", "exec", "canary-stdin-host", "--", sys.executable, "-c", "import sys; print(sys.stdin.read())"], 0),
    (["verify", "--dry-run"], 0), (["--json", "verify", "--dry-run"], 0), (["verify"], 1), (["--json", "verify"], 1),
    (["access", "show", "canary-host"], 0), (["secret", "show", "canary-token"], 0),
    (["secret", "set", "canary-token"], 0, f"{CANARY}-set\n"),            # a new value from stdin
    (["secret", "set", "canary-sudo"], 0, f"sudo-{CANARY}\n"),
    (["secret", "key", "backup", KEY_COPY], 0), (["secret", "key", "backup", KEY_COPY], 1),
    (["secret", "rotate-key"], 0), (["secret", "sync"], 0),
    (["secret", "exec", "canary-token", "--", sys.executable, "-c", CHILD], 0), (["instructions"], 0),
    (["doctor"], 1), (["secret", "log"], 0), (["secret", "restore", "canary-sudo"], 1),
]


def _assert_clean(where: str, data) -> None:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    for form in FORMS:
        assert form not in text, f"the canary leaked into {where}"


def _assert_db_clean(db_file: Path) -> None:
    """No form of the canary in the DB, its WAL, or the full-text index's own term list."""
    for path in db_file.parent.glob(db_file.name + "*"):
        data = stored_bytes(path)
        _assert_clean(str(path), data)
        low = data.lower()
        for piece in PIECES:
            assert piece.encode() not in low, f"a piece of the canary ({piece}) is in {path}"
    con = sqlite3.connect(db_file)
    con.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, chunks_fts, 'row')")
    terms = {t for (t,) in con.execute("SELECT term FROM temp.vocab")}
    idents = [t for (t,) in con.execute("SELECT term FROM idents_vocab")]          # key~term tokens
    con.close()
    assert not terms & set(PIECES), terms & set(PIECES)
    assert not [t for t in idents if any(piece in t for piece in PIECES)]


def by_args(outputs, args):
    return next(r for a, r in outputs if a == args)


def _run_all(commands, tmp_path, outputs) -> None:
    for args, code, *stdin in commands:
        args = [str(tmp_path / "key-copy") if a == KEY_COPY else a for a in args]
        r = run_recall(*args, timeout=120, input=stdin[0] if stdin else None)
        assert "Traceback" not in r.stderr, (args, r.stderr)
        _assert_clean(f"`recall {' '.join(map(str, args))}` output", r.stdout + r.stderr)
        assert r.returncode == code, (args, r.returncode, r.stdout[-300:], r.stderr[-300:])
        outputs.append((args, r))


def _assert_files_clean(tmp_path) -> None:
    """No form of the canary in any file of the notes tree (the secrets file too), the state folder
    (DB, WAL, logs) or HOME: `grep -r` finds nothing."""
    state = Path(os.environ["RECALL_HOME"])
    files = [p for p in state.rglob("*") if p.is_file() and p.name != "vault.key"]
    assert any(p.name == "recall.db" for p in files)
    notes = [p for p in (tmp_path / "notes").rglob("*") if p.is_file() and p.name != "pasted.md"]
    assert any(p.name == "secrets.yaml" for p in notes)     # (pasted.md: a value the user pasted, on purpose)
    for path in files + notes:
        _assert_clean(str(path), stored_bytes(path))
    _assert_db_clean(state / "recall.db")
    for path in glob.glob(str(tmp_path / "home" / "**"), recursive=True):
        if os.path.isfile(path):
            _assert_clean(path, open(path, "rb").read())


def test_the_canary_never_leaves(world):
    tmp_path, secrets = world
    outputs = []
    _run_all(COMMANDS, tmp_path, outputs)
    by = {tuple(a): r for a, r in outputs}
    child = by[tuple(next(c[0] for c in COMMANDS if c[0][:2] == ["secret", "exec"] and c[0][-1] == CHILD))]
    assert child.stdout.splitlines() == ["argv-clean", "[recall:canary-token]"]
    assert "[recall:canary-token]" in by[("read", "jira/pasted.md")].stdout
    assert "jira/pasted.md" in by[("search", "old", "token")].stdout
    by_access_stdin = by[tuple(next(c[0] for c in COMMANDS if "canary-stdin-host" in c[0]))]
    assert by_access_stdin.stdout == "[recall:canary-sudo]\n\n", by_access_stdin.stderr
    by_stdin = by[tuple(next(c[0] for c in COMMANDS if "--stdin" in c[0]))]
    assert by_stdin.stdout == "[recall:canary-token]\n\n", by_stdin.stderr
    assert "ENC[AES256_GCM," in secrets.read_text()
    _assert_files_clean(tmp_path)
    # a cut-short file: the removed secret is named, listed, and written back sealed
    text = secrets.read_text()
    secrets.write_text(text[:text.index("- id: canary-sudo")])
    _run_all([(["secret", "sync"], 0), (["secret", "log"], 0), (["--json", "secret", "log"], 0),
              (["secret", "restore", "canary-sudo"], 0), (["secret", "restore", "canary-sudo"], 1),
              (["access", "exec", "canary-stdin-host", "--", sys.executable, "-c",
                "import sys; print(sys.stdin.read())"], 0)], tmp_path, outputs)
    assert "removed: canary-sudo" in outputs[-6][1].stdout and "  canary-sudo  from " in outputs[-5][1].stdout
    assert outputs[-1][1].stdout == "[recall:canary-sudo]\n\n"
    _assert_files_clean(tmp_path)


def test_get_through_the_clipboard_leaves_the_value_only_in_the_clipboard(world):
    """A fake xclip on PATH records what it is given; the terminal, the DB and the files stay clean."""
    from tests.conftest import REPO
    from tests.test_vault import _fake_clipboard, _in_pty
    tmp_path, secrets = world
    assert run_recall("secret", "sync").returncode == 0
    bin_dir, seen = _fake_clipboard(tmp_path)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    code, out = _in_pty([sys.executable, str(REPO / "recall.py"), "secret", "get", "canary-token"], env)
    assert code == 0 and b"copied the value of canary-token to the clipboard (xclip)" in out
    _assert_clean("the terminal of `secret get`", out)
    assert CANARY in seen.read_text()                       # it did reach the clipboard
    seen.unlink()
    r = run_recall("secret", "log")
    assert r.returncode == 0 and "copied to the clipboard (xclip)" in r.stdout
    _assert_files_clean(tmp_path)


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
