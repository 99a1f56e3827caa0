"""Tests for recall.runner: injection, masking, streaming, exit codes, timeouts, no deadlock."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import pytest

from recall import db
from recall.errors import RecallError
from recall.vault.runner import Child, RunResult, run

TOKEN = "tok-4f9a8b7c6d5e"
PASSWORD = "hunter2-Correct-Horse"
MASKER = {"api-token": [TOKEN], "sudo-password": [PASSWORD]}      # {secret id: [values]} masked
CON = None


@pytest.fixture(scope="module", autouse=True)
def _db(tmp_path_factory):
    """The DB the one runner writes its audit rows to."""
    global CON
    CON = db.connect(tmp_path_factory.mktemp("runner") / "recall.db")
    yield
    CON.close()


def run_masked(argv, *, env, masker, stdin=None, out=None, err=None, timeout=None, cwd=None,
               given=()) -> RunResult:
    """A child through the one runner, as `secret exec` starts one: `masker`'s values masked in both
    outputs, exactly `env`, `stdin` written then closed; `given`: the ids whose values it holds."""
    child = Child("secret.exec", "test", " ".join(map(str, argv)), env, masker, argv=list(argv), stdin=stdin,
                  timeout=timeout, cwd=cwd, given=given)
    return run(CON, child, out, err)


def base_env(**extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.update(extra)
    return env


def alive(pid: int) -> bool:
    """True while pid runs; a zombie waiting for a reaper counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


class Recorder:
    """A binary file-like `out` that records each write and runs a hook on it."""

    def __init__(self, on_write=None):
        self.writes: list[bytes] = []
        self.flushes = 0
        self.on_write = on_write

    def write(self, data: bytes) -> int:
        self.writes.append(bytes(data))
        if self.on_write:
            self.on_write(b"".join(self.writes))
        return len(data)

    def flush(self) -> None:
        self.flushes += 1

    @property
    def data(self) -> bytes:
        return b"".join(self.writes)


def test_env_injection_is_masked_in_output():
    result = run_masked(py("import os; print('token is', os.environ['API_TOKEN'])"),
                        env=base_env(API_TOKEN=TOKEN), masker=MASKER)
    assert result == RunResult(0, b"token is [recall:api-token]\n", b"", False)


def test_env_is_the_whole_environment(monkeypatch):
    monkeypatch.setenv("RECALL_TEST_PARENT_ONLY", "leak")
    result = run_masked(py("import os; print(os.environ.get('RECALL_TEST_PARENT_ONLY'))"),
                        env=base_env(), masker=MASKER)
    assert result.stdout == b"None\n"


def test_secret_on_stderr_is_masked():
    result = run_masked(py("import os, sys; sys.stderr.write('err ' + os.environ['T'])"),
                        env=base_env(T=TOKEN), masker=MASKER)
    assert result.stderr == b"err [recall:api-token]"
    assert result.stdout == b""


def test_stdin_injection_like_sudo_s():
    child = ("import sys\n"
             "sys.stderr.write('[sudo] password for ops: '); sys.stderr.flush()\n"
             "line = sys.stdin.readline()\n"
             "ok = line == 'hunter2-Correct-Horse\\n'\n"
             "print('authenticated' if ok else 'wrong password'); print('echo:', line.strip())\n"
             "print('rest:', repr(sys.stdin.read()))\n")
    result = run_masked(py(child), env=base_env(), masker=MASKER, stdin=(PASSWORD + "\n").encode())
    assert result.code == 0
    assert result.stdout == b"authenticated\necho: [recall:sudo-password]\nrest: ''\n"
    assert result.stderr == b"[sudo] password for ops: "


def test_stdin_is_dev_null_without_input():
    child = "import sys, os; print(repr(sys.stdin.read()), os.path.realpath('/proc/self/fd/0'))"
    result = run_masked(py(child), env=base_env(), masker=MASKER)
    assert result.stdout.startswith(b"'' ")
    if sys.platform.startswith("linux"):
        assert result.stdout == b"'' /dev/null\n"


