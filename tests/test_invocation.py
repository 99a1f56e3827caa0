"""Which program a handed-out line starts with (the end-to-end proof is tests/test_install.py)."""
import os
import sys

from recall import config as invocation
from tests.conftest import REPO


def _env_with_script(tmp_path, shebang: str):
    """A venv-like bin/ folder: a python (a link to this one) and a `recall` script with `shebang`."""
    bin_ = tmp_path / "env" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "python").symlink_to(sys.executable)
    script = bin_ / "recall"
    script.write_text(shebang + "from recall.cli import run\nrun()\n")
    script.chmod(0o755)
    return bin_, script


def test_the_console_script_of_this_interpreter_by_absolute_path(tmp_path, monkeypatch):
    bin_, script = _env_with_script(tmp_path, f"#!{tmp_path}/env/bin/python\n")
    monkeypatch.setattr(sys, "executable", str(bin_ / "python"))
    monkeypatch.setattr(sys, "argv", [str(script), "mcp"])
    assert invocation.launcher() == [str(script)]


def test_pips_long_path_shebang_form_is_read(tmp_path, monkeypatch):
    bin_, script = _env_with_script(tmp_path, f"#!/bin/sh\n'''exec' \"{tmp_path}/env/bin/python\" \"$0\" \"$@\"\n' '''\n")
    monkeypatch.setattr(sys, "executable", str(bin_ / "python"))
    monkeypatch.setattr(sys, "argv", ["pytest"])
    assert invocation.launcher() == [str(script)]


def test_another_environments_script_is_not_taken(tmp_path, monkeypatch):
    """A `recall` whose shebang names another Python would run another install: never handed out."""
    bin_, script = _env_with_script(tmp_path, "#!/usr/bin/python3\n")
    monkeypatch.setattr(sys, "executable", str(bin_ / "python"))
    monkeypatch.setattr(sys, "argv", ["pytest"])
    monkeypatch.setattr(invocation, "_importable", lambda top: False)
    assert invocation.launcher() == [str(bin_ / "python"), str(REPO / "recall.py")]


def test_started_by_the_checkouts_launcher_it_hands_out_the_launcher(monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(REPO / "recall.py"), "mcp"])
    assert invocation.launcher() == [os.path.abspath(sys.executable), str(REPO / "recall.py")]


def test_importable_without_a_script_it_is_python_dash_m(tmp_path, monkeypatch):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "python").symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(bin_ / "python"))
    monkeypatch.setattr(sys, "argv", ["pytest"])
    monkeypatch.setattr(invocation, "console_script", lambda started_by="": None)
    monkeypatch.setattr(invocation, "_importable", lambda top: True)
    assert invocation.launcher() == [str(bin_ / "python"), "-m", "recall"]
