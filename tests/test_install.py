"""recall as people install it: `pip install .` (a wheel, not editable) and `pip install -e .` into a fresh
venv outside the checkout, and a bare `python3 path/to/recall.py`. In each, the MCP server is started by
absolute path with a PATH that lacks the venv (as MCP clients start servers), `recall_secret_command`
is asked for a line, and that line runs in `bash -c` with only PATH=/usr/bin:/bin and HOME: the value
reaches the child, its output comes back masked, and the child's exit code with it.

Nothing is fetched: the wheel is built from a copy of the checkout with the test venv's setuptools, and
the fresh venvs see the extras (cryptography, mcp) through a path file naming the test venv's
site-packages, after their own (so the installed recall is the one imported)."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("mcp")
pytest.importorskip("cryptography")
pytestmark = [pytest.mark.e2e, pytest.mark.extras]

import anyio  # noqa: E402

from tests.conftest import CANARY, REPO  # noqa: E402
from tests.world import build  # noqa: E402

BARE = {"PATH": "/usr/bin:/bin"}
CHILD = "printf '%s\\n' \"$JIRA_API_TOKEN\"; exit 3"


def _run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    assert r.returncode == 0, (argv, r.stdout[-2000:], r.stderr[-2000:])
    return r


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A copy of the checkout's installable files, outside it (a build writes build/ and egg-info)."""
    pytest.importorskip("setuptools")
    src = tmp_path_factory.mktemp("src") / "recall-src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "recall.py", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "recall", src / "recall", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def _fresh_venv(where: Path) -> Path:
    """A new venv whose own site-packages come first; the test venv's (for the extras) after them."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(where)])
    python = where / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    Path(site, "zz-test-extras.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def _pip(*args):
    return _run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args])


@pytest.fixture(scope="module")
def installed(source, tmp_path_factory):
    """{kind: the argv that starts `recall mcp` as a user would}, for a wheel, an editable install and
    the bare launcher."""
    base = tmp_path_factory.mktemp("installs")
    wheels = base / "wheels"
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(wheels), str(source))
    wheel = next(wheels.glob("recall-*.whl"))
    kinds = {}
    py = _fresh_venv(base / "venv-wheel")
    _pip("--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel))
    kinds["wheel"] = [str(py.parent / "recall"), "mcp"]
    py_e = _fresh_venv(base / "venv-editable")
    _pip("--python", str(py_e), "install", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-e", str(source))
    kinds["editable"] = [str(py_e.parent / "recall"), "mcp"]
    kinds["launcher"] = [sys.executable, str(source / "recall.py"), "mcp"]
    return kinds


@pytest.fixture
def user(tmp_path):
    """A HOME with notes, a secrets file holding CANARY and a config, synced by the user beforehand."""
    home = tmp_path / "userhome"
    cfg = build(home, notes={"jira.md": "# Jira\n\nThe API token lives in the vault.\n"},
                secrets=f"- id: jira-api-token\n  service: jira\n  kind: token\n  value: \"{CANARY}\"\n").config
    env = {**BARE, "HOME": str(home), "RECALL_CONFIG": str(cfg), "RECALL_HOME": str(home / "state")}
    return home, env


async def _secret_command(argv: list, env: dict, cwd: str) -> tuple:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd)
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                r = await s.call_tool("recall_secret_command", {"id": "jira-api-token", "command": CHILD})
                return "".join(c.text for c in r.content), r.is_error


@pytest.mark.parametrize("kind", ["wheel", "editable", "launcher"])
def test_the_agents_line_runs_in_a_plain_shell(installed, user, kind):
    home, env = user
    argv = installed[kind]
    recall = argv[:-1]
    if kind != "launcher":       # the package the venv's Python imports is the installed one
        where = _run([str(Path(argv[0]).parent / "python"), "-c", "import recall; print(recall.__file__)"],
                     env=env, cwd=str(home)).stdout.strip()
        assert where.startswith(str(Path(argv[0]).parent.parent)) == (kind == "wheel"), where
    sync = _run([*recall, "secret", "sync"], env=env, cwd=str(home))
    assert CANARY not in sync.stdout + sync.stderr
    text, is_error = anyio.run(_secret_command, argv, env, str(home))
    assert not is_error, text
    assert CANARY not in text and " secret exec jira-api-token -- " in text
    line = text.strip()
    assert not line.startswith(("recall ", "python")), line       # an absolute program, not a PATH lookup
    r = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60, cwd="/",
                       env={"PATH": "/usr/bin:/bin", "HOME": str(home)})
    assert (r.returncode, r.stdout) == (3, "[recall:jira-api-token]\n"), (line, r.stdout, r.stderr)
    assert CANARY not in r.stderr


def test_the_cli_line_from_an_installed_recall_runs_there_too(installed, user):
    """`recall secret command` by the human, from the wheel's venv: the same self-contained line."""
    home, env = user
    recall = installed["wheel"][:-1]
    _run([*recall, "secret", "sync"], env=env)
    out = _run([*recall, "--json", "secret", "command", "jira-api-token", "--", "sh", "-c", CHILD],
               env=env).stdout
    line = json.loads(out)["command"]
    assert line.startswith(str(Path(recall[0]))) or line.startswith("RECALL_HOME=")
    r = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60, cwd="/",
                       env={"PATH": "/usr/bin:/bin", "HOME": str(home)})
    assert (r.returncode, r.stdout) == (3, "[recall:jira-api-token]\n"), (line, r.stdout, r.stderr)


@pytest.mark.parametrize("kind", ["wheel", "editable"])
def test_instructions_print_the_mcp_settings_that_start_this_install(installed, user, kind):
    """`recall instructions` names the installed `recall` by absolute path (and the config it was run
    with); a client started with exactly those settings — no PATH of ours, no other env — serves."""
    home, env = user
    recall = installed[kind][:-1]
    data = json.loads(_run([*recall, "--json", "instructions"], env=env, cwd=str(home)).stdout)
    server = data["mcpServers"]["recall"]
    assert server["command"] == recall[0] and server["args"] == ["mcp"], server
    assert server["env"]["RECALL_CONFIG"] == env["RECALL_CONFIG"]
    _run([*recall, "secret", "sync"], env=env, cwd=str(home))
    text, is_error = anyio.run(_secret_command, [server["command"], *server["args"]],
                               {**server["env"], "RECALL_HOME": env["RECALL_HOME"], "HOME": str(home)}, "/")
    assert not is_error and " secret exec jira-api-token -- " in text, text
