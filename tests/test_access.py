"""access exec: exported secrets masked by name, setup script off the command line, stdin secrets."""
import json
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

# Whatever a setup step sets is masked (issue 11.3): secret-looking names, and every other name
# whose value could be a credential (DATABASE_URL with a password, KUBE_CREDS, SENTRY_DSN, a plain
# AUTHOR) ...
SENSITIVE = ["API_KEY", "TOKEN", "GITHUB_PAT", "X_TOKEN", "AWS_SESSION_TOKEN", "AWS_SECRET_ACCESS_KEY",
             "AWS_ACCESS_KEY_ID", "MY_SECRETS_V2", "CLIENTSECRET", "DB_PASSWORD", "PGPASSWORD",
             "LDAP_PASSWD", "RCLONE_PASS", "OPENAI_APIKEY", "SSH_PRIVATE_KEY", "AZURE_CREDENTIALS",
             "GCP_CREDENTIAL", "AUTH_HEADER", "NPM_AUTH", "SSHPASS", "MYSQL_PWD", "KUBE_CREDS",
             "SENTRY_DSN", "AUTHOR", "PATTERN", "TOKENIZER_MODEL", "API_URL"]
# ... but a short list of known non-secret names stays readable whatever the value ...
CLEAR = ["KUBE_CONTEXT", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "OPS_CONTEXT"]
# ... and so do values that are paths, numbers or too short to be a credential.
HARMLESS = {"KUBECONFIG_DIR": "/tmp/kube/ops", "CACHE_HOME": "~/cache", "PASSENGER_COUNT": "4242424242",
            "TIMEOUT_SECONDS": "30.5", "MODE": "ro", "SEARCH_PATH": "/usr/local/bin:/opt/tools"}


def _entry(make_world, steps, secrets_text=None, **fields):
    lines = ["- id: box", f"  kind: {fields.pop('kind', 'host')}", "  access:"] + [f"    - {s}" for s in steps]
    lines += [f"  {k}: {v}" for k, v in fields.items()]
    world = make_world(inventory="\n".join(lines) + "\n", secrets=secrets_text or None)
    inventory.forget_checks()
    return world.inventory


def test_what_setup_sets_is_masked_unless_its_name_or_value_is_plainly_harmless(tmp_path, make_world):
    import hashlib  # values sharing no 8 characters: the masker masks any such run
    values = {name: "v4l" + hashlib.sha256(name.encode()).hexdigest()[:17] for name in SENSITIVE + CLEAR}
    values["DATABASE_URL"] = "postgres://app:pg-pa55w0rd-x1@db.internal:5432/app"
    script = tmp_path / "setup.sh"
    script.write_text("".join(f"export {k}='{v}'\n" for k, v in {**values, **HARMLESS}.items())
                      + 'export PATH="$PATH:/opt/visible-tools"\nNOT_EXPORTED=pl4in-shell-v4riable\n')
    _entry(make_world, [f"source {script}"])
    r = run_recall("access", "exec", "box", "--", "env; echo plain=$NOT_EXPORTED")
    assert r.returncode == 0, r.stderr
    env = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    masked = SENSITIVE + ["DATABASE_URL"]
    leaked = [k for k in masked if values[k] in r.stdout + r.stderr]
    assert leaked == [] and "pg-pa55w0rd-x1" not in r.stdout
    assert {k: env[k] for k in masked} == {k: f"[recall:box:{k}]" for k in masked}
    assert {k: env[k] for k in CLEAR} == {k: values[k] for k in CLEAR}
    assert {k: env[k] for k in HARMLESS} == HARMLESS
    assert env["PATH"].endswith(":/opt/visible-tools")
    assert env["plain"] == "[recall:box:NOT_EXPORTED]"        # the same shell: plain variables too


