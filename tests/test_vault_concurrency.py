"""Two vault writers at once: the key, the secrets files and the sealed rows
survive every pair; the run that cannot go on says so in one line."""
import os
import subprocess
import sys
import tempfile
import traceback

import pytest

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

from recall import db  # noqa: E402
from recall.config import load_config  # noqa: E402
from recall.errors import RecallError  # noqa: E402
from recall.vault import keyfile  # noqa: E402
from recall.vault import store as vault  # noqa: E402
from recall.vault.inplace import open_entries  # noqa: E402
from recall.vault.secretfile import load_secret_files  # noqa: E402
from tests.conftest import CANARY, REPO  # noqa: E402
from tests.world import build  # noqa: E402

PAIRS = 20
VALUES = {"api-token": f"tok-{CANARY}", "db-pass": f"pw-{CANARY}",
          "ssh-key": f"key-{CANARY}"}


def _secrets_text(values: dict) -> str:
    return "".join(f'- id: {sid}\n  kind: token\n  value: "{v}"\n'
                   for sid, v in values.items())


def _world(base, values=VALUES):
    """A world with one secrets file of plain values, and its state
    folder: (the world, env for recall)."""
    w = build(base, secrets=_secrets_text(values), config="embedding: {provider: none}\n")
    db.connect(base / "state/recall.db").close()     # the DB's own first-open race is test_db's
    return w, {"RECALL_CONFIG": str(w.config),
               "RECALL_HOME": str(base / "state")}


def _sync(env: dict) -> None:
    """A plain sync in this process."""
    os.environ.update(env)
    cfg = load_config()
    con = db.connect(cfg.db_path)
    try:
        vault.sync(con, cfg)
    finally:
        con.close()


def _start(argv: list, env: dict, go: int, stdin: str = ""):
    """recall's main(argv) in a forked child that waits for a byte on `go`:
    (pid, stdout file, stderr file)."""
    out, err = (tempfile.TemporaryFile(mode="w+") for _ in range(2))
    feed_r, feed_w = os.pipe()
    os.write(feed_w, stdin.encode())
    os.close(feed_w)
    pid = os.fork()
    if pid == 0:                                  # pragma: no cover (the child)
        code = 70
        try:
            os.dup2(feed_r, 0)
            sys.stdout = open(os.dup(out.fileno()), "w")   # not pytest's capture
            sys.stderr = open(os.dup(err.fileno()), "w")
            os.environ.update(env)
            os.read(go, 1)
            from recall.cli import main
            code = main(argv)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(feed_r)
    return pid, out, err


def _pair(a: list, b: list, env, stdin=("", "")) -> list:
    """Both commands started at once (`env`: one for both, or a pair): [(exit code, stdout, stderr)]."""
    go_r, go_w = os.pipe()
    envs = env if isinstance(env, (list, tuple)) else (env, env)
    started = [_start(a, envs[0], go_r, stdin[0]), _start(b, envs[1], go_r, stdin[1])]
    os.write(go_w, b"go")
    os.close(go_r)
    os.close(go_w)
    results = []
    for pid, out, err in started:
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        results.append((os.waitstatus_to_exitcode(status), out.read(), err.read()))
    return results


def _assert_each_said_what_happened(results) -> None:
    """No traceback; a run that did not succeed says why in one line."""
    for code, out, err in results:
        assert "Traceback" not in err and CANARY[:6] not in out + err, err
        if code != 0:
            assert err.startswith("recall: ") and err.count("\n") == 1, (code, err)


def _assert_vault_opens(env: dict, values: dict) -> None:
    """The key opens every stored row and every sealed value in the file."""
    os.environ.update(env)
    cfg = load_config()
    con = db.connect(cfg.db_path)
    try:
        stored = vault.load_values(con, cfg)
        assert {sid: v[""] for sid, v in stored.items()} == values
        entries, _ = load_secret_files(cfg.secrets)
        key = keyfile.load_key(cfg.home, create=False)
        open_entries(entries, key, cfg.home)
        assert {e.id: e.values[""] for e in entries} == values
        assert "ENC[" in cfg.secrets[0].read_text()
        assert CANARY[:6] not in cfg.secrets[0].read_text()
    finally:
        con.close()


