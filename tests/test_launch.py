"""The warm helper of `recall search` (launch.py, warm.py), through real processes: the first search
starts it, later ones run in a fork of it with the caller's arguments, folder, environment and
streams, and give exactly what a search in its own process gives."""
from __future__ import annotations

import ast
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import CANARY, REPO, helper_pids, run_in_pty, stop_helpers, write_tree

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the helper runs on Linux only")


@pytest.fixture
def helper(tmp_path, config, monkeypatch):
    """A runtime folder of its own (short: a socket's path holds 107 bytes) and the helper on, with
    a short idle time; every helper started in it is killed at the end."""
    run = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.setenv("RECALL_HELPER", "60")
    yield run
    stop_helpers(str(run))
    shutil.rmtree(run, ignore_errors=True)


def _helpers(run: Path) -> list:
    return helper_pids(str(run))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _recall(*args, env=None, cwd=None, launcher=None, input=None):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([sys.executable, str(launcher or REPO / "recall.py"), *map(str, args)],
                          capture_output=True, text=True, env=full, cwd=cwd or REPO, timeout=60, input=input)


def _sockets(run: Path) -> list:
    return sorted((run / "recall").glob("*.sock")) if (run / "recall").is_dir() else []


def _wait_for(what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"still not so after {timeout:g} s")


def _status(env=None, launcher=None) -> dict:
    """launch.status() as the launcher at `launcher` sees it (the same import path, so the same socket)."""
    folder = str(Path(launcher or REPO / "recall.py").parent)
    code = (f"import sys; sys.path[0] = {folder!r}; sys.path.insert(0, {folder!r}); "
            "from recall import launch; print(repr(launch.status()))")
    full = dict(os.environ, **(env or {}))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=30)
    assert r.returncode == 0, r.stderr
    return ast.literal_eval(r.stdout)


def _answered(env=None, launcher=None) -> int:
    st = _status(env, launcher)
    assert st["state"] == "running", st
    return st["searches"]


def _warm(run: Path, env=None, launcher=None):
    """The first search (run in its own process) has started a helper; wait until it answers."""
    _wait_for(lambda: _status(env, launcher)["state"] == "running")


def test_the_first_search_starts_the_helper_and_the_next_ones_are_answered_by_it(helper):
    assert _recall("index").returncode == 0
    first = _recall("search", "failover")
    assert first.returncode == 0 and "INC-10963-db-failover.md" in first.stdout, first.stderr
    _warm(helper)
    (sock,) = _sockets(helper)
    assert oct(sock.stat().st_mode & 0o777) == "0o600"
    assert oct((helper / "recall").stat().st_mode & 0o777) == "0o700"
    before = _answered()
    again = _recall("search", "failover")
    assert (again.returncode, again.stdout, again.stderr) == (first.returncode, first.stdout, first.stderr)
    assert _answered() == before + 1
    doctor = _recall("doctor")
    line = next(line for line in doctor.stdout.splitlines() if "search helper" in line)
    said = f"{before + 1} search{'' if before + 1 == 1 else 'es'} answered"
    assert line.startswith("ok") and said in line and str(sock) in line, line


CASES = [
    ("search", "failover"),                         # hits
    ("search", "--json", "INC-10963"),              # an identifier, as JSON
    ("--json", "search", "nothing-here-zzz"),       # the verb after an option; no hits
    ("search", "--mode", "sideways", "x"),          # a usage error: 2 and the usage
    ("search",),                                    # no query
    ("search", "-n", "1", "--", "-rollback"),       # words after '--'
    ("search", "--help"),                           # argparse's help, and its exit
]


def test_a_search_answered_by_the_helper_is_the_search_in_its_own_process(helper):
    """Output, errors and exit code, case by case, are those of RECALL_HELPER=off."""
    assert _recall("index").returncode == 0
    _recall("search", "warm-up")
    _warm(helper)
    before = _answered()
    for case in CASES:
        alone = _recall(*case, env={"RECALL_HELPER": "off"})
        warm = _recall(*case)
        assert (warm.returncode, warm.stdout, warm.stderr) == (alone.returncode, alone.stdout, alone.stderr), case
    assert _answered() == before + len(CASES)
    codes = {_recall(*case).returncode for case in CASES}
    assert codes == {0, 2}