def test_a_failing_setup_step_is_masked_with_what_it_had_set(tmp_path, make_world):
    """The setup's own error output quotes the token it exported just before failing."""
    from tests.conftest import CANARY
    script = tmp_path / "login.sh"
    script.write_text(f"export DEPLOY_SESSION={CANARY}\necho \"login as $DEPLOY_SESSION refused\" >&2\n"
                      "false\necho never\n")
    marker = tmp_path / "ran"
    _entry(make_world, [f"source {script}"])
    r = run_recall("access", "exec", "box", "--", f"touch {marker}")
    assert r.returncode == 1
    assert r.stderr == ("recall: the setup steps of 'box' failed: login as [recall:box:DEPLOY_SESSION] "
                        "refused — run 'recall access show box' and check the steps\n")
    assert r.stdout == "" and not marker.exists()
    log = run_recall("--json", "secret", "log", "box")
    assert CANARY not in log.stdout and json.loads(log.stdout)[-1]["verdict"] == "setup failed"


def test_the_command_runs_in_the_setup_shell_pipes_and_variables_work(tmp_path, make_world):
    script = tmp_path / "env.sh"
    script.write_text("export REGION=eu-west-1\nSERVICE_NAME=web\n"
                      "greet() { echo \"hello from $SERVICE_NAME\"; }\n")
    _entry(make_world, [f"source {script}"])
    out = tmp_path / "out.txt"
    line = (f"greet | tr a-z A-Z && echo region=$REGION > {out}; echo $((6 * 7)); "
            "false || echo fallback; exit 7")
    r = run_recall("access", "exec", "box", "--", line)
    assert (r.returncode, r.stdout) == (7, "HELLO FROM WEB\n42\nfallback\n"), r.stderr
    assert out.read_text() == "region=eu-west-1\n"
    r = run_recall("access", "exec", "box", "--", "sh", "-c", "echo one word; exit 3")  # several: quoted words
    assert (r.returncode, r.stdout) == (3, "one word\n")
    r = run_recall("access", "exec", "box", "--", "echo", "a | b", "$REGION")
    assert r.stdout == "a | b $REGION\n"


def _script_in(folder, name: str) -> None:
    folder.mkdir()
    (folder / name).write_text(f"#!/bin/sh\necho {name} ran\n")
    (folder / name).chmod(0o755)


