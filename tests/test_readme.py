"""The README's first five minutes, run as written in a fresh HOME (install lines aside)."""
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras


def _walkthrough() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("### The first five minutes"):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_the_first_five_minutes_work_as_written(tmp_path):
    home = tmp_path / "home"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # `recall` as the install would put it on PATH, and a stand-in `claude` that records its call
    (bindir / "recall").write_text(f'#!/bin/sh\nexec {sys.executable} {REPO / "recall.py"} "$@"\n')
    (bindir / "claude").write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "claude-called"}\n')
    for tool in ("recall", "claude"):
        (bindir / tool).chmod(0o755)
    (home / "notes").mkdir(parents=True)
    (home / "notes" / "jira.md").write_text("# Jira\n\nOur Jira project key is OPS.\n")
    install = ("git clone", "python3 -m venv", "export PATH")
    script = "\n".join(line for line in _walkthrough().splitlines() if not line.startswith(install))
    env = {"HOME": str(home), "PATH": f"{bindir}:{os.environ['PATH']}", "LANG": "C.UTF-8"}
    r = subprocess.run(["bash", "-e", "-c", script], cwd=home, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "jira.md" in out                                                   # 2. search found the note
    assert "recall secret exec jira-api-token" in out and "<paste the token>" not in out + r.stderr
    assert "Access: jump01 (host)" in out                                     # 4. the access block
    dry = out[out.index("secret:jira-api-token"):]
    assert re.search(r"secret:jira-api-token\s+allow\s+curl", out), out       # the check is allowed
    assert re.search(r"jump01\s+allow\s+ssh jump01.example.com true", out), out
    assert "NO " not in dry[dry.index("python"):], dry                        # doctor: all ok
    assert (tmp_path / "claude-called").read_text().startswith("mcp add recall --")
    block = (home / ".claude" / "CLAUDE.md").read_text()
    assert "recall_search" in block
