"""`make test`'s set-up (.ci/install): a project-local venv reused while pyproject.toml is unchanged."""
import hashlib
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _install(tmp_path, venv, python):
    """.ci/install with stand-ins for the system tools on PATH, so it never reaches for apt-get."""
    bindir = tmp_path / "tools"
    bindir.mkdir(exist_ok=True)
    for tool in ("sshd", "ssh", "openssl", "unshare", "kubectl"):
        (bindir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bindir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "VENV": str(venv), "PYTHON": str(python)}
    return subprocess.run(["bash", str(REPO / ".ci" / "install")], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def _venv(tmp_path, stamp: str):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / ".recall-stamp").write_text(stamp + "\n")
    return venv


def test_a_venv_built_from_this_pyproject_is_reused(tmp_path):
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes() + (REPO / ".ci" / "install").read_bytes())
    venv = _venv(tmp_path, digest.hexdigest())
    r = _install(tmp_path, venv, sys.executable)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"make test: {venv} is up to date with pyproject.toml\n"


def test_a_changed_pyproject_rebuilds_and_an_old_python_is_named(tmp_path):
    venv = _venv(tmp_path, "0" * 64)                 # built from another pyproject.toml
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\n[ \"$1\" = -V ] && exec echo 'Python 3.9.18'\nexit 1\n")
    old.chmod(0o755)
    r = _install(tmp_path, venv, old)
    assert r.returncode == 1 and "up to date" not in r.stdout
    assert "Python 3.9.18; the test extras (mcp) need Python ≥ 3.10: make test PYTHON=python3.11" in r.stderr
    assert (venv / ".recall-stamp").read_text() == "0" * 64 + "\n"      # nothing touched


def test_ci_runs_exactly_the_readme_commands():
    lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.startswith(("#", "set ", "cd ", "export "))]
    assert lines == ["make test", "make test-core"]
    readme = (REPO / "README.md").read_text()
    assert "make demo    #" in readme and "make test    #" in readme


def test_property_tests_are_quick_here_and_full_in_ci():
    import pytest
    pytest.importorskip("hypothesis")
    probe = "import tests.conftest, hypothesis; print(hypothesis.settings.default.max_examples)"
    r = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CI": "true", "HYPOTHESIS_PROFILE": ""})
    assert r.stdout.strip() == "500", r.stderr
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes") and not os.environ.get("HYPOTHESIS_PROFILE"):
        import hypothesis
        assert hypothesis.settings.default.max_examples == 60           # this run: the quick profile


def test_a_long_test_is_never_silent_under_make_test():
    """make test gives pytest a descriptor for a line every 10 s while one test runs long (here every
    half second, through the same hooks pytest calls)."""
    script = ("import time, tests.conftest as c; c.pytest_sessionstart(None); "
              "c.pytest_runtest_logstart('tests/test_x.py::test_long', None); time.sleep(1.8)")
    r = subprocess.run(f"{sys.executable} -c \"{script}\" 3>&1", shell=True, cwd=REPO, capture_output=True,
                       text=True, timeout=120,
                       env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
                            "RECALL_TEST_HEARTBEAT_FD": "3", "RECALL_TEST_HEARTBEAT_SECONDS": "0.5"})
    assert r.returncode == 0, r.stderr
    beats = [line.strip() for line in r.stdout.splitlines() if line.strip()]
    assert len(beats) >= 2 and all(re.fullmatch(r"… tests/test_x\.py::test_long: \d+ s so far", b) for b in beats), beats
    assert "RECALL_TEST_HEARTBEAT_FD=3" in (REPO / "Makefile").read_text()


def test_make_test_runs_a_lint_that_can_fail(tmp_path):
    """make test runs ruff first, with the project's rules: the tree is clean, and an unused import fails it."""
    pytest.importorskip("ruff")
    assert "-m ruff check" in (REPO / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    clean = subprocess.run([sys.executable, "-m", "ruff", "check", "--quiet", "."], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stdout
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    dirty = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(REPO / "ruff.toml"), str(bad)],
                           capture_output=True, text=True, timeout=120)
    assert dirty.returncode == 1 and "F401" in dirty.stdout