def _exec_box(line: str, path=None, cwd=None):
    """`recall access exec box -- LINE` as an MCP client starts it: only recall's own variables and
    HOME, and PATH only when given."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("RECALL_", "HOME", "XDG_"))}
    return subprocess.run([sys.executable, str(REPO / "recall.py"), "access", "exec", "box", "--", line],
                          capture_output=True, text=True, env={**env, **({"PATH": path} if path else {})},
                          cwd=cwd, timeout=60)


def test_recall_started_with_no_path_never_runs_a_command_from_the_working_folder(tmp_path, make_world):
    """`env -i recall mcp` (an MCP client with a bare environment): bash's own PATH ends in '.', so a
    `deploy` planted in the folder recall runs in was run when the agent asked for `deploy`."""
    _entry(make_world, [])
    _script_in(tmp_path / "cwd", "deploy")
    r = _exec_box("deploy || echo not found; ls / | grep -x etc", cwd=tmp_path / "cwd")
    assert r.returncode == 0 and r.stdout.splitlines()[-2:] == ["not found", "etc"], (r.stdout, r.stderr)


def test_a_command_the_bare_path_of_an_mcp_client_lacks_is_said_with_that_path(tmp_path, make_world):
    """An MCP client starts recall mcp with PATH=/usr/bin:/bin; `aws` lives elsewhere: the agent saw
    only "/dev/fd/18: line 18: aws: command not found", and nothing to do about it."""
    _entry(make_world, [])
    _script_in(tmp_path / "tools", "recall-tool-xyz")
    bare = _exec_box("recall-tool-xyz", path="/usr/bin:/bin")
    assert bare.returncode == 127 and bare.stderr == (
        "recall-tool-xyz: command not found\n"                 # not bash's "/dev/fd/18: line 18: …"
        "recall: exit 127: a command was not found — check the spelling, or start recall with a PATH that holds "
        "it (the child's: /usr/bin:/bin; for recall mcp, \"env\": {\"PATH\": …} in its client's settings)\n"), bare.stderr
    fixed = _exec_box("recall-tool-xyz", path=f"{tmp_path / 'tools'}:/usr/bin:/bin")
    assert (fixed.returncode, fixed.stdout, fixed.stderr) == (0, "recall-tool-xyz ran\n", "")
    env_file = tmp_path / "login.sh"                      # a setup step that calls a tool the PATH lacks
    env_file.write_text("recall-tool-xyz --login\n")
    env_file.chmod(0o600)
    _entry(make_world, [f"source {env_file}"])
    setup = _exec_box("true", path="/usr/bin:/bin")
    assert setup.returncode == 1 and setup.stderr.startswith(
        "recall: the setup steps of 'box' failed: recall-tool-xyz: command not found — "), setup.stderr


def test_kubectl_without_context_gets_the_entrys_context(tmp_path, make_world, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kubectl").write_text('#!/bin/sh\necho "kubectl $*"\n')
    (bindir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    _entry(make_world, ["kubectl config use-context ops-prod"], kind="cluster",
           verify="kubectl --context ops-prod get nodes")
    r = run_recall("access", "exec", "box", "--", "kubectl get pods -n web | tr a-z A-Z")
    assert (r.returncode, r.stdout) == (0, "KUBECTL --CONTEXT OPS-PROD GET PODS -N WEB\n"), r.stderr
    assert "recall: kubectl gets --context ops-prod (this entry's context)\n" in r.stderr
    r = run_recall("access", "exec", "box", "--", "kubectl --context=other get ns")
    assert r.stdout == "kubectl --context=other get ns\n"
    assert "kube context" not in r.stderr


def _cmdlines() -> dict:
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                found[int(proc.name)] = (proc / "cmdline").read_bytes()
            except OSError:          # gone meanwhile, or not ours to read
                pass
    return found


def test_inline_export_never_reaches_a_command_line(tmp_path, make_world):
    token = "inl1ne-t0ken-5d9f2a77"
    ready, done = tmp_path / "ready", tmp_path / "done"
    slow = tmp_path / "slow.sh"
    slow.write_text(f"touch {ready}\nfor i in $(seq 100); do [ -e {done} ] && break; sleep 0.05; done\n")
    _entry(make_world, [f"export X_TOKEN={token}", f"source {slow}"])
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


def test_bash_env_file_is_not_run_by_the_setup_shell(tmp_path, make_world):
    marker = tmp_path / "rc-ran"
    rc = tmp_path / "rc.sh"
    rc.write_text(f"touch {marker}\n")
    _entry(make_world, ["export A_SETTING=1"])
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
def sudo_box(tmp_path, make_world):
    pytest.importorskip("cryptography")
    _entry(make_world, ["export BOX_USER=ops"], SUDO_SECRETS, secrets="[box-sudo]")
    from recall.vault import store as vault
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


def test_steps_that_switch_global_state_stop_the_exec_and_never_run(tmp_path, make_world, monkeypatch):
    """Steps that would rewrite ~/.kube/config or the cloud CLI's default for every other shell
    never run, and neither does the command (it would reach the default account); the user reads
    which step, on stderr. Stand-in tools record any call."""
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
    for step in switching:
        path = _entry(make_world, ["export REGION=eu-west-1", step])
        r = run_recall("access", "exec", "box", "--", "sh", "-c", f"echo ran >> {calls}")
        assert (r.returncode, r.stdout) == (1, ""), r.stderr
        assert r.stderr.startswith(f"recall: setup step not allowed (setup.global-state): '{step}': "), r.stderr
        assert "switches state for every shell" in r.stderr and f"fix the entry at {path}:1" in r.stderr
        assert not calls.exists()


def _kube_box(tmp_path, make_world, monkeypatch):
    """A cluster entry whose setup is `kubectl config use-context ops-prod`; a kubectl that records
    each call's arguments."""
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    (bindir / "kubectl").write_text(f'#!/bin/sh\necho "kubectl $*" >> {calls}\n')
    (bindir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    _entry(make_world, ["kubectl config use-context ops-prod"], kind="cluster",
           verify="kubectl --context ops-prod get nodes")
    return calls


def test_a_hash_inside_a_word_hides_no_kubectl_from_the_context_rule(tmp_path, make_world, monkeypatch):
    """`a#` is a word to bash, not a comment: the xargs kubectl after it reads the default context,
    so the use-context step cannot be stood for, and nothing runs (shlex took `#…` for a comment)."""
    calls = _kube_box(tmp_path, make_world, monkeypatch)
    r = run_recall("access", "exec", "box", "--", "kubectl --context ops-prod get po; echo a#; echo x | xargs kubectl get po")
    assert (r.returncode, r.stdout) == (1, "") and not calls.exists(), r.stderr
    assert "setup step not allowed (setup.global-state)" in r.stderr
    r = run_recall("access", "exec", "box", "--", "kubectl get po # a comment\necho done")
    assert (r.returncode, r.stdout) == (0, "done\n"), r.stderr
    assert calls.read_text() == "kubectl --context ops-prod get po\n"


def test_a_command_of_megabytes_is_judged_in_linear_time(tmp_path, make_world, monkeypatch):
    """An MCP client may send any length of command: one word of 2 MB took shlex ~50 s to split."""
    from recall import api
    calls = _kube_box(tmp_path, make_world, monkeypatch)
    started = time.monotonic()
    answer = api.access_exec("box", "kubectl get po; word=" + "b" * 2_000_000 + "; echo done ${#word}", timeout=60)
    assert time.monotonic() - started < 10
    assert answer.to_dict()["stdout"] == "done 2000000\n" and calls.read_text() == "kubectl --context ops-prod get po\n"


def test_a_setup_that_cannot_run_as_promised_runs_nothing_and_says_what_verify_says(tmp_path, make_world):
    """Exec fails closed (issue 33 point 3): a sourced script that group can write (what umask 002
    makes), one that is missing, a step with &&, | or ;, a step the guard refuses: `access exec`
    runs nothing, CLI and MCP, exits 1 with the reason `verify` gives for the entry."""
    ran = tmp_path / "ran"
    ran.mkdir()
    own = tmp_path / "own.sh"
    own.write_text("export REGION=eu-west-1\n")
    own.chmod(0o600)
    old = os.umask(0o002)
    try:
        loose = tmp_path / "loose.sh"
        loose.write_text("export REGION=eu-west-1\n")          # 0664, as an editor saves it
    finally:
        os.umask(old)
    steps = {"loose": [f"source {loose}"], "missing": [f"source {tmp_path}/typo.sh"],
             "and": [f"source {own} && true"], "pipe": [f"source {own} | cat"], "semicolon": [f"source {own}; true"],
             "subst": [f"export X=$(touch {ran}/subst)"], "second": [f"source {own}", "DB_HOST=db1"]}
    inv = make_world(inventory="".join(f"- id: {name}\n  access: {json.dumps(s)}\n  verify: 'true'\n"
                                       for name, s in steps.items())
                     + f"- id: fine\n  access: [source {own}]\n  verify: 'true'\n").inventory
    report = {e["id"]: e["commands"][0] for e in json.loads(run_recall("--json", "verify").stdout)["entries"]}
    assert report["fine"]["status"] == "ok"
    for k, name in enumerate(steps):
        assert report[name]["status"] == "skipped", (name, report[name])
        r = run_recall("access", "exec", name, "--", "touch", f"{ran}/{name}")
        assert (r.returncode, r.stdout) == (1, ""), (name, r.stderr)
        assert r.stderr == f"recall: {report[name]['detail']} — nothing ran: fix the entry at {inv}:{3 * k + 1}\n"
    r = run_recall("access", "exec", "fine", "--", "sh", "-c", f"echo $REGION > {ran}/fine")
    assert r.returncode == 0 and sorted(os.listdir(ran)) == ["fine"], r.stderr
    pytest.importorskip("mcp")
    from tests.test_mcp import run_calls
    answers = run_calls([("recall_access_exec", {"id": name, "command": f"touch {ran}/mcp-{name}"})
                         for name in steps])
    for name, (text, is_error) in zip(steps, answers):
        assert is_error and report[name]["detail"] in text and "nothing ran" in text, (name, text)
    assert sorted(os.listdir(ran)) == ["fine"]


@pytest.mark.parametrize("off", ["set +e", "set +o errexit", "shopt -u -o errexit"])
def test_a_failed_step_stops_the_command_though_an_earlier_step_turned_errexit_off(tmp_path, make_world, off):
    """A sourced file that turns `set -e` off (many env scripts do) must not let a later step fail
    unnoticed: the command ran after a login that had failed."""
    first, login = tmp_path / "env.sh", tmp_path / "login.sh"
    first.write_text(f"{off}\nexport REGION=eu-west-1\n")
    login.write_text("echo 'login refused' >&2\nfalse\n")
    marker = tmp_path / "ran"
    _entry(make_world, [f"source {first}", f"source {login}"], verify="'true'")
    r = run_recall("access", "exec", "box", "--", "touch", str(marker))
    assert (r.returncode, r.stdout) == (1, "") and not marker.exists(), r.stderr
    assert r.stderr.startswith("recall: the setup steps of 'box' failed: login refused")
    report = json.loads(run_recall("--json", "verify", "box").stdout)["entries"][0]["commands"][0]
    assert report["status"] == "error" and "login refused" in report["detail"]


# -- a value the child holds, printed in pieces with a pause (issue 23 point 3) ----------------

SPLIT = 'printf %s "${V:0:5}"; sleep PAUSE; printf "%s\\n" "${V:5}"'
PIECES_SECRETS = """\
- id: box-token
  kind: token
  env: BOX_TOKEN
  value: "Zq7w-Ab3dE9fG7hJ2kL"
"""


@pytest.mark.parametrize("pause", ["0.6", "2"])
def test_a_value_printed_in_pieces_with_a_pause_stays_masked(tmp_path, make_world, pause):
    pytest.importorskip("cryptography")
    _entry(make_world, ["export DB_PWD=Xk9-setup-Vv7Tq2Lm"], PIECES_SECRETS, secrets="[box-token]")
    from recall.vault import store as vault
    cfg = load_config()
    vault.sync(db.connect(cfg.db_path), cfg)
    for source, label in (("BOX_TOKEN", "box-token"), ("DB_PWD", "box:DB_PWD")):
        r = run_recall("access", "exec", "box", "--", "bash", "-c",
                       f"V=${source}; " + SPLIT.replace("PAUSE", pause))
        assert (r.returncode, r.stdout) == (0, f"[recall:{label}]\n"), r.stderr


@pytest.mark.parametrize("pause", ["0.6", "2"])
def test_a_stdin_value_printed_in_pieces_with_a_pause_stays_masked(sudo_box, pause):
    r = run_recall("access", "exec", "box", "--", "bash", "-c", "read -r V; " + SPLIT.replace("PAUSE", pause))
    assert (r.returncode, r.stdout) == (0, "[recall:box-sudo]\n"), r.stderr


# -- display paths show what exec masks (issue 23 point 4) ---------------------------------------

DISPLAY_SECRET = {     # name -> (as the step writes it, the value bash sets)
    "DB_PWD": ("Xq7-db-pwd-9Lm2", "Xq7-db-pwd-9Lm2"),
    "PASSPHRASE": ("'correct horse battery staple'", "correct horse battery staple"),
    "SIGNING_KEY": ("sk_sign_7f8e9d0c1b2a", "sk_sign_7f8e9d0c1b2a"),
    "JWT": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig8Kq", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig8Kq"),
    "COOKIE": ('"session=ab12cd34ef56; Path=/"', "session=ab12cd34ef56; Path=/"),
    "REDIS_URL": ("redis://:r3disPw9x@cache.internal:6379/0", "redis://:r3disPw9x@cache.internal:6379/0"),
    "MONGODB_URI": ("mongodb+srv://app:m0ngoPw7q@c0.example.net/db", "mongodb+srv://app:m0ngoPw7q@c0.example.net/db"),
    "SLACK_WEBHOOK_URL": ("https://hooks.example.com/services/T0/B0/Xx9secret", "https://hooks.example.com/services/T0/B0/Xx9secret"),
    "SENTRY_DSN": ("https://abc123def456@o1.ingest.example.io/42", "https://abc123def456@o1.ingest.example.io/42"),
    "DATABASE_URL": ("postgres://u:pgPw8zz@db.internal:5432/app", "postgres://u:pgPw8zz@db.internal:5432/app"),
}
DISPLAY_CLEAR = {"AWS_REGION": "eu-west-1", "AWS_PROFILE": "ops-prod", "OPS_PROFILE": "admin-ro",
                 "KUBE_CONTEXT": "ops-prod", "CACHE_DIR": "/tmp/cache/ops"}


