"""Shared fixtures: every test gets its own HOME, RECALL_HOME and XDG dirs; never the real ones."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from recall.cli import main  # noqa: E402
from tests.world import build, write_tree  # noqa: E402,F401  (the one world builder and tree writer; tests import them from here too)

# A suite started in the background (`make test &`, a job in a script) inherits SIGINT ignored, and every
# recall a test starts would ignore the Ctrl-C that test sends it: each child starts with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Property tests: a quick run by default, the full one in CI (CI=true) or with HYPOTHESIS_PROFILE=full.
try:
    from hypothesis import settings as _hypothesis_settings
    _hypothesis_settings.register_profile("quick", max_examples=60, deadline=None)
    _hypothesis_settings.register_profile("full", max_examples=500, deadline=None)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or (
        "full" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "quick"))
except ImportError:        # the bare core venvs have no hypothesis; their tests skip the property tests
    pass

# The files that take longest (measured: docs/BENCHMARKS.md) go first, so `make test`'s workers, each
# taking the next file as it finishes one, are not left waiting on one of them at the end (xdist's own
# order, by count of tests, is turned off in the Makefile: it put test_golden's 8 long tests last).
LONGEST_FIRST = ["test_faults", "test_golden", "test_watch", "test_hybrid", "test_remote", "test_mcp", "test_proxy",
                 "test_leaks", "test_readme", "test_cli", "test_verify", "test_mask", "test_local_model", "test_runner"]


def pytest_collection_modifyitems(items):
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.stem, len(first)))      # stable: the rest as collected


# `make test` hands pytest a descriptor its capture leaves alone (RECALL_TEST_HEARTBEAT_FD): a test
# or fixture that runs for more than 10 s says so there, every 10 s, so the run is never silent long.
_running = {"nodeid": "", "since": 0.0, "said": 0.0}


def pytest_runtest_logstart(nodeid, location):
    import time
    _running.update(nodeid=nodeid, since=time.monotonic(), said=time.monotonic())


def pytest_runtest_logfinish(nodeid, location):
    _running["nodeid"] = ""


def pytest_sessionstart(session):
    fd = os.environ.get("RECALL_TEST_HEARTBEAT_FD", "")
    if not fd.isdigit() or os.environ.get("PYTEST_XDIST_WORKER"):
        return      # only the process that reports (a worker's descriptor 3 is something else)
    import threading
    import time
    every = float(os.environ.get("RECALL_TEST_HEARTBEAT_SECONDS", "10"))

    def beat():
        while True:
            time.sleep(min(1.0, every / 4))
            now = time.monotonic()
            if _running["nodeid"] and now - _running["said"] >= every:
                _running["said"] = now
                try:
                    os.write(int(fd), f"\n  … {_running['nodeid']}: {now - _running['since']:.0f} s so far\n".encode())
                except OSError:
                    return

    threading.Thread(target=beat, daemon=True).start()


def give_to_nobody(base) -> None:
    """Hand a test tree to 'nobody' (uid 65534), so a test running as root can run recall as a user
    permissions apply to; a -wal/-shm file SQLite removes as a connection closes is passed over."""
    for path in [base, *base.rglob("*")]:
        try:
            os.chown(path, 65534, 65534, follow_symlinks=False)
        except FileNotFoundError:
            pass


# The one test-only secret value: it must never appear in any output, file, request or argv.
CANARY = "rc4n4ry-7Qx9-Zt2v-K8m3"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local/share"))
    monkeypatch.setenv("RECALL_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / ".run"))
    for var in ("RECALL_CONFIG", "VOYAGE_API_KEY", "RECALL_KEY_FILE"):
        monkeypatch.delenv(var, raising=False)
    return home


# Process-wide caches and state, each emptied for every test, so no test sees what an earlier one
# left (only in modules already imported; a module imported during a test starts empty anyway).
# Caches of pure functions of their input (compiled patterns, model weights by folder) are kept.
PROCESS_STATE = {
    "recall.db": ("OPENED",),                      # paths opened (named by a storage fault)
    "recall.db.texts": ("UNPACK_FAILED",),         # a blob that could not be unpacked (damage)
    "recall.embed.providers": ("_PROVIDERS",),               # one provider per config
    "recall.inventory": ("_CHECKED",),             # prerequisites checked once per process
    "recall.embed.vectors": ("_MATRICES", "_SEARCHED"),  # warm numpy matrices, searches per DB
    "recall.api.notes": ("_FOLLOWING",),           # recall mcp's watcher
    "recall.mcp_server": ("_OUTPUTS",),            # long responses held for `offset`
    "recall.vault.door": ("_LITERALS", "_CACHE"),  # what the door learned, and its masker
    "recall.vault.store": ("_REDACTORS",),         # the note redactor, until the vault changes
}


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    for name, attrs in PROCESS_STATE.items():
        module = sys.modules.get(name)
        for attr in attrs if module is not None else ():
            monkeypatch.setattr(module, attr, type(getattr(module, attr))())


NOTES = {
    "incidents/2023/INC-10963-db-failover.md": """\
        ---
        title: INC-10963 primary database failover
        date: 2023-04-02
        tags: [postgres, incident]
        ---
        # INC-10963 primary database failover

        The primary pg-prod-03.db.example.com stopped answering at 02:10.
        Replication lag alert HighReplicationLag fired first.

        ## Timeline

        - 02:10 alert fired, paged on-call
        - 02:25 promoted pg-prod-04 to primary
        - 02:40 the application pools reconnected to the new primary and errors stopped
        - 03:05 confirmed replication from pg-prod-04 to the two remaining replicas is healthy

        ## Rollback

        We kept the old primary fenced until the WAL was archived. Rolling back means promoting
        pg-prod-03 again after a base backup: never point the pools at it before it has caught up,
        and keep the fence in place until the on-call lead agrees.
        """,
    "meetings/2024-01-15-standup.md": """\
        # Standup

        Ticket INC 10963 was mentioned as a different thing: room 10963 booking for INC offsite.
        Nothing else about databases.
        """,
    "runbooks/jump-hosts.md": """\
        # Jump hosts

        Use jump01.example.com for the prod network and jump011.example.com for the lab.

        ```bash
        # this is a comment, not a heading
        ssh jump01.example.com
        ```
        """,
    "projects/cert-rotation.md": """\
        ---
        date: 2025-06-01
        ---
        # Certificate rotation

        cert-manager renewed the wildcard certificate after the ingress served an expired one.
        """,
}


@pytest.fixture
def notes(tmp_path) -> Path:
    return write_tree(tmp_path / "notes", NOTES)


@pytest.fixture
def make_world(tmp_path, notes, monkeypatch):
    """make_world(secrets=..., inventory=..., ...): tests.world.build(tmp_path, ...) over the `notes`
    fixture's tree, its config the one recall reads (RECALL_CONFIG)."""
    def make(**given):
        w = build(tmp_path, **{"notes": notes, **given})
        monkeypatch.setenv("RECALL_CONFIG", str(w.config))
        return w
    return make