def test_two_first_syncs_at_once_keep_one_key(tmp_path):
    for n in range(PAIRS):
        _, env = _world(tmp_path / f"w{n}")
        results = _pair(["secret", "sync"], ["secret", "sync"], env)
        _assert_each_said_what_happened(results)
        _assert_vault_opens(env, VALUES)
        assert [r[0] for r in results] == [0, 0]


def test_two_rotations_at_once_keep_every_value(tmp_path):
    _, env = _world(tmp_path / "w")
    _sync(env)
    for _ in range(PAIRS):
        results = _pair(["secret", "rotate-key"], ["secret", "rotate-key"], env)
        _assert_each_said_what_happened(results)
        assert [r[0] for r in results] == [0, 0]
    _assert_vault_opens(env, VALUES)


def test_a_set_beside_a_sync_keeps_the_new_value(tmp_path):
    _, env = _world(tmp_path / "w")
    values = dict(VALUES)
    for n in range(PAIRS):
        values["db-pass"] = f"pw{n}-{CANARY}"
        set_first = n % 2 == 0
        argv = (["secret", "set", "db-pass"], ["secret", "sync"])
        results = _pair(*(argv if set_first else argv[::-1]), env,
                        stdin=(values["db-pass"], "") if set_first else ("", values["db-pass"]))
        _assert_each_said_what_happened(results)
        assert [r[0] for r in results] == [0, 0]
        _assert_vault_opens(env, values)


def test_a_restore_beside_a_sync_writes_the_secret_back_once(tmp_path):
    w, env = _world(tmp_path / "w")
    _sync(env)
    secrets = w.secrets
    for n in range(PAIRS):
        sealed = secrets.read_text()
        secrets.write_text(sealed[:sealed.rindex("\n", 0, sealed.index("ssh-key")) + 1])   # ssh-key removed
        _sync(env)
        argv = (["secret", "restore", "ssh-key"], ["secret", "sync"])
        results = _pair(*(argv if n % 2 else argv[::-1]), env)
        _assert_each_said_what_happened(results)
        assert [r[0] for r in results] == [0, 0]
        assert secrets.read_text().count("ssh-key") == 1
        _assert_vault_opens(env, VALUES)


