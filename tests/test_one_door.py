"""One door out (issue 33 point 1): one world seeded with a distinct canary in every place a credential
can sit — vault values, inventory steps, verify, check, a URL's password, a refused step, YAML quoted
by an error — then every CLI verb (text and --json) and every MCP tool, and every file under the notes
and config trees, the state folder (DB, WAL) and HOME: no 6-character piece of any canary anywhere."""
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port, run_recall
from tests.world import build, stored_bytes

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

CANARIES = {
    "vault env value": "vQ7xZr4Tw9Lm2Vb8",
    "vault field value": "fK3pYt6Nc8Hs5Jd1",
    "vault stdin value": "sM9qLp2Wx4Rv7Gk3",
    "inventory step": "iD5wNe8Bq1Zc6Tf4",
    "inventory verify": "iR2kUx7Pm3Ya9Ls6",
    "inventory url": "iH8nCv1Qt5Wd3Pz7",
    "inventory check": "iG4tBa9Mr6Xe2Nj8",
    "refused step": "iW7yKd3Sp8Fo4Ub1",
}
C = CANARIES


def _pieces(text: str) -> set:
    return {text[i:i + 6] for i in range(len(text) - 5)}


PIECES = {piece: where for where, canary in CANARIES.items() for piece in _pieces(canary)}


def assert_clean(where: str, data) -> None:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    low = text.lower()
    for piece, what in PIECES.items():
        assert piece.lower() not in low, f"a piece of the {what} canary ({piece}) is in {where}"


SECRETS = f"""\
- id: api-token
  service: api
  kind: token
  url: https://api.example.com
  use: 'curl -s -H "Authorization: Bearer $API_TOKEN" https://api.example.com/me'
  value: {C['vault env value']}
- id: db-admin
  service: postgres
  fields: {{username: admin, password: {C['vault field value']}}}
- id: sudo-pass
  kind: password
  inject: stdin
  value: {C['vault stdin value']}
"""


def _inventory(port: int) -> str:
    return f"""\
- id: vpn
  kind: vpn
  check: tcp 127.0.0.1:{port}
  timeout: 1
  hint: connect the VPN client and retry
- id: box
  kind: host
  aliases: [deploy box]
  url: https://deploy:{C['inventory url']}@127.0.0.1:9/
  secrets: [api-token, db-admin]
  access:
    - export DEPLOY_TOKEN={C['inventory step']}
  verify: curl -s -u deploy:{C['inventory verify']} https://127.0.0.1:9/health
- id: gated
  kind: host
  requires: [vpn]
  verify: kubectl get nodes
- id: stdin-box
  kind: host
  secrets: [sudo-pass]
  verify: {sys.executable} -c "print(1)"
- id: refused
  kind: host
  access:
    - DB_PWD={C['refused step']} true
  verify: {sys.executable} -c "print(1)"
- id: checked
  kind: service
  check: "curl -s -H 'Authorization: Bearer {C['inventory check']}' https://127.0.0.1:9/"
"""


NOTES = {"runbooks/box.md": "# Deploy box\n\nThe deploy box runs the api; see the access entry.\n",
         "incidents/INC-1.md": "# INC-1 api outage\n\nThe api token expired and the deploy failed.\n"}

PY = sys.executable
# a value the child holds, cut short mid-stream: 6 characters at its start, at an offset, then 7
CUT = ('printf "%s\\n" "${V}" | cut -c1-6; echo "at ${{{V}:4:6}} of it"; '
       'printf "%s\\n" "${V}" | cut -c8-14; echo done')