def test_a_value_in_the_vault_stays_masked_in_a_search_the_helper_answers(helper, tmp_path, notes, config):
    """The fork loads the vault's values to mask them, as a search in its own process does; the
    helper itself never holds one (it only forks), and nothing of it is written anywhere."""
    pytest.importorskip("cryptography")
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(f"- id: deploy-token\n  service: deploy\n  value: {CANARY}\n")
    secrets.chmod(0o600)
    config(f"secrets: [{secrets}]\n")
    assert _recall("secret", "sync").returncode == 0
    (notes / "deploy.md").write_text(f"# Deploy key\n\nthe failover token is {CANARY} for now\n")
    assert _recall("index").returncode == 0
    _recall("search", "x")
    _warm(helper)
    before = _answered()
    for case in (("search", "failover", "token"), ("search", "--json", "deploy")):
        warm = _recall(*case)
        assert warm.returncode == 0 and "deploy.md" in warm.stdout, warm.stderr
        assert CANARY not in warm.stdout + warm.stderr
    assert _answered() == before + 2
    for pid in helper_pids(str(helper), forks=True):         # the helper, and its spare fork
        assert CANARY.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    for path in [*helper.rglob("*")]:
        assert not path.is_file() or CANARY.encode() not in path.read_bytes()


def test_each_search_has_the_callers_environment_and_folder(helper, tmp_path, config):
    """One helper, two callers: each search reads the config its own environment (or its folder,
    for a relative --config) names, not the first caller's."""
    assert _recall("index").returncode == 0
    other = write_tree(tmp_path / "other", {"kafka.md": "# Kafka consumer lag\n\nrebalance storms after deploys\n"})
    (tmp_path / "cfg2").mkdir()
    (tmp_path / "cfg2" / "other.yaml").write_text(f"sources:\n  - name: other\n    path: {other}\n")
    env2 = {"RECALL_CONFIG": str(tmp_path / "cfg2" / "other.yaml"), "RECALL_HOME": str(tmp_path / "state2")}
    assert _recall("index", env=env2).returncode == 0
    _recall("search", "x")
    _warm(helper)
    before = _answered()
    mine = _recall("search", "rebalance")
    theirs = _recall("search", "rebalance", env=env2)
    relative = _recall("--config", "other.yaml", "search", "rebalance", env={"RECALL_HOME": env2["RECALL_HOME"]},
                       cwd=tmp_path / "cfg2")
    assert "kafka.md" not in mine.stdout and "kafka.md" in theirs.stdout and "kafka.md" in relative.stdout
    assert _answered() == before + 3


def test_a_search_on_a_terminal_writes_to_that_terminal(helper):
    """The helper's fork writes to the caller's own terminal (a real pseudo-terminal here)."""
    assert _recall("index").returncode == 0
    _recall("search", "x")
    _warm(helper)
    before = _answered()
    code, seen = run_in_pty([sys.executable, str(REPO / "recall.py"), "search", "failover"])
    assert code == 0 and b"INC-10963-db-failover.md" in seen and b"\r\n" in seen
    assert _answered() == before + 1