@pytest.fixture
def display_box(tmp_path, make_world):
    steps = [f"export {k}={written}" for k, (written, _v) in DISPLAY_SECRET.items()]
    steps += [f"export {k}={v}" for k, v in DISPLAY_CLEAR.items()]
    _entry(make_world, steps, verify="'true'", tags="[display]")


def _assert_shown_as_exec_masks(text: str) -> None:
    for name, (_written, value) in DISPLAY_SECRET.items():
        assert f"{name}=[recall:box:{name}]" in text, (name, text)
        for piece in value.replace(";", " ").split():
            assert piece not in text or len(piece) < 6, (name, piece, text)
    for name, value in DISPLAY_CLEAR.items():
        assert f"{name}={value}" in text, (name, text)


def test_access_exec_masks_exactly_what_the_display_paths_hide(display_box):
    names = [*DISPLAY_SECRET, *DISPLAY_CLEAR]
    r = run_recall("access", "exec", "box", "--", "bash", "-c",
                   "".join(f'echo "{n}=${n}"; ' for n in names))
    assert r.returncode == 0, r.stderr
    _assert_shown_as_exec_masks(r.stdout)
    shown = run_recall("access", "show", "box")
    assert shown.returncode == 0, shown.stderr
    _assert_shown_as_exec_masks(shown.stdout)