ANY = None        # an exit code this test does not judge (a proof that fails here, a refused step)
CLI = [
    (["index"], 0), (["--json", "index"], 0), (["secret", "sync"], 0), (["--json", "secret", "sync"], 0),
    (["search", "deploy box"], 0), (["--json", "search", "deploy box"], 0), (["search", "api token"], 0),
    (["--json", "search", "refused"], 0), (["read", "runbooks/box.md"], 0), (["--json", "read", "runbooks/box.md"], 0),
    (["secret", "find"], 0), (["--json", "secret", "find", "api"], 0), (["secret", "show", "api-token"], 0),
    (["--json", "secret", "show", "db-admin"], 0), (["secret", "command", "api-token"], 0),
    (["--json", "secret", "command", "db-admin", "--", "env"], 0),
    (["secret", "exec", "api-token", "--", "env"], 0), (["secret", "exec", "db-admin", "--", "env"], 0),
    (["secret", "exec", "sudo-pass", "--", PY, "-c", "import sys; print(sys.stdin.read())"], 0),
    (["secret", "exec", "api-token", "--", "sh", "-c", 'echo $API_TOKEN | base64; printf %s "$API_TOKEN" | od -c'], 0),
    (["secret", "exec", "api-token", "--", "bash", "-c", CUT.format(V="API_TOKEN")], 0),
    (["secret", "exec", "db-admin", "--", "sh", "-c", 'env | grep -i pass | cut -d= -f2 | cut -c2-7'], 0),
    (["secret", "get", "api-token"], 1), (["secret", "log"], 0), (["--json", "secret", "log"], 0),
    (["access", "find"], 0), (["--json", "access", "find", "box"], 0), (["access", "show", "box"], 0),
    (["--json", "access", "show", "box"], 0), (["--json", "access", "show", "refused"], 0),
    (["access", "show", "checked"], 0), (["access", "exec", "box", "--", "env"], 0),
    (["access", "exec", "box", "--", "echo $DEPLOY_TOKEN"], 0), (["access", "exec", "box"], ANY),
    (["access", "exec", "box", "--", CUT.format(V="DEPLOY_TOKEN") + "; " + CUT.format(V="API_TOKEN")], 0),
    (["access", "exec", "gated"], 69), (["access", "exec", "refused", "--", "env"], ANY),
    (["access", "exec", "stdin-box", "--", PY, "-c", "import sys; print(sys.stdin.read())"], 0),
    (["verify", "--dry-run"], 0), (["--json", "verify", "--dry-run"], 0), (["verify"], 1), (["--json", "verify"], 1),
    (["doctor"], ANY), (["--json", "doctor"], ANY), (["instructions"], 0),
    (["secret", "rotate-key"], 0), (["--json", "secret", "rotate-key"], 0), (["secret", "sync"], 0),
    (["secret", "log"], 0),
]
TOOLS = [
    ("recall_search", {"query": "deploy box"}), ("recall_search", {"query": "api token", "mode": "keyword"}),
    ("recall_read", {"path": "runbooks/box.md"}), ("recall_secret_find", {"query": ""}),
    ("recall_secret_find", {"query": "api"}), ("recall_secret_show", {"id": "api-token"}),
    ("recall_secret_show", {"id": "db-admin"}), ("recall_secret_command", {"id": "api-token"}),
    ("recall_secret_command", {"id": "db-admin", "command": "env"}), ("recall_access_find", {"query": ""}),
    ("recall_access_show", {"id": "box"}), ("recall_access_show", {"id": "checked"}),
    ("recall_access_exec", {"id": "box", "command": "env; echo $DEPLOY_TOKEN"}),
    ("recall_access_exec", {"id": "box", "command": CUT.format(V="DEPLOY_TOKEN")}),
    ("recall_access_exec", {"id": "refused", "command": "env"}), ("recall_access_exec", {"id": "gated"}),
    ("recall_verify", {}), ("recall_verify", {"id": "box, checked"}),
]


@pytest.fixture
def world(tmp_path, monkeypatch):
    w = build(tmp_path, notes=NOTES, secrets=SECRETS, inventory=_inventory(free_port()))
    monkeypatch.setenv("RECALL_CONFIG", str(w.config))
    return w


def _files(*folders):
    for folder in folders:
        for path in Path(folder).rglob("*"):
            if path.is_file():
                yield path


def test_no_piece_of_any_canary_leaves_by_any_verb_tool_or_file(world):
    for args, code in CLI:
        r = run_recall(*args, timeout=120)
        assert "Traceback" not in r.stderr, (args, r.stderr)
        assert_clean(f"`recall {' '.join(args)}`", r.stdout + r.stderr)
        assert code is ANY or r.returncode == code, (args, r.returncode, r.stderr[-400:])
    pytest.importorskip("mcp")
    from tests.test_mcp import run_calls
    for (name, args), (text, err) in zip(TOOLS, run_calls(TOOLS)):
        assert_clean(f"{name}({args})", text)
        assert not err or name in ("recall_access_exec", "recall_verify"), (name, text)
    state = Path(os.environ["RECALL_HOME"])
    assert (state / "recall.db").exists()
    for path in _files(world.notes, state, os.environ["HOME"]):
        if path.name != "vault.key":
            assert_clean(str(path), stored_bytes(path))
    for path in _files(world.config.parent):        # the user's own inventory file holds its literals
        if path != world.inventory:
            assert_clean(str(path), path.read_bytes())