def _open_by_forks(run: Path, name: str) -> bool:
    """Whether a fork of the helper (its spare) holds a file called `name` open."""
    for pid in set(helper_pids(str(run), forks=True)) - set(helper_pids(str(run))):
        try:
            if any(os.readlink(fd).endswith(name) for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return True
        except OSError:
            pass
    return False


def test_the_index_opened_ahead_is_never_older_than_the_one_on_disk(helper, tmp_path, notes):
    """The spare opens the last search's index ahead; a note indexed since (the same file), or an
    index made anew (another file at the same path), is what the next search reads."""
    assert _recall("index").returncode == 0
    _recall("search", "x")
    _warm(helper)
    _recall("search", "failover")                   # the helper learns which index its callers read
    _wait_for(lambda: _open_by_forks(helper, "recall.db"))
    (notes / "zebra.md").write_text("# Zebra crossing\n\nthe zebrafish incident\n")
    assert _recall("index").returncode == 0
    assert "zebra.md" in _recall("search", "zebrafish").stdout
    _wait_for(lambda: _open_by_forks(helper, "recall.db"))
    for path in (tmp_path / "state").glob("recall.db*"):
        path.unlink()
    (notes / "zebra.md").write_text("# Okapi\n\nthe okapi incident\n")
    assert _recall("index").returncode == 0
    before = _answered()
    r = _recall("search", "okapi")
    assert "zebra.md" in r.stdout and "no notes match 'zebrafish'" in _recall("search", "zebrafish").stdout
    assert _answered() == before + 2


def test_python_m_recall_from_any_folder_is_answered_by_one_helper(helper, tmp_path):
    """`python -m recall` puts the current folder first on the import path; one helper still serves
    every folder (the folder is not part of what the helper is for)."""
    assert _recall("index").returncode == 0
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def search_in(folder):
        folder.mkdir(exist_ok=True)
        return subprocess.run([sys.executable, "-m", "recall", "search", "failover"], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=60)
    first = search_in(tmp_path / "a")
    assert first.returncode == 0 and "INC-10963" in first.stdout
    _warm(helper)
    before = _answered()
    for name in ("b", "c", "a"):
        assert search_in(tmp_path / name).stdout == first.stdout
    assert _answered() == before + 3 and len(_sockets(helper)) == 1


def test_the_helper_runs_searches_and_nothing_else(helper, tmp_path):
    """A request made by hand (not by launch.py) for another verb is refused: the helper's reach
    is `recall search`, whatever reaches its socket."""
    assert _recall("index").returncode == 0
    _recall("search", "x")
    _warm(helper)
    code = (f"import sys; sys.path[0] = {str(REPO)!r}; sys.path.insert(0, {str(REPO)!r}); "
            "from recall import launch; print('code', launch.by_helper(sys.argv[1:]))")
    for argv in (["doctor"], ["secret", "get", "jira-api-token"], ["index", "--full"]):
        r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
        assert r.stdout.splitlines()[-1] == "code 2", r.stdout + r.stderr
        assert r.stderr == "recall: the search helper runs `recall search` only\n"


def test_nonsense_on_the_socket_leaves_the_helper_answering_and_holding_nothing(helper):
    """Requests cut short, not numbered, or carrying descriptors and then nothing: the helper drops
    each, keeps none of the descriptors sent with them, and still answers the next search."""
    import socket
    assert _recall("index").returncode == 0
    _recall("search", "x")
    _warm(helper)
    (pid,) = _helpers(helper)
    (path,) = _sockets(helper)
    before = len(os.listdir(f"/proc/{pid}/fd"))
    for payload in (b"100\nshort", b"not a number\n", b"", b"5\n"):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(path))
            with open(os.devnull) as null:
                fds = [null.fileno()] * 4
                sock.sendmsg([payload or b"\n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                     b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))])
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(5)
            assert sock.recv(100) in (b"", b"stale\n")
    r = _recall("search", "failover")
    assert r.returncode == 0 and "INC-10963" in r.stdout
    assert _helpers(helper) == [pid]
    # the search's fork reports which index it read just after it answers: then the helper holds
    # what it held before
    _wait_for(lambda: len(os.listdir(f"/proc/{pid}/fd")) == before, timeout=5)


def test_searches_at_the_same_time_each_get_their_own_answer(helper):
    assert _recall("index").returncode == 0
    _recall("search", "x")
    _warm(helper)
    queries = ["failover", "jump01.example.com", "certificate", "INC-10963", "standup", "rollback"] * 2
    alone = {q: _recall("search", q, env={"RECALL_HELPER": "off"}).stdout for q in set(queries)}
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda q: _recall("search", q), queries))
    assert [r.stdout for r in got] == [alone[q] for q in queries]


