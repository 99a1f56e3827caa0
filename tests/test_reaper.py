"""Tests for recall.vault.reaper: no process a run started outlives it holding what it was given — not
one that left the run's process group (setsid, a daemon's double fork), nor the group when recall
itself is killed with SIGKILL."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from recall import db
from recall.vault.runner import Child, run, run_check
from tests.conftest import REPO

TOKEN = "reap-Zx8cV7bN6mQ5wE4r"
# the command's own child leaves its group and its parent (a daemon's double fork), writes its pid, sleeps
DAEMON = '(setsid sh -c "echo \\$\\$ > $0.tmp; mv $0.tmp $0; exec sleep 600" </dev/null >/dev/null 2>&1 &)'
UNTIL_WRITTEN = 'while [ ! -s "$0" ]; do sleep 0.05; done'

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")


@pytest.fixture
def vault(make_world):
    pytest.importorskip("cryptography")
    from recall.config import load_config
    from recall.vault import store
    make_world(secrets=f'- id: reap-token\n  kind: token\n  env: T\n  value: "{TOKEN}"\n')
    cfg = load_config()
    store.sync(db.connect(cfg.db_path), cfg)


def _gone(pid: int, within: float = 30.0) -> bool:
    """Whether `pid` ends (or is a zombie, its holdings freed) within `within` seconds; killed if not."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)          # nothing left behind, whatever the assertion says
    return False


def _pids(path, deadline: float = 30.0) -> list:
    end = time.monotonic() + deadline
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < end, f"{path} was never written"
        time.sleep(0.02)
    return [int(p) for p in path.read_text().split()]


def test_a_daemon_the_command_started_ends_with_secret_exec(vault, tmp_path):
    """`secret exec ID -- sh -c '(setsid … &)'`: the daemon left the run's group, and kept running with
    the value in its environment after recall returned."""
    from tests.conftest import run_recall
    pid_file = tmp_path / "daemon.pid"
    r = run_recall("secret", "exec", "reap-token", "--", "sh", "-c", f"{DAEMON}; {UNTIL_WRITTEN}", pid_file)
    assert r.returncode == 0, r.stderr
    assert _gone(_pids(pid_file)[0])


@pytest.mark.parametrize("killed", ["recall", "its job"])
def test_a_recall_killed_with_sigkill_takes_the_group_it_ran_with_it(vault, tmp_path, killed):
    """kill -9 of `secret exec` (nothing of recall runs after it), or of its whole job (`kill -9 %1`: its
    process group), left the child, and what it had started in its group, running with the value."""
    pid_file = tmp_path / "pids"
    script = 'sleep 600 & echo "$$ $!" > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 600'
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "secret", "exec", "reap-token", "--",
                             "sh", "-c", script, str(pid_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)        # a job of its own, as a shell starts one
    try:
        pids = _pids(pid_file)
    finally:
        if killed == "recall":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert [_gone(pid) for pid in pids] == [True, True]


def test_a_check_that_leaves_a_daemon_leaves_nothing_running(tmp_path):
    """verify's command checks (`run_check`) end the same way: what left the check's group too."""
    pid_file = tmp_path / "daemon.pid"
    assert run_check(["sh", "-c", f"{DAEMON}; {UNTIL_WRITTEN}", str(pid_file)], 30) == 0
    assert _gone(_pids(pid_file)[0])


def test_a_daemon_of_a_run_still_running_outlives_another_run_and_not_its_own(tmp_path):
    """Two runs at once (MCP calls, verify's jobs): the one that ends first leaves the other's daemon
    alone (the command may still use it); the daemon ends once its own run has."""
    con = db.connect(tmp_path / "recall.db")
    pid_file, other_done = tmp_path / "daemon.pid", tmp_path / "other-done"
    script = (f'{DAEMON}; {UNTIL_WRITTEN}; while [ ! -e "$1" ]; do sleep 0.05; done; '
              'kill -0 "$(cat "$0")" && echo daemon-alive')
    env = {"PATH": os.environ["PATH"], "T": TOKEN}

    def child(argv):
        return Child("secret.exec", "reap-token", "x", env, {"reap-token": [TOKEN]}, argv=argv, timeout=60)
    results = []
    first = threading.Thread(target=lambda: results.append(run(con, child(["sh", "-c", script, str(pid_file),
                                                                              str(other_done)]))))
    first.start()
    try:
        daemon = _pids(pid_file)[0]
        assert run(con, child(["true"])).code == 0
    finally:
        other_done.touch()
        first.join(60)
    assert (results[0].code, results[0].stdout) == (0, b"daemon-alive\n")
    assert _gone(daemon)


def test_a_signal_the_moment_a_child_starts_still_ends_it_and_the_log_says_it_ran(tmp_path, monkeypatch):
    """SIGTERM landing while recall still took hold of a child it had just started (a busy machine widens
    that moment): `secret exec`'s access log said 'not run' though the child had its values, and the child
    was left running (an MCP server or a verify sweep lives on)."""
    from recall.cli import Stopped, _stop
    from recall.vault import reaper
    con = db.connect(tmp_path / "recall.db")
    real, started = subprocess.Popen, []

    def popen(argv, **kw):
        proc = real(argv, **kw)
        if argv[0] == "sleep":
            started.append(proc)
            os.kill(os.getpid(), signal.SIGTERM)      # the signal, at the first moment it can land
        return proc
    monkeypatch.setattr(reaper.subprocess, "Popen", popen)
    before = signal.signal(signal.SIGTERM, _stop)
    try:
        with pytest.raises(Stopped):
            run(con, Child("secret.exec", "reap-token", "sleep 600", {"PATH": os.environ["PATH"], "T": TOKEN},
                           {"reap-token": [TOKEN]}, argv=["sleep", "600"], timeout=60))
    finally:
        signal.signal(signal.SIGTERM, before)
    assert _gone(started[0].pid, 5)
    assert [tuple(r) for r in con.execute("SELECT verb, verdict FROM access_log")] == [("secret.exec", "stopped")]