@pytest.fixture
def config(make_world):
    """The notes world alone (make_world); returns a writer of it again with extra config text and any
    other tests.world.build argument (sources={name: folder} adds sources). `.path`: the config file."""
    def write(extra: str = "", **world) -> Path:
        return make_world(config=extra, **world).config

    write.path = write()
    return write


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""
    def run(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err
    return run


def run_recall(*args, env=None, input=None, timeout=60, cwd=None):
    """Run recall as a real process through the launcher."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(REPO / "recall.py"), *map(str, args)],
                          capture_output=True, text=True, env=full_env, input=input,
                          timeout=timeout, cwd=cwd or REPO)


def run_in_pty(argv: list, env=None, answer=None, wait=None) -> tuple:
    """Run argv with a real pseudo-terminal as its stdin/stdout/stderr (and `env`, else this one):
    (exit code, bytes seen). With `answer`, once recall asks "Type the word 'W'", that is typed —
    b"WORD" types the word asked for. `wait`: seconds of silence that end the reading (None: EOF)."""
    import pty
    import re
    import select
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(argv[0], argv, os.environ if env is None else env)
    out, typed = b"", False
    while wait is None or select.select([fd], [], [], wait)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        asked = re.search(rb"Type the word '(\w+)'", out)
        if asked and answer is not None and not typed:
            os.write(fd, (asked.group(1) if answer == b"WORD" else answer) + b"\n")
            typed = True
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out


def wait_for_port(port: int, proc=None, timeout: float = 20.0) -> None:
    """Until something accepts on 127.0.0.1:port (or the server process died)."""
    import socket
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the server on port {port} exited with {proc.returncode}")
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g}s")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the moment of asking)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def listener():
    """A real listening socket on 127.0.0.1: a prerequisite that is up. Yields its port."""
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def fake():
    """The stand-in Voyage API on 127.0.0.1 (64-dimension hashed vectors)."""
    from tests.fake_voyage import FakeVoyage
    with FakeVoyage(dim=64) as server:
        yield server