def test_an_edited_recall_is_never_answered_by_the_old_code(helper, tmp_path):
    """The helper answers only the code it loaded: after an edit, the search runs in its own
    process with the new code, and a new helper (a new socket) is started for it."""
    copy = tmp_path / "checkout"
    shutil.copytree(REPO / "recall", copy / "recall", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "recall.py", copy / "recall.py")
    launcher = copy / "recall.py"
    assert _recall("index", launcher=launcher).returncode == 0
    _recall("search", "x", launcher=launcher)
    _warm(helper, launcher=launcher)
    old_sockets = _sockets(helper)
    snippets = copy / "recall" / "cli.py"
    text = snippets.read_text()
    marker = 'lines.append(f"no notes match {result.query!r}")'
    assert marker in text
    snippets.write_text(text.replace(marker, 'lines.append(f"edited: nothing for {result.query!r}")'))
    r = _recall("search", "zzz-nothing", launcher=launcher)
    assert "edited: nothing for 'zzz-nothing'" in r.stdout, r.stdout + r.stderr
    _wait_for(lambda: len(_sockets(helper)) == 2)
    _warm(helper, launcher=launcher)
    r = _recall("search", "zzz-nothing", launcher=launcher)
    assert "edited: nothing for 'zzz-nothing'" in r.stdout
    assert set(old_sockets) < set(_sockets(helper))


def test_a_killed_helper_is_replaced_and_no_search_is_lost(helper):
    assert _recall("index").returncode == 0
    _recall("search", "x")
    _warm(helper)
    (pid,) = _helpers(helper)
    os.kill(pid, signal.SIGKILL)
    _wait_for(lambda: not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes()[:200])
    r = _recall("search", "failover")                  # its socket is left behind: nothing answers it
    assert r.returncode == 0 and "INC-10963-db-failover.md" in r.stdout, r.stderr
    _warm(helper)
    assert _helpers(helper) and pid not in _helpers(helper)
    assert len(_sockets(helper)) == 1 and len(list((helper / "recall").glob("*.lock"))) == 1


def test_a_new_helper_sweeps_away_what_killed_ones_left(helper):
    folder = helper / "recall"
    folder.mkdir(mode=0o700)
    for name in ("search-00000000deadbeef.sock", "search-00000000deadbeef.sock.lock"):
        (folder / name).write_bytes(b"")            # as a helper of older code, killed, leaves them
    assert _recall("index").returncode == 0
    _recall("search", "x")
    _warm(helper)
    assert [p.name for p in _sockets(helper)] != ["search-00000000deadbeef.sock"]
    assert not (folder / "search-00000000deadbeef.sock.lock").exists() and len(_sockets(helper)) == 1


def test_a_socket_folder_others_may_enter_is_not_used(helper):
    assert _recall("index").returncode == 0
    folder = helper / "recall"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    r = _recall("search", "failover")
    assert r.returncode == 0 and "INC-10963-db-failover.md" in r.stdout
    time.sleep(1.0)
    assert _sockets(helper) == [] and _helpers(helper) == []
    doctor = _recall("doctor")
    line = next(line for line in doctor.stdout.splitlines() if "search helper" in line)
    assert line.startswith("NO") and f"{folder} is not a folder of this user alone" in line
    folder.rmdir()
    folder.symlink_to(tempfile.mkdtemp(prefix="rx", dir="/tmp"))      # a link is not the folder itself
    assert _recall("search", "failover").returncode == 0
    time.sleep(1.0)
    assert _helpers(helper) == []


def test_off_starts_nothing_and_a_bad_value_is_named(helper):
    assert _recall("index").returncode == 0
    r = _recall("search", "failover", env={"RECALL_HELPER": "off"})
    assert r.returncode == 0 and "INC-10963" in r.stdout
    time.sleep(1.0)
    assert _helpers(helper) == [] and _sockets(helper) == []
    assert _status(env={"RECALL_HELPER": "off"})["state"] == "off"
    bad = _recall("search", "failover", env={"RECALL_HELPER": "soon"})
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == ("recall: RECALL_HELPER is 'soon': give `off`, or the seconds the search helper stays "
                          "after its last search (1-86400)\n")
    doctor = _recall("doctor", env={"RECALL_HELPER": "soon"})
    line = next(line for line in doctor.stdout.splitlines() if "search helper" in line)
    assert line.startswith("NO") and "RECALL_HELPER is 'soon'" in line and doctor.returncode == 1