def test_output_streams_while_the_child_runs(tmp_path):
    marker = tmp_path / "first-part-arrived"
    child = ("import os, sys, time\n"
             "print('first part', flush=True)\n"
             "time.sleep(0.5)\n"
             f"path = {str(marker)!r}\n"
             "for _ in range(200):\n"
             "    if os.path.exists(path): break\n"
             "    time.sleep(0.05)\n"
             "print('second part; saw first delivered:', os.path.exists(path))\n")

    def on_write(data: bytes) -> None:
        if b"first part" in data:
            marker.touch()

    out, err = Recorder(on_write), Recorder()
    result = run_masked(py(child), env=base_env(), masker=MASKER, out=out, err=err)
    assert result.code == 0
    assert result.stdout == b"" and result.stderr == b""
    assert out.data == b"first part\nsecond part; saw first delivered: True\n"
    assert out.writes[0] == b"first part\n"
    assert out.flushes >= len(out.writes)


def test_secret_split_across_writes_is_masked_when_streaming():
    child = ("import os, sys, time\n"
             "v = os.environ['T']\n"
             "sys.stdout.write('a ' + v[:7]); sys.stdout.flush(); time.sleep(0.2)\n"
             "sys.stdout.write(v[7:] + ' b\\n')\n")
    out = Recorder()
    run_masked(py(child), env=base_env(T=TOKEN), masker=MASKER, out=out)
    assert out.data == b"a [recall:api-token] b\n"
    assert all(TOKEN[:7].encode() not in w for w in out.writes)


@pytest.mark.parametrize("tail", ["Password: ", TOKEN[:7]])
def test_a_held_tail_is_released_by_time_whatever_it_is(tmp_path, tail):
    """A prompt without a newline shows while the child waits; a tail that begins a secret (fewer
    than 8 of its characters: no piece) is released after the same idle time (never held longer:
    no signal to the child)."""
    marker = tmp_path / "seen"
    child = ("import os, sys, time\n"
             f"sys.stdout.write({tail!r}); sys.stdout.flush()\n"
             "for _ in range(100):\n"
             f"    if os.path.exists({str(marker)!r}): break\n"
             "    time.sleep(0.05)\n"
             f"print(' seen' if os.path.exists({str(marker)!r}) else ' never')\n")
    started = []

    def on_write(data: bytes) -> None:
        if tail.encode() in data:
            started.append(time.monotonic())
            marker.touch()

    out = Recorder(on_write)
    begin = time.monotonic()
    result = run_masked(py(child), env=base_env(), masker=MASKER, out=out)
    assert result.code == 0
    assert out.data == tail.encode() + b" seen\n"
    assert started and started[0] - begin < 4


@pytest.mark.parametrize("code", [0, 1, 3, 42, 255])
def test_exit_code_propagates(code):
    assert run_masked(py(f"import sys; sys.exit({code})"), env=base_env(), masker=MASKER).code == code


def test_killed_by_signal_is_128_plus_n():
    result = run_masked(py("import os, signal; os.kill(os.getpid(), signal.SIGTERM)"),
                        env=base_env(), masker=MASKER)
    assert result.code == 128 + signal.SIGTERM
    assert not result.timed_out


def test_timeout_kills_the_process_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    child = ("import subprocess, sys, time\n"
             "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
             f"open({str(pidfile)!r}, 'w').write(str(g.pid))\n"
             "print('started', flush=True)\n"
             "time.sleep(60)\n")
    started = time.monotonic()
    result = run_masked(py(child), env=base_env(), masker=MASKER, timeout=1.0)
    assert time.monotonic() - started < 30
    assert result.timed_out and result.code == 124
    assert result.stdout == b"started\n"
    grandchild = int(pidfile.read_text())
    for _ in range(200):
        if not alive(grandchild):
            break
        time.sleep(0.05)
    else:
        pytest.fail("grandchild survived the timeout")


def test_timeout_escalates_to_sigkill():
    child = ("import signal, time\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "print('ignoring TERM', flush=True)\n"
             "time.sleep(60)\n")
    result = run_masked(py(child), env=base_env(), masker=MASKER, timeout=0.5)
    assert result.timed_out and result.code == 124
    assert result.stdout == b"ignoring TERM\n"


def test_child_that_closes_its_pipes_still_times_out():
    child = "import os, time; os.close(1); os.close(2); time.sleep(60)"
    result = run_masked(py(child), env=base_env(), masker=MASKER, timeout=0.5)
    assert result.timed_out and result.code == 124