def test_a_writer_that_waits_too_long_changes_nothing_and_says_so(tmp_path, monkeypatch):
    _, env = _world(tmp_path / "w")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode())\n"
         "print('held', flush=True); time.sleep(60)\n", str(tmp_path / "w/state/vault.key.lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        cfg = load_config()
        con = db.connect(cfg.db_path)
        said = []
        monkeypatch.setattr(db.lock, "VAULT_WAIT_S", 0.3)
        with pytest.raises(RecallError, match=rf"another recall writing the vault \(pid {holder.pid}\) "
                           r"still held .*vault.key.lock after 0.3 s; nothing was changed"):
            vault.sync(con, cfg, notify=said.append)
        assert said == [f"waiting for another recall writing the vault (pid {holder.pid})"]
        assert not keyfile.key_path(cfg.home).exists() and "ENC[" not in cfg.secrets[0].read_text()
    finally:
        holder.kill()
        holder.wait()
    vault.sync(con, cfg)                      # the holder gone, its lock is too
    assert "ENC[" in cfg.secrets[0].read_text()


def _two_homes_one_key(base, monkeypatch) -> list:
    """One secrets file and one RECALL_KEY_FILE, two state folders (RECALL_HOME A and B), each
    synced: the env of each."""
    _, env = _world(base)
    keys = base / "keys"
    keys.mkdir(mode=0o700)
    monkeypatch.setenv("RECALL_KEY_FILE", str(keys / "shared.key"))
    envs = [{**env, "RECALL_HOME": str(base / home), "RECALL_KEY_FILE": str(keys / "shared.key")}
            for home in ("A", "B")]
    for each in envs:
        monkeypatch.setenv("RECALL_HOME", each["RECALL_HOME"])
        _sync(each)
    return envs


def test_two_state_folders_sharing_a_key_file_rotate_at_once_and_keep_every_value(tmp_path, monkeypatch):
    """Each state folder took its own lock while both wrote the shared key's vault.key.next: the
    secrets file was left sealed under a key that no longer existed (7 of 10 runs of 20 pairs). The
    lock is the key's now: one rotates, the other waits, then says to sync first; nothing is lost."""
    envs = _two_homes_one_key(tmp_path / "w", monkeypatch)
    for _ in range(PAIRS):
        results = [(code, out, "".join(line for line in err.splitlines(True) if "waiting for another" not in line))
                   for code, out, err in _pair(["secret", "rotate-key"], ["secret", "rotate-key"], envs)]
        _assert_each_said_what_happened(results)
        assert 0 in [r[0] for r in results], results
        for env in envs:             # the file opens with the key, and each vault after its sync
            monkeypatch.setenv("RECALL_HOME", env["RECALL_HOME"])
            _sync(env)
            _assert_vault_opens(env, VALUES)


def test_every_state_folder_sharing_a_key_waits_for_the_lock_beside_it(tmp_path, monkeypatch):
    """A writer in state folder B waits for one holding the lock beside the key it shares with A
    (it took its own folder's lock, and went on)."""
    _, env_b = _two_homes_one_key(tmp_path / "w", monkeypatch)
    lock = tmp_path / "w/keys/shared.key.lock"
    before = (tmp_path / "w/etc/secrets.yaml").read_bytes()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode())\n"
         "print('held', flush=True); time.sleep(60)\n", str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        r = subprocess.run([sys.executable, "-c", "import sys\nfrom recall.db import lock\nlock.VAULT_WAIT_S = 0.3\n"
                            "from recall.cli import main\nsys.exit(main(['secret', 'rotate-key']))\n"],
                           env={**os.environ, **env_b}, capture_output=True, text=True, cwd=REPO)
        assert r.returncode == 1 and f"waiting for another recall writing the vault (pid {holder.pid})" in r.stderr
        assert "nothing was changed" in r.stderr and (tmp_path / "w/etc/secrets.yaml").read_bytes() == before, r.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("verb", ["secret exec", "access exec"])
def test_a_secret_a_sync_removes_while_exec_starts_is_one_line_and_nothing_runs(tmp_path, monkeypatch, capsys, verb):
    """A sync removes the secret between exec finding its row and reading its value: a KeyError
    traceback (access exec: a TypeError). Now one line, and the command never runs."""
    from recall.cli import main
    w, env = _world(tmp_path / "w")
    w.inventory = w.config.parent / "inventory.yaml"
    w.inventory.write_text("- id: box\n  kind: host\n  secrets: [db-pass]\n")
    w.config.write_text(w.config.read_text() + f"inventory: [{w.inventory}]\n")
    _sync(env)
    ran = tmp_path / "ran"
    looked_up = vault.stored_row

    def removed_meanwhile(con, sid):         # secret exec: after its row is found; access: before
        row = looked_up(con, sid) if verb == "secret exec" else None
        w.secrets.write_text(_secrets_text({k: v for k, v in VALUES.items() if k != "db-pass"}))
        vault.sync(con, load_config())
        return row or looked_up(con, sid)
    monkeypatch.setattr(vault, "stored_row", removed_meanwhile)
    argv = (["secret", "exec", "db-pass"] if verb == "secret exec" else ["access", "exec", "box"])
    assert main([*argv, "--", "touch", str(ran)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("recall: ") and err.count("\n") == 1 and "db-pass" in err, err
    assert not ran.exists() and CANARY[:6] not in err