def test_show_find_search_pin_and_verify_dry_run_print_the_exec_labels(display_box):
    for args in (("access", "show", "box"), ("--json", "access", "show", "box"), ("access", "find", "display"),
                 ("--json", "access", "find", "box"), ("verify", "--dry-run", "box"),
                 ("--json", "verify", "--dry-run", "box")):
        r = run_recall(*args)
        assert r.returncode == 0, (args, r.stderr)
        _assert_shown_as_exec_masks(r.stdout.replace('\\"', '"'))
    assert run_recall("index").returncode == 0
    for args in (("search", "how do I reach box"), ("--json", "search", "box")):
        r = run_recall(*args)
        assert r.returncode == 0 and "Access: box" in r.stdout, (args, r.stderr)
        _assert_shown_as_exec_masks(r.stdout.replace('\\"', '"'))


def test_mcp_access_show_and_find_print_the_exec_labels(display_box, monkeypatch):
    pytest.importorskip("mcp")
    from recall.vault import audit
    monkeypatch.setitem(audit.CALLER, "name", "cli")      # build_server() marks the process as mcp
    import anyio
    from mcp import Client

    from recall import mcp_server

    async def calls():
        async with Client(mcp_server.build_server()) as client:
            return [await client.call_tool("recall_access_show", {"id": "box"}),
                    await client.call_tool("recall_access_find", {"query": "display"})]
    for result in anyio.run(calls):
        text = "".join(c.text for c in result.content)
        assert not result.is_error, text
        _assert_shown_as_exec_masks(text.replace('\\"', '"'))