def test_background_grandchild_holding_pipes_does_not_hang():
    child = ("import subprocess, sys\n"
             "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
             "sys.stderr.write(str(p.pid))\n"
             "print('parent done')\n")
    started = time.monotonic()
    result = run_masked(py(child), env=base_env(), masker=MASKER)
    assert time.monotonic() - started < 20
    assert result.code == 0 and result.stdout == b"parent done\n"
    assert not _still_alive(int(result.stderr))        # it ends with the run (it holds what the run held)


def _still_alive(pid: int) -> bool:
    """Whether pid still runs a moment later (then the test kills it: nothing left behind)."""
    for _ in range(20):
        if not alive(pid):
            return False
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return True


@pytest.mark.parametrize("detach", ["nohup", "&", "disown", "trap TERM"])
def test_a_process_the_child_left_in_the_background_ends_with_the_run(tmp_path, detach):
    """`access exec ID -- 'sleep 600 &'`: the command ends, its background process (holding the
    injected secret in its environment) must not keep running after recall returns."""
    pid_file = tmp_path / "pid"
    line = {"nohup": "nohup sleep 600 >/dev/null 2>&1 &", "&": "sleep 600 &",
            "disown": "(sleep 600; echo late) &", "trap TERM": "(trap '' TERM; exec sleep 600) &"}[detach]
    then = "disown; " if detach == "disown" else ""
    result = run_masked(["bash", "-c", f"{line} echo $! > {pid_file}; {then}echo started"], env=base_env(T=TOKEN),
                        masker=MASKER, timeout=30)
    assert (result.code, result.stdout) == (0, b"started\n")
    assert not _still_alive(int(pid_file.read_text()))


def test_command_not_found():
    with pytest.raises(RecallError) as info:
        run_masked(["recall-no-such-command-xyz", "--flag"], env=base_env(T=TOKEN), masker=MASKER)
    assert str(info.value).startswith("command not found: recall-no-such-command-xyz")
    assert f"the child's: {base_env()['PATH']};" in str(info.value)      # an MCP client's bare PATH shows
    assert TOKEN not in str(info.value)


def test_a_shell_line_quoted_whole_is_told_to_go_through_a_shell_and_the_hint_runs(split_vault):
    """`-- 'a | b'` (one word, as a tired hand quotes it): no such program; the hint is the line to run,
    and it runs, masked."""
    import shlex

    from tests.conftest import run_recall
    line = 'printf "%s\\n" "$V" | cut -c1-6; echo done'
    r = run_recall("secret", "exec", "split-token", "--", line)
    assert r.returncode == 1 and "that is a whole shell line in one word" in r.stderr, r.stderr
    hint = r.stderr.rsplit("give it to a shell: -- ", 1)[1].strip()
    followed = run_recall("secret", "exec", "split-token", "--", *shlex.split(hint))
    assert (followed.returncode, followed.stdout) == (0, "[recall:split-token]\ndone\n"), followed.stderr


def test_the_id_left_out_or_an_empty_command_is_said_as_such(split_vault):
    """`secret exec -- true` took `true` for the id and suggested 'recall secret exec true -- CMD';
    `-- ''` said "command not executable: — check the file's permissions"."""
    from tests.conftest import run_recall
    r = run_recall("secret", "exec", "--", "true")
    assert (r.returncode, r.stderr) == (1, "recall: no command given, and no secret 'true' — the id goes before --: "
                                           "recall secret exec ID -- true …\n")
    r = run_recall("secret", "exec", "split-token", "--", "")
    assert (r.returncode, r.stderr) == (1, "recall: the command is an empty word — recall secret exec split-token "
                                           "-- CMD …\n")