def test_a_helper_stopped_with_kill_takes_its_socket_and_its_spare(helper):
    assert _recall("index").returncode == 0
    _recall("search", "x")
    _warm(helper)
    _recall("search", "failover")
    forks = _wait_for(lambda: set(helper_pids(str(helper), forks=True)) - set(_helpers(helper)))
    (pid,) = _helpers(helper)
    os.kill(pid, signal.SIGTERM)
    _wait_for(lambda: not _sockets(helper) and not helper_pids(str(helper), forks=True))
    assert list((helper / "recall").iterdir()) == [] and forks


def test_an_idle_helper_leaves_and_takes_its_socket(helper):
    assert _recall("index").returncode == 0
    _recall("search", "failover", env={"RECALL_HELPER": "1"})
    pids = _wait_for(lambda: _helpers(helper))
    _wait_for(lambda: not _sockets(helper) and all(not Path(f"/proc/{p}").exists() for p in pids), timeout=30)
    assert list((helper / "recall").iterdir()) == []


@pytest.fixture
def hanging_remote(helper, tmp_path, config):
    """A warm helper, then a remote whose ssh never answers (a stand-in that sleeps): a search
    that waits. Yields the environment to search with; the stand-ins are stopped at the end."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text("#!/bin/sh\nexec sleep 29.5\n")
    (bindir / "ssh").chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    assert _recall("index", env=env).returncode == 0
    _recall("search", "x", env=env)
    _warm(helper, env=env)
    config("remotes:\n  - name: far\n    host: far.example.net\n    timeout: 30\n")
    yield env
    for pid in _sleeps(env):
        _kill(pid)


def test_ctrl_c_stops_the_search_in_the_helper(hanging_remote):
    """Ctrl-C (SIGINT to the caller) reaches the search in the helper, which says so and exits 130,
    as it would in its own process."""
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "search", "failover"], env=hanging_remote,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: _sleeps(hanging_remote))
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "recall: interrupted" in err, (proc.returncode, out, err)
    assert time.monotonic() - started < 10
    assert _answered() >= 1


def test_a_caller_that_is_killed_takes_its_search_with_it(hanging_remote, tmp_path):
    """`timeout 5 recall search …`: the caller killed, its search in the helper ends too, and
    writes nothing after it (to a file here, the caller's stdout)."""
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "search", "failover"],
                                env=hanging_remote, stdout=stdout, stderr=subprocess.DEVNULL)
    (sleeper,) = _wait_for(lambda: _sleeps(hanging_remote))
    stat = Path(f"/proc/{sleeper}/stat").read_text()
    search = int(stat[stat.rindex(")") + 2:].split()[1])          # the fork that runs ssh: the search
    assert search in helper_pids(str(hanging_remote["XDG_RUNTIME_DIR"]), forks=True)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    _wait_for(lambda: search not in helper_pids(str(hanging_remote["XDG_RUNTIME_DIR"]), forks=True), timeout=10)
    time.sleep(0.5)
    assert out.read_text() == ""


def _sleeps(env) -> list:
    """Pids of the hanging ssh stand-ins of this test (run with its PATH: another test's are not)."""
    found = []
    mark = b"PATH=" + env["PATH"].encode() + b"\x00"
    for proc in Path("/proc").iterdir():
        try:
            if (proc.name.isdigit() and (proc / "cmdline").read_bytes() == b"sleep\x0029.5\x00"
                    and mark in (proc / "environ").read_bytes()):
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def test_a_remote_search_starts_no_helper_on_the_host(helper, tmp_path, config):
    """`recall search` asks its remotes over ssh; what runs there (here: this checkout, through an
    ssh that runs the command line locally, with this test's runtime folder) starts no helper."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text("#!/bin/sh\nfor last; do :; done\nexec env -u RECALL_HELPER sh -c \"$last\"\n")
    (bindir / "ssh").chmod(0o755)
    config(f"remotes:\n  - name: far\n    host: far.example.net\n    path: {REPO}\n    config: {config.path}\n")
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "RECALL_HELPER": "off"}
    assert _recall("index", env=env).returncode == 0
    r = _recall("search", "--json", "failover", env=env)
    assert r.returncode == 0 and '"far"' in r.stdout, r.stdout + r.stderr
    time.sleep(1.0)
    assert _helpers(helper) == [] and _sockets(helper) == []