def test_the_stderr_of_a_setup_step_that_succeeds_is_masked(tmp_path, make_world):
    script = tmp_path / "setup.sh"
    script.write_text('echo "setup says $DB_PWD" >&2\n')
    _entry(make_world, ["export DB_PWD=Xq7-db-pwd-9Lm2", f"source {script}"])
    r = run_recall("access", "exec", "box", "--", "echo", "ran")
    assert (r.returncode, r.stdout) == (0, "ran\n"), r.stderr
    assert "setup says [recall:box:DB_PWD]\n" in r.stderr and "Xq7-db-pwd-9Lm2" not in r.stderr, r.stderr


# A sourced file may set arrays: each element is what the setup set (`${!v}` read element 0 only).
ARRAY_VALUES = ("Aa1Bb2Cc3Dd4Ee5Ff6", "Mm1Nn2Oo3Pp4Qq5Rr6")
ARRAY_LINE = "echo ${CREDS[1]}; echo ${MAP[k]}"


def _windows(value: str, text: str) -> list:
    """Every 6-character piece of `value` that `text` holds."""
    return [value[i:i + 6] for i in range(len(value) - 5) if value[i:i + 6] in text]


def _array_entry(make_world, home, before: str = "") -> None:
    """~/utils/setup.sh (0600, as a user keeps it) setting an indexed and an associative array."""
    (home / "utils").mkdir()
    setup = home / "utils/setup.sh"
    setup.write_text(f"{before}CREDS=(user {ARRAY_VALUES[0]})\ndeclare -A MAP=([k]={ARRAY_VALUES[1]})\n")
    setup.chmod(0o600)
    _entry(make_world, ["source ~/utils/setup.sh"])