def test_missing_cwd_is_named(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(RecallError) as info:
        run_masked(py("print(1)"), env=base_env(), masker=MASKER, cwd=missing)
    assert "nope" in str(info.value)


def test_cwd_is_used(tmp_path):
    result = run_masked(py("import os; print(os.getcwd())"), env=base_env(), masker=MASKER,
                        cwd=str(tmp_path))
    assert os.path.realpath(result.stdout.decode().strip()) == os.path.realpath(str(tmp_path))


def test_empty_argv_is_an_error():
    with pytest.raises(RecallError):
        run_masked([], env=base_env(), masker=MASKER)


def test_large_output_on_both_streams_without_deadlock():
    child = ("import os, sys\n"
             "line = ('x' * 99 + '\\n').encode()\n"
             "for i in range(50000):\n"
             "    sys.stdout.buffer.write(line)\n"
             "    sys.stderr.buffer.write(line)\n"
             "    if i % 5000 == 0:\n"
             "        sys.stdout.buffer.write(os.environ['T'].encode() + b'\\n')\n")
    result = run_masked(py(child), env=base_env(T=TOKEN), masker=MASKER, timeout=60)
    assert not result.timed_out and result.code == 0
    assert len(result.stderr) == 50000 * 100
    assert result.stdout.count(b"[recall:api-token]\n") == 10
    assert TOKEN.encode() not in result.stdout
    assert len(result.stdout) == 50000 * 100 + 10 * len(b"[recall:api-token]\n")


def test_large_stdin_while_child_writes_first():
    payload = os.urandom(3_000_000)
    child = ("import sys, hashlib\n"
             "sys.stdout.buffer.write(b'y' * 2_000_000); sys.stdout.flush()\n"
             "data = sys.stdin.buffer.read()\n"
             "print(len(data), hashlib.sha256(data).hexdigest())\n")
    import hashlib
    result = run_masked(py(child), env=base_env(), masker=MASKER, stdin=payload, timeout=60)
    assert not result.timed_out and result.code == 0
    tail = result.stdout[2_000_000:]
    assert tail == f"{len(payload)} {hashlib.sha256(payload).hexdigest()}\n".encode()


def test_child_ignoring_stdin_does_not_break_the_run():
    result = run_masked(py("print('no read')"), env=base_env(), masker=MASKER,
                        stdin=b"z" * 1_000_000)
    assert result.code == 0 and result.stdout == b"no read\n"


def test_binary_output_passes_through_byte_identical():
    child = ("import sys\n"
             "sys.stdout.buffer.write(bytes(range(256)) * 1000)\n")
    result = run_masked(py(child), env=base_env(), masker=MASKER)
    assert result.stdout == bytes(range(256)) * 1000


# -- a value the child holds, printed in pieces with a pause (issue 23 point 3) ----------------

SPLIT = 'printf %s "${V:0:5}"; sleep {pause}; printf "%s\\n" "${V:5}"'
VALUE = "Zq7w-Ab3dE9fG7hJ2kL"
VAULT = f"""\
- id: split-token
  kind: token
  env: V
  value: "{VALUE}"
- id: split-stdin
  kind: password
  inject: stdin
  value: "{VALUE}-stdin"
- id: other-token
  kind: token
  value: "other-Qw8eR7tY6uI5oP"
"""


@pytest.fixture
def split_vault(make_world):
    pytest.importorskip("cryptography")
    from recall import db
    from recall.config import load_config
    from recall.vault import store as vault
    make_world(secrets=VAULT)
    cfg = load_config()
    vault.sync(db.connect(cfg.db_path), cfg)
    return cfg


@pytest.mark.parametrize("pause", ["0.6", "2"])
def test_a_value_printed_in_two_pieces_with_a_pause_stays_masked(split_vault, pause):
    from tests.conftest import run_recall
    r = run_recall("secret", "exec", "split-token", "--", "bash", "-c", SPLIT.replace("{pause}", pause))
    assert (r.returncode, r.stdout) == (0, "[recall:split-token]\n"), r.stderr
    assert VALUE[:5] not in r.stdout + r.stderr


@pytest.mark.parametrize("pause", ["0.6", "2"])
def test_a_stdin_value_printed_in_two_pieces_with_a_pause_stays_masked(split_vault, pause):
    from tests.conftest import run_recall
    script = 'read -r V; ' + SPLIT.replace("{pause}", pause)
    r = run_recall("secret", "exec", "split-stdin", "--", "bash", "-c", script)
    assert (r.returncode, r.stdout) == (0, "[recall:split-stdin]\n"), r.stderr
    assert VALUE[:5] not in r.stdout + r.stderr


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "reader gone"])
def test_a_run_stopped_midway_still_has_its_access_log_row(split_vault, tmp_path, how):
    """Ctrl-C, a SIGTERM or a closed stdout (`| head -1`) ended `secret exec` with no access-log row,
    though the child had held the value."""
    import subprocess

    from tests.conftest import REPO, run_recall
    started = tmp_path / "started"
    script = f'touch {started}; ' + ('yes "$V"' if how == "reader gone" else "sleep 60")
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "secret", "exec", "split-token", "--",
                             "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    while not started.exists() and proc.poll() is None:
        time.sleep(0.02)
    if how == "reader gone":
        assert proc.stdout.readline() == b"[recall:split-token]\n"
        proc.stdout.close()
    else:
        proc.send_signal(getattr(signal, how))
    proc.wait(30)
    proc.stderr.close()
    log = run_recall("secret", "log", "split-token").stdout.splitlines()
    assert len(log) == 1 and " secret.exec     split-token  stopped  sh -c " in log[0], log
    assert VALUE not in log[0]


