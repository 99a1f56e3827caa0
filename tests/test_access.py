"""access exec: exported secrets masked by name, setup script off the command line, stdin secrets."""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from recall import db, inventory
from recall.config import load_config
from recall.errors import RecallError
from tests.conftest import REPO, run_recall

# Names a setup step may export whose values must never print in clear ...
SENSITIVE = ["API_KEY", "TOKEN", "GITHUB_PAT", "X_TOKEN", "AWS_SESSION_TOKEN", "AWS_SECRET_ACCESS_KEY",
             "AWS_ACCESS_KEY_ID", "MY_SECRETS_V2", "CLIENTSECRET", "DB_PASSWORD", "PGPASSWORD",
             "LDAP_PASSWD", "RCLONE_PASS", "OPENAI_APIKEY", "SSH_PRIVATE_KEY", "AZURE_CREDENTIALS",
             "GCP_CREDENTIAL", "AUTH_HEADER", "NPM_AUTH", "SSHPASS", "MYSQL_PWD"]
# ... and ordinary names that must stay readable.
CLEAR = ["PATTERN", "AUTHOR", "PASSENGER_COUNT", "TOKENIZER_MODEL", "API_URL", "ACCESS_LOG",
         "PRIVATE_NET", "KUBE_CONTEXT"]


def _entry(tmp_path, config, steps, secrets_text=None, **fields):
    path = tmp_path / "inv.yaml"
    lines = ["- id: box", "  kind: host", "  access:"] + [f"    - {s}" for s in steps]
    lines += [f"  {k}: {v}" for k, v in fields.items()]
    extra = f"inventory: [{path}]\n"
    if secrets_text:
        secrets = tmp_path / "secrets.yaml"
        secrets.write_text(secrets_text)
        secrets.chmod(0o600)
        extra += f"secrets: [{secrets}]\n"
    path.write_text("\n".join(lines) + "\n")
    config(extra)
    inventory.forget_checks()
    return path


def test_every_sensitive_exported_name_is_masked_and_ordinary_ones_are_not(tmp_path, config):
    values = {name: f"{i:02d}-v4lue-of-{name.lower()}" for i, name in enumerate(SENSITIVE + CLEAR)}
    script = tmp_path / "setup.sh"
    script.write_text("".join(f"export {k}={v}\n" for k, v in values.items())
                      + 'export PATH="$PATH:/opt/visible-tools"\n')
    _entry(tmp_path, config, [f"source {script}"])
    r = run_recall("access", "exec", "box", "--", "sh", "-c", "env")
    assert r.returncode == 0, r.stderr
    env = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    leaked = [k for k in SENSITIVE if values[k] in r.stdout + r.stderr]
    assert leaked == []
    assert {k: env[k] for k in SENSITIVE} == {k: f"[recall:box:{k}]" for k in SENSITIVE}
    assert {k: env[k] for k in CLEAR} == {k: values[k] for k in CLEAR}
    assert env["PATH"].endswith(":/opt/visible-tools")


def _cmdlines() -> dict:
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                found[int(proc.name)] = (proc / "cmdline").read_bytes()
            except OSError:          # gone meanwhile, or not ours to read
                pass
    return found


def test_inline_export_never_reaches_a_command_line(tmp_path, config):
    token = "inl1ne-t0ken-5d9f2a77"
    ready, done = tmp_path / "ready", tmp_path / "done"
    slow = tmp_path / "slow.sh"
    slow.write_text(f"touch {ready}\nfor i in $(seq 100); do [ -e {done} ] && break; sleep 0.05; done\n")
    _entry(tmp_path, config, [f"export X_TOKEN={token}", f"source {slow}"])
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "access", "exec", "box", "--",
                             "sh", "-c", "echo got:$X_TOKEN"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert ready.exists(), "the setup steps never started"
        seen = _cmdlines()                       # while the setup shell is still running
        setup_shells = [c for c in seen.values() if b"bash\0--noprofile\0--norc" in c]
        assert setup_shells, "the setup bash was not found among the processes"
        assert [pid for pid, c in seen.items() if token.encode() in c] == []
    finally:
        done.touch()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out == "got:[recall:box:X_TOKEN]\n"


def test_bash_env_file_is_not_run_by_the_setup_shell(tmp_path, config):
    marker = tmp_path / "rc-ran"
    rc = tmp_path / "rc.sh"
    rc.write_text(f"touch {marker}\n")
    _entry(tmp_path, config, ["export A_SETTING=1"])
    r = run_recall("access", "exec", "box", "--", "sh", "-c", "echo $A_SETTING $BASH_ENV",
                   env={"BASH_ENV": str(rc), "ENV": str(rc)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"1 {rc}\n"               # the command still gets the caller's BASH_ENV
    assert not marker.exists()


SUDO_SECRETS = """\
- id: box-sudo
  service: sudo
  kind: password
  inject: stdin
  value: "sudo-pa55w0rd-81f3"
"""

PASSWORD_READER = textwrap.dedent("""
    import sys
    sys.stderr.write('[sudo] password for ops: '); sys.stderr.flush()
    line = sys.stdin.readline()
    ok = line == 'sudo-pa55w0rd-81f3\\n'
    print('authenticated' if ok else 'denied: %d bytes' % len(line)); sys.exit(0 if ok else 1)
""")


@pytest.fixture
def sudo_box(tmp_path, config):
    pytest.importorskip("cryptography")
    _entry(tmp_path, config, ["export BOX_USER=ops"], SUDO_SECRETS, secrets="[box-sudo]")
    from recall import vault
    cfg = load_config()
    con = db.connect(cfg.db_path)
    vault.sync(con, cfg)
    return cfg, con


def test_a_stdin_secret_reaches_the_command_like_sudo_S(sudo_box):
    r = run_recall("access", "exec", "box", "--", sys.executable, "-c", PASSWORD_READER)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "authenticated\n"
    assert r.stderr == "[sudo] password for ops: "


def test_a_stdin_secret_and_the_callers_own_stdin_are_refused_before_anything_runs(sudo_box, tmp_path):
    from recall.access import exec_entry
    cfg, con = sudo_box
    marker = tmp_path / "ran"
    with pytest.raises(RecallError) as err:
        exec_entry(con, cfg, "box", ["touch", str(marker)], stdin=b"the caller's input\n")
    assert str(err.value).startswith("secret 'box-sudo' of 'box' is injected on stdin, "
                                     "and this command already has its own stdin")
    assert not marker.exists()


def test_steps_that_switch_global_state_are_left_out_and_said(tmp_path, config, monkeypatch):
    """Steps that would rewrite ~/.kube/config or the cloud CLI's default for every other shell
    never run; the user reads which, on stderr. Stand-in tools record any call."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    for tool in ("kubectl", "aws", "az", "gcloud", "kubectx"):
        (bindir / tool).write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {calls}\n")
        (bindir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    switching = ["kubectl config use-context prod", "aws eks update-kubeconfig --name prod",
                 "az aks get-credentials -g rg -n prod", "az account set -s 1111",
                 "gcloud container clusters get-credentials prod", "gcloud config set project p",
                 "kubectx prod"]
    _entry(tmp_path, config, ["export REGION=eu-west-1", *switching])
    r = run_recall("access", "exec", "box", "--", "sh", "-c", "echo region=$REGION")
    assert (r.returncode, r.stdout) == (0, "region=eu-west-1\n"), r.stderr
    assert not calls.exists()
    said = [line for line in r.stderr.splitlines() if line.startswith("recall: left out")]
    assert [line.split("'")[1] for line in said] == switching
    assert all("global state" in line for line in said)
