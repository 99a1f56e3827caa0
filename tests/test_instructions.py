"""The agent's rules: the block names the exact tools; --install writes it between markers, idempotently."""
import re

import pytest

from recall import mcp_server
from recall.errors import RecallError
from recall.instructions import BEGIN, END, install, rules_text

TOOL_NAMES = {fn.__name__ for fn in mcp_server.TOOLS}


def test_the_rules_name_only_real_tools_and_every_rule_of_the_issue():
    text = rules_text()
    named = set(re.findall(r"`(recall_[a-z_]+)`", text))
    assert named <= TOOL_NAMES and {"recall_search", "recall_read", "recall_secret_find",
                                    "recall_secret_show", "recall_secret_command", "recall_access_find",
                                    "recall_access_show", "recall_access_exec", "recall_verify"} == named
    flat = " ".join(text.split())
    assert "Search first, never grep the notes." in flat and flat.index("`recall_search`") < flat.index("grep, cat")
    # credentials: find → show → command → run that line
    cred = flat[flat.index("Credentials only through recall"):]
    assert (cred.index("`recall_secret_find`") < cred.index("`recall_secret_show`")
            < cred.index("`recall_secret_command`") < cred.index("run that line"))
    assert "Never ask for or print a secret value" in flat
    assert "only through recall's access entries" in flat and "`recall_access_exec`" in flat
    vpn = flat[flat.index("`prerequisite 'vpn' is down`"):]
    assert "ask me to connect it" in vpn and "Do not debug credentials" in vpn
    verify = flat[flat.index("Run `recall_verify`"):]
    assert "before a task that spans several systems" in verify
    assert "after any authentication error" in verify and "Act on the reason" in verify


def test_the_block_is_between_markers_and_short():
    text = rules_text()
    assert text.startswith(BEGIN + "\n") and text.endswith(END + "\n")
    assert len(text) < 3000                      # it is read at the start of every agent session


def test_install_creates_then_is_idempotent(tmp_path):
    path = tmp_path / "CLAUDE.md"
    assert install(path) == f"created {path} with the recall rules"
    assert path.read_text() == rules_text()
    before = path.stat().st_mtime_ns
    assert install(path) == f"{path} already has the current recall rules"
    assert path.read_text() == rules_text() and path.stat().st_mtime_ns == before


def test_install_appends_to_an_existing_file_and_keeps_it(tmp_path):
    path = tmp_path / "AGENTS.md"
    path.write_text("# My rules\n\n- be brief\n")
    path.chmod(0o640)
    assert install(path) == f"added the recall rules to {path}"
    assert path.read_text() == "# My rules\n\n- be brief\n\n" + rules_text()
    assert oct(path.stat().st_mode & 0o777) == "0o640"
    install(path)
    assert path.read_text().count(BEGIN) == 1


def test_install_replaces_an_old_block_only(tmp_path):
    path = tmp_path / "CLAUDE.md"
    head, tail = "# Mine\n\nkeep this\n\n", "\n## After\n\nand this, exactly\n"
    path.write_text(head + "<!-- recall:begin old wording -->\nold rules\n" + END + "\n" + tail)
    assert install(path) == f"updated the recall rules in {path}"
    text = path.read_text()
    assert text.startswith(head + rules_text()) and text.endswith(tail) and "old rules" not in text
    assert install(path).endswith("already has the current recall rules")


def test_install_keeps_crlf_line_endings(tmp_path):
    path = tmp_path / "CLAUDE.md"
    path.write_bytes(b"# Windows\r\nline\r\n")
    install(path)
    raw = path.read_bytes()
    assert raw.startswith(b"# Windows\r\nline\r\n\r\n") and b"\n" not in raw.replace(b"\r\n", b"")
    assert install(path).endswith("already has the current recall rules")


def test_install_through_a_symlink_keeps_the_link(tmp_path):
    real = tmp_path / "dotfiles" / "CLAUDE.md"
    real.parent.mkdir()
    real.write_text("# shared\n")
    link = tmp_path / "CLAUDE.md"
    link.symlink_to(real)
    install(link)
    assert link.is_symlink() and rules_text() in real.read_text()


@pytest.mark.parametrize("body, where", [
    (f"{BEGIN}\nno end\n", "line 2"),
    (f"{END}\n{BEGIN}\n", "lines 2, 3"),
    (f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n", "lines 2, 3, 4, 5"),
])
def test_unbalanced_markers_are_an_error_and_leave_the_file(tmp_path, body, where):
    path = tmp_path / "CLAUDE.md"
    path.write_text("# x\n" + body)
    with pytest.raises(RecallError, match=rf"the recall markers are unbalanced \({where}\) — "):
        install(path)
    assert path.read_text() == "# x\n" + body


def test_install_creates_the_folder_of_a_new_agent(tmp_path):
    path = tmp_path / "home" / ".claude" / "CLAUDE.md"          # before the agent's first run
    assert install(path) == f"created {path} with the recall rules"
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RecallError, match="cannot create the folder"):
        install(blocker / "CLAUDE.md")


def test_cli_prints_the_block_and_installs_it(cli, tmp_path):
    code, out, err = cli("instructions")
    assert code == 0 and out.startswith(rules_text()) and err == ""
    assert '"mcpServers"' in out[len(rules_text()):] and "claude mcp add recall" in out   # and how to start it
    target = tmp_path / "CLAUDE.md"
    code, out, _ = cli("instructions", "--install", target)
    assert code == 0 and out == f"created {target} with the recall rules\n"
    code, out, _ = cli("instructions", "--install", target)
    assert code == 0 and out == f"{target} already has the current recall rules\n"


def test_a_path_that_is_not_a_regular_file_is_refused_and_left_as_it_is(tmp_path):
    """A FIFO (its read would wait for a writer forever) or a device (/dev/null would be replaced by a file):
    refused, through a symlink too."""
    import os
    import stat

    from tests.conftest import run_recall
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "link").symlink_to(fifo)
    for name in ("fifo", "link"):
        r = run_recall("instructions", "--install", tmp_path / name, timeout=60)
        assert r.returncode == 1 and r.stderr.startswith(f"recall: {fifo} is not a regular file — "), r.stderr
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