def test_an_access_log_that_cannot_take_the_row_stops_exec_before_the_child_runs(split_vault, tmp_path,
                                                                                   monkeypatch, capsys):
    """A full disk: the child ran with the value, then recall said 'the disk … is full' and exited 1 —
    the child's own code lost (a deploy that worked looked failed) and the access never logged. Now
    nothing runs; and a disk that fills while the child runs keeps the child's code, said in one line."""
    import sqlite3

    from recall.cli import main
    from recall.vault import audit
    ran, write = tmp_path / "ran", audit.log

    def full(con, verb, *args, **kw):
        if verb == "secret.exec":
            raise sqlite3.OperationalError("database or disk is full")
        return write(con, verb, *args, **kw)
    monkeypatch.setattr(audit, "log", full)
    assert main(["secret", "exec", "split-token", "--", "touch", str(ran)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and " is full (database or disk is full)" in err and not ran.exists(), err
    monkeypatch.setattr(audit, "log", write)

    def full_at_the_end(con, row, *, verdict, **kw):
        raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(audit, "finish", full_at_the_end, raising=False)
    assert main(["secret", "exec", "split-token", "--", "sh", "-c", "touch $0; exit 3", str(ran)]) == 3
    err = capsys.readouterr().err
    assert ran.exists() and err.count("\n") == 1 and err.startswith("recall: the access log kept this run as "
                                                                     "'running', not how it ended: the disk"), err


def test_a_recall_killed_while_its_child_runs_leaves_the_access_logged(split_vault, tmp_path):
    """kill -9 of `secret exec` while the child held the value left no access-log row at all."""
    import subprocess

    from tests.conftest import REPO, run_recall
    pid_file = tmp_path / "pid"
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "secret", "exec", "split-token", "--",
                             "sh", "-c", f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not pid_file.exists() and proc.poll() is None:
            time.sleep(0.02)
        proc.kill()
        proc.wait(30)
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):      # its watcher may have ended it already
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    log = run_recall("secret", "log", "split-token").stdout.splitlines()
    assert len(log) == 1 and " secret.exec     split-token  running" in log[0], log


def test_a_held_prefix_is_released_once_the_next_bytes_differ(split_vault):
    """5 characters of the value (6 would be a piece of it), held through the pause: the next bytes
    are not the value, so both show."""
    from tests.conftest import run_recall
    r = run_recall("secret", "exec", "split-token", "--", "bash", "-c",
                   'printf %s "${V:0:5}"; sleep 0.6; printf "%s\\n" "-not-it"')
    assert (r.returncode, r.stdout) == (0, VALUE[:5] + "-not-it\n"), r.stderr


def test_a_prefix_left_at_the_end_is_masked_from_four_characters(split_vault):
    from tests.conftest import run_recall
    r = run_recall("secret", "exec", "split-token", "--", "bash", "-c",
                   'printf "a %s" "${V:0:4}"; sleep 0.6')
    assert (r.returncode, r.stdout) == (0, "a [recall:split-token]"), r.stderr
    r = run_recall("secret", "exec", "split-token", "--", "bash", "-c", 'printf "a %s" "${V:0:3}"')
    assert (r.returncode, r.stdout) == (0, "a " + VALUE[:3]), r.stderr


@pytest.mark.parametrize("split", [9, 5])
def test_a_value_the_child_was_not_given_printed_in_two_pieces_with_a_pause_is_masked(split_vault, split):
    """The hold for other secrets never depends on them (the child cannot probe them): a first piece
    of 8 or more is masked as it is released, a shorter one shows, and what follows the pause is
    masked as the run it continues."""
    from tests.conftest import run_recall
    other = "other-Qw8eR7tY6uI5oP"
    r = run_recall("secret", "exec", "split-token", "--", "bash", "-c",
                   f'printf %s {other[:split]}; sleep 0.6; printf "%s\\n" {other[split:]}')
    shown = "" if split >= 8 else other[:split]
    assert (r.returncode, r.stdout) == (0, shown + "[recall:other-token]\n"), r.stderr


def test_a_prompt_shows_while_the_child_waits(split_vault, tmp_path):
    """`Password: ` is no prefix of the value the child holds: it appears before the child goes on."""
    import subprocess

    from tests.conftest import REPO
    marker = tmp_path / "seen"
    wait = f'for i in $(seq 100); do [ -e {marker} ] && break; sleep 0.05; done'
    script = f'printf "Password: "; {wait}; [ -e {marker} ] && echo seen || echo never; printf "%s\\n" "$V"'
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "secret", "exec", "split-token", "--",
                             "bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = b""
    while b"Password: " not in got:
        piece = os.read(proc.stdout.fileno(), 100)
        if not piece:
            break
        got += piece
    marker.touch()
    rest, err = proc.communicate(timeout=30)
    assert (proc.returncode, got + rest) == (0, b"Password: seen\n[recall:split-token]\n"), err


def test_a_vault_value_in_the_argv_is_masked_in_the_access_log(split_vault):
    import json

    from tests.conftest import run_recall
    r = run_recall("secret", "exec", "split-token", "--", "echo", f"look:{VALUE}")
    assert (r.returncode, r.stdout) == (0, "look:[recall:split-token]\n"), r.stderr
    log = run_recall("--json", "secret", "log")
    assert log.returncode == 0, log.stderr
    rows = [row for row in json.loads(log.stdout) if row["verb"] == "secret.exec"]
    assert rows and rows[-1]["argv"] == "echo look:[recall:split-token]", rows
    assert VALUE not in log.stdout


# -- a piece of a value, and the forms, from real programs (issue 33 point 2) ------------------

AWS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
QUOTED = "Aa1'Bb2\"Cc3\\Dd4'Ee5\"Ff6\\Gg7'Hh8"          # no 3 of its letters stand together in a form
PIECES = {"aws": [AWS_KEY], "api-token": [TOKEN], "quoted": [QUOTED]}


def aws_env(**extra: str) -> dict:
    return base_env(AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE", AWS_SECRET_ACCESS_KEY=AWS_KEY, **extra)


def plain_run(argv: list, env: dict) -> bytes:
    """What the command prints with nothing masked (the test compares against it)."""
    import subprocess
    return subprocess.run(argv, env=env, capture_output=True, check=True, timeout=60).stdout


@pytest.mark.parametrize("script,piece", [
    ("env | grep ^AWS_SECRET | cut -c1-40", AWS_KEY[:18]),
    ("printenv AWS_SECRET_ACCESS_KEY | cut -c 1-30", AWS_KEY[:30]),
    ("printenv AWS_SECRET_ACCESS_KEY | head -c 20", AWS_KEY[:20]),
    ('echo "starts ${AWS_SECRET_ACCESS_KEY:0:18}"', AWS_KEY[:18]),
    ('echo "ends ${AWS_SECRET_ACCESS_KEY: -8}"', AWS_KEY[-8:]),
    ('echo "middle ${AWS_SECRET_ACCESS_KEY:11:9}" | tr a-z A-Z', AWS_KEY[11:20].upper()),
], ids=["cut-40", "cut-30", "head-c", "substring", "last-8", "middle-upper"])
def test_a_piece_of_a_value_is_masked(script, piece):
    plain = plain_run(["bash", "-c", script], aws_env())
    assert piece.encode() in plain and AWS_KEY.encode() not in plain, plain
    result = run_masked(["bash", "-c", script], env=aws_env(), masker=PIECES)
    assert result.stdout == plain.replace(piece.encode(), b"[recall:aws]")


def test_seven_characters_of_a_value_are_no_piece():
    """The floor of the rule (README): fewer than 8 characters of a value the child was not given pass."""
    script = 'echo "seven ${AWS_SECRET_ACCESS_KEY:3:7} and ${AWS_SECRET_ACCESS_KEY:20:7}"'
    result = run_masked(["bash", "-c", script], env=aws_env(), masker=PIECES)
    assert result.stdout == f"seven {AWS_KEY[3:10]} and {AWS_KEY[20:27]}\n".encode()


@pytest.mark.parametrize("script,piece", [
    ("printenv AWS_SECRET_ACCESS_KEY | cut -c1-6; echo done", AWS_KEY[:6]),
    ('echo "middle ${AWS_SECRET_ACCESS_KEY:11:6} and on"', AWS_KEY[11:17]),
    ("printenv AWS_SECRET_ACCESS_KEY | cut -c3-9 | tr a-z A-Z; echo done", AWS_KEY[2:9].upper()),
], ids=["cut-6", "substring-6", "upper-7"])
def test_six_characters_of_a_value_the_child_holds_are_masked(script, piece):
    """The child was given the value (`secret exec aws`): from 6 characters, mid-stream; a child
    given another value only still shows 6 of this one (the floor of 8)."""
    plain = plain_run(["bash", "-c", script], aws_env())
    assert piece.encode() in plain, plain
    result = run_masked(["bash", "-c", script], env=aws_env(), masker=PIECES, given=("aws",))
    assert result.stdout == plain.replace(piece.encode(), b"[recall:aws]")
    assert run_masked(["bash", "-c", script], env=aws_env(), masker=PIECES, given=("api-token",)).stdout == plain


def test_the_environment_through_base64_is_masked_wherever_the_wrap_falls():
    """`env | base64`: 76-column lines, the value at a different offset and alignment each time."""
    import base64
    script = 'for n in $(seq 0 75); do { head -c "$n" /dev/zero | tr "\\0" x; env; } | base64; echo; done'
    result = run_masked(["bash", "-c", script], env=aws_env(), masker=PIECES, timeout=120)
    assert result.code == 0 and result.stdout.count(b"[recall:aws]") == 76
    flat = result.stdout.replace(b"\n", b"")
    for pad in range(3):
        inner = base64.b64encode(b"\0" * pad + AWS_KEY.encode())[(8 * pad + 5) // 6:(8 * (pad + 40)) // 6]
        assert not any(inner[i:i + 16] in flat for i in range(len(inner) - 15)), pad


def _printers() -> list:
    """Programs that print QUOTED escaped as their language does: node's console.log of the
    environment (only backslashes escaped, in `…`) if node is here, else the same form from Python;
    SQL's quote() and CSV (a quote written twice)."""
    import shutil
    node = (["node", "-e", "console.log(process.env)"] if shutil.which("node") else
            py("import os; v = os.environ['Q']; print('{ Q: `' + v.replace('\\\\', '\\\\\\\\') + '` }')"))
    return [node,
            py("import os, sqlite3; print(sqlite3.connect(':memory:').execute('select quote(?)', "
               "(os.environ['Q'],)).fetchone()[0])"),
            py("import csv, os, sys; csv.writer(sys.stdout).writerow(['q', os.environ['Q']])")]


@pytest.mark.parametrize("which", range(3), ids=["node", "sql", "csv"])
def test_a_value_with_quotes_and_backslashes_is_masked_as_each_language_prints_it(which):
    argv = _printers()[which]
    plain = plain_run(argv, aws_env(Q=QUOTED))
    assert b"Bb2" in plain and QUOTED.encode() not in plain, plain
    result = run_masked(argv, env=aws_env(Q=QUOTED), masker=PIECES)
    assert b"[recall:quoted]" in result.stdout
    for group in ("Aa1", "Bb2", "Cc3", "Dd4", "Ee5", "Ff6", "Gg7", "Hh8"):
        assert group.encode() not in result.stdout, (group, result.stdout)


@pytest.fixture(scope="module")
def realistic(tmp_path_factory):
    """A vault as users have one (a private key, an AWS key, tokens, a password, a webhook URL) and a
    certificate of another key: (masker, the certificate's path)."""
    import random
    import subprocess
    folder = tmp_path_factory.mktemp("pki")
    key, other_key, cert = folder / "key.pem", folder / "other.pem", folder / "cert.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-out", str(key)], check=True, capture_output=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=example.test", "-days", "2", "-keyout", str(other_key), "-out", str(cert)],
                   check=True, capture_output=True)
    rng = random.Random(33)
    chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    secrets = {f"token-{i}": ["".join(rng.choice(chars) for _ in range(rng.randrange(20, 48)))] for i in range(14)}
    secrets.update({"tls-key": [key.read_text()], "aws": [AWS_KEY], "api-token": [TOKEN],
                    "db": ["hunter2-Correct-Horse!"], "hook": ["https://hooks.example.com/hooks/T0A1/B2C3/x9Y8z7"],
                    "quoted": [QUOTED]})
    return secrets, cert


NO_PIECE = {
    "ls -l": "ls -l --time-style=long-iso / /usr/bin /etc | head -400",
    "kubectl-like table": "printf '%-28s %-8s %-8s %-5s %s\\n' NAME READY STATUS RESTARTS AGE "
                          "api-7d9f8b6c5d-x2k4p 1/1 Running 0 12d worker-5c6b7d8e9f-q7r8s 1/1 Running 3 4h "
                          "redis-0 1/1 Running 0 40d",
    "json": "python3 -c \"import json, sys; json.dump({'items': [{'name': 'node-%d' % i, 'labels': "
            "{'zone': 'eu-west-1a', 'role': 'worker'}, 'ip': '10.0.%d.%d' % (i, i * 7 % 256)} for i in range(60)]}, "
            "sys.stdout, indent=2)\"",
    "env without a secret": "env | grep -v -e ^AWS_SECRET_ACCESS_KEY= -e ^Q= | sort",
    "psql-like table": "printf ' id | name  \\n----+-------\\n  1 | alpha\\n  2 | beta\\n(2 rows)\\n'",
    "a certificate": "cat \"$CERT\"; openssl x509 -in \"$CERT\" -noout -text",
    "seq": "seq 1 3000",
}


@pytest.mark.parametrize("script", list(NO_PIECE.values()), ids=list(NO_PIECE))
def test_output_with_no_piece_of_a_value_passes_unchanged(realistic, tmp_path, script):
    masker, cert = realistic
    copy = tmp_path / "copy"
    env = aws_env(Q=QUOTED, CERT=str(cert))
    result = run_masked(["bash", "-c", f"{{ {script}; }} | tee {copy}"], env=env, masker=masker)
    assert result.code == 0 and len(result.stdout) > 50
    assert result.stdout == copy.read_bytes()


def test_a_flood_of_captured_output_keeps_its_head_and_tail_masked_and_says_what_it_dropped():
    """An MCP call's output (captured, not streamed) of 40 MB keeps its first 4 MB and its last 1-2 MB,
    every byte masked on the way, and says how much between them it did not keep."""
    from recall.vault.runner import KEEP_HEAD, KEEP_TAIL
    child = ("import os, sys\n"
             "sys.stdout.buffer.write(b'first line\\n')\n"
             "line = ('y' * 99 + '\\n').encode() * 1000\n"
             "for i in range(400):\n"
             "    sys.stdout.buffer.write(line)\n"
             "sys.stdout.buffer.write(b'last: ' + os.environ['T'].encode() + b'\\n')\n")
    result = run_masked(py(child), env=base_env(T=TOKEN), masker=MASKER, timeout=120)
    out = result.stdout
    assert result.code == 0 and out.startswith(b"first line\n") and out.endswith(b"last: [recall:api-token]\n")
    assert KEEP_HEAD + KEEP_TAIL < len(out) < KEEP_HEAD + 2 * KEEP_TAIL + 100
    head, said, tail = out.partition(b"\n[recall: ")
    dropped, _, tail = tail.partition(b" bytes of output not kept here]\n")
    assert len(head) + int(dropped.replace(b",", b"")) + len(tail) == 11 + 400 * 100_000 + 25
    assert said and TOKEN.encode() not in out