@pytest.mark.parametrize("before", ["", "set -u\ndeclare UNSET_ONE\n", "IFS=:\n"],
                         ids=["plain", "nounset", "ifs"])
def test_every_element_of_an_array_the_setup_sets_is_masked(make_world, isolated_home, before):
    """`set -u` and IFS, as a sourced file leaves them, once cut the list of what it set short."""
    _array_entry(make_world, isolated_home, before)
    r = run_recall("access", "exec", "box", "--", ARRAY_LINE)
    assert (r.returncode, r.stdout) == (0, "[recall:box:CREDS]\n[recall:box:MAP]\n"), r.stderr
    assert [w for v in ARRAY_VALUES for w in _windows(v, r.stdout + r.stderr)] == []


def test_mcp_access_exec_masks_every_element_of_an_array(make_world, isolated_home, monkeypatch):
    pytest.importorskip("mcp")
    from recall.vault import audit
    monkeypatch.setitem(audit.CALLER, "name", "cli")      # build_server() marks the process as mcp
    import anyio
    from mcp import Client

    from recall import mcp_server
    _array_entry(make_world, isolated_home)

    async def call():
        async with Client(mcp_server.build_server()) as client:
            return await client.call_tool("recall_access_exec", {"id": "box", "command": ARRAY_LINE})
    result = anyio.run(call)
    text = "".join(c.text for c in result.content)
    assert not result.is_error and "[recall:box:CREDS]\n[recall:box:MAP]\n" in text, text
    assert [w for v in ARRAY_VALUES for w in _windows(v, text)] == []


def test_a_setup_that_ends_before_saying_what_it_set_shows_none_of_its_output(tmp_path, make_world):
    """A sourced file that drops recall's EXIT trap and exits: what it set is unknown, so its own
    output (quoting the token it set) cannot be masked; it once came back as the error's last line."""
    token = "Tt1Uu2Vv3Ww4Xx5Yy6"
    script = tmp_path / "login.sh"
    script.write_text(f"export DEPLOY_TOKEN={token}\necho \"token $DEPLOY_TOKEN\" >&2\ntrap - EXIT\nexit 3\n")
    marker = tmp_path / "ran"
    _entry(make_world, [f"source {script}"])
    r = run_recall("access", "exec", "box", "--", f"touch {marker}; echo $DEPLOY_TOKEN")
    assert r.returncode == 1 and r.stdout == "" and not marker.exists()
    assert r.stderr.startswith("recall: the setup steps of 'box' ended before saying what they set"), r.stderr
    assert _windows(token, r.stdout + r.stderr) == []
