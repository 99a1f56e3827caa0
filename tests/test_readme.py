"""The README's first five minutes, run as written in a fresh HOME (install lines aside)."""
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import CANARY, REPO

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
    # `recall` as the install would put it on PATH, a stand-in `claude` that records its call, and an
    # $EDITOR that first tries the sync with the placeholder still in, then pastes the token
    (bindir / "recall").write_text(f'#!/bin/sh\nexec {sys.executable} {REPO / "recall.py"} "$@"\n')
    (bindir / "claude").write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "claude-called"}\n')
    (bindir / "editor").write_text(f'#!/bin/sh\nrecall secret sync 2> {tmp_path / "refused"}; '
                                   f'echo $? > {tmp_path / "refused-code"}\n'
                                   f'sed -i "s/<paste the token>/{CANARY}/" "$1"\n')
    for tool in ("recall", "claude", "editor"):
        (bindir / tool).chmod(0o755)
    install = ("git clone", "python3 -m venv", "export PATH")
    script = "\n".join(line for line in _walkthrough().splitlines() if not line.startswith(install))
    env = {"HOME": str(home), "PATH": f"{bindir}:{os.environ['PATH']}", "LANG": "C.UTF-8",
           "EDITOR": str(bindir / "editor")}
    r = subprocess.run(["bash", "-e", "-c", script], cwd=home, env=env, capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "indexed: 1 new" in out                                           # 2. the note, indexed
    assert re.search(r"^1\. jira\.md:1 ", out, re.M), out                    #    and found
    assert (tmp_path / "refused-code").read_text().strip() == "1"            # 3. the placeholder refused
    refused = (tmp_path / "refused").read_text()
    assert "secrets.yaml:7: secret 'jira-api-token' still has a placeholder value" in refused, refused
    assert "replace the placeholder" in refused
    assert "synced 1 secrets: 1 added" in out                                #    the pasted token synced
    assert "secret exec jira-api-token -- sh -c 'curl" in out and CANARY not in out + r.stderr
    assert "Access: jump01 (host)" in out                                     # 4. the access block
    dry = out[out.index("secret:jira-api-token"):]
    assert re.search(r"secret:jira-api-token\s+allow\s+curl", out), out       # the check is allowed
    assert re.search(r"jump01\s+allow\s+ssh jump01.example.com true", out), out
    doctor = re.findall(r"^(?:ok |NO |-- ) .*$", dry, re.M)
    assert doctor[0].split()[1] == "config" and doctor[-1].split()[1:3] == ["extra", "cryptography"]
    assert not any(line.startswith("NO ") for line in doctor), "\n".join(doctor)   # doctor: all ok ('--': not used)
    assert any("secrets secrets.yaml" in line and "synced" in line for line in doctor)
    assert any(line.split()[1] == "processes" and "leaves nothing running" in line for line in doctor)
    assert (tmp_path / "claude-called").read_text().startswith("mcp add recall --")
    block = (home / ".claude" / "CLAUDE.md").read_text()
    assert "recall_search" in block
