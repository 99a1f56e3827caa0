"""The CLI as a user meets it: help, exit codes, text and --json output, no tracebacks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recall.cli import build_parser
from recall.errors import RecallError
from tests.conftest import CANARY, REPO, run_recall


def _verbs():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "verb")
    return action.choices


def _all_verbs(parser=None, prefix=()):
    """(words, parser) of every verb, nested ones (secret sync, access exec …) included."""
    import argparse
    for action in (parser or build_parser())._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,), sub
                yield from _all_verbs(sub, prefix + (name,))


def test_every_verb_has_a_description_and_help_works(capsys):
    from recall.cli import main
    verbs = list(_all_verbs())
    assert len(verbs) >= 20
    for words, sub in verbs:
        with pytest.raises(SystemExit) as exit_:
            main([*words, "--help"])
        assert exit_.value.code == 0
        out = capsys.readouterr().out
        description = out.split("\n\n")[1]          # usage, blank line, the description
        assert sub.description and description.strip().startswith(sub.description.split("\n")[0]), words
        assert description[0].isupper() and not description.lstrip().startswith(("positional", "options")), words


def test_search_help_explains_the_modes_with_an_example(cli):
    r = run_recall("search", "--help")
    assert r.returncode == 0
    for mode in ("auto", "keyword", "semantic", "hybrid"):
        assert f"\n  {mode}  " in r.stdout, mode
    assert "examples:\n  recall search INC-10963" in r.stdout


def test_version(capsys):
    r = run_recall("--version")
    assert r.returncode == 0 and r.stdout == "recall 0.1.0\n"


def _usage_error(capsys, *words) -> str:
    """A usage error in-process: exit 2, and stderr as the user sees it."""
    from recall.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(list(words))
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_an_unknown_option_shows_the_verbs_usage(capsys):
    assert _usage_error(capsys, "search", "--frob").startswith("usage: recall search ")
    err = _usage_error(capsys, "search", "disk", "--frob")
    assert err.startswith("usage: recall search ") and "recall: unrecognized arguments: --frob" in err
    assert "recall search -- --frob" in err                 # it may be meant as a word of the query
    err = _usage_error(capsys, "secret", "sync", "--frob")
    assert err.startswith("usage: recall secret sync ")
    assert "after '--'" not in err                          # sync takes no words: no hint about them


def test_the_dash_hint_only_when_a_word_starts_with_dash(capsys):
    for words in (["search"], ["read", "a.md", "b.md"], ["secret", "show"]):
        err = _usage_error(capsys, *words)
        assert "after '--'" not in err, (words, err)


def test_every_verb_is_known_to_the_one_verb_parser():
    from recall.cli import VERBS, verb_of
    assert tuple(_verbs()) == VERBS
    assert verb_of(["--config", "search", "secret", "find", "x"]) == "secret"
    assert verb_of(["--json", "search", "x"]) == "search" and verb_of(["--help"]) is None


def test_usage_error_exits_2(cli):
    with pytest.raises(SystemExit) as exit_:
        cli("search")
    assert exit_.value.code == 2


def test_no_config_is_a_friendly_message(cli):
    code, out, err = cli("search", "x")
    assert code == 1
    assert err.startswith("recall: no config file") and "run 'recall init'" in err
    assert "Traceback" not in err


def test_index_search_text_and_json(cli, config):
    code, out, err = cli("index")
    assert code == 0 and out.startswith("indexed: 4 new")
    code, out, err = cli("search", "INC-10963")
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("1. incidents/2023/INC-10963-db-failover.md:") and "2023-04-02" in first
    code, out, err = cli("--json", "search", "INC-10963", "-n", "3")
    data = json.loads(out)
    assert set(data) >= {"query", "mode", "access", "hits"}
    hit = data["hits"][0]
    assert set(hit) >= {"source", "relpath", "path", "line", "end_line", "breadcrumb", "snippet", "score", "date"}
    assert os.path.isfile(hit["path"]) and hit["relpath"].startswith("incidents/")
    # --json is accepted after the verb too
    code, out2, _ = cli("search", "INC-10963", "--json")
    assert json.loads(out2)["hits"][0]["relpath"] == hit["relpath"]


def test_search_no_hits(cli, config):
    cli("index")
    code, out, _ = cli("search", "zzqxnotthere")
    assert code == 0 and "no notes match" in out


def test_search_before_index_says_what_to_do(cli, config):
    code, out, err = cli("search", "x")
    assert code == 1 and "recall index" in err


def test_read_section_with_line_numbers_and_offset(cli, config):
    cli("index")
    code, out, _ = cli("read", "incidents/2023/INC-10963-db-failover.md:16")
    assert code == 0
    assert "Timeline" in out and "Rollback" not in out
    assert "│ - 02:10 alert fired" in out
    code, out, _ = cli("read", "incidents/2023/INC-10963-db-failover.md", "--max-chars", "200")
    assert "--offset" in out.splitlines()[-1]
    offset = out.splitlines()[-1].split("--offset ")[1]
    code, out2, _ = cli("read", "incidents/2023/INC-10963-db-failover.md", "--offset", offset)
    assert out2.splitlines()[1].split("│")[0].strip() == str(int(offset) + 1)


def test_read_refuses_paths_outside_sources(cli, config, tmp_path):
    cli("index")
    (tmp_path / "outside.md").write_text("secret-ish\n")
    code, out, err = cli("read", str(tmp_path / "outside.md"))
    assert code == 1 and "not inside a configured source" in err
    code, out, err = cli("read", "../outside.md")
    assert code == 1


def test_a_query_that_starts_with_a_dash_is_explained(cli, config, notes):
    (notes / "flags.md").write_text("# Shell flags\n\nbash -x traces every command.\n")
    cli("index")
    for words in (["search", "-x"], ["search", "bash", "-x"]):
        r = run_recall(*words)
        assert r.returncode == 2 and "recall search -- -x" in r.stderr, r.stderr
    code, out, _ = cli("search", "--", "-x")
    assert code == 0 and "flags.md" in out


def test_launcher_runs_from_any_cwd(tmp_path, config):
    r = run_recall("index", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_recall("--json", "search", "jump01", cwd="/")
    assert json.loads(r.stdout)["hits"][0]["relpath"] == "runbooks/jump-hosts.md"
    r = subprocess.run([sys.executable, "-m", "recall", "search", "jump01"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0 and "jump-hosts.md" in r.stdout


def _processes_holding(marker: bytes) -> list:
    """Pids of this machine's processes whose environment holds `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_a_search_leaves_nothing_running(tmp_path, config):
    """Every command runs in its own process: once `recall search` (or index, or a search whose
    caller holds a value in its environment) has exited, no process of it, and no copy of its
    caller's environment, is left on the machine — while a wrapper waiting on an inherited
    descriptor sees EOF at once."""
    marker = f"RC_MARK_{os.getpid()}_{tmp_path.name}"
    env = {marker: "caller-value"}
    assert run_recall("index", env=env).returncode == 0
    for _ in range(2):                  # a second search is where a warm helper would have answered
        r = run_recall("search", "jump01", env=env)
        assert r.returncode == 0 and "jump-hosts.md" in r.stdout, r.stderr
    assert _processes_holding(marker.encode()) == []
    # `$(…)` waits for EOF on the pipe recall inherits: nothing may keep it open after recall exits
    r = subprocess.run(["bash", "-c", f'out=$({sys.executable} {REPO / "recall.py"} search jump01 3>&1); '
                                      'echo "${#out}"'], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **env})
    assert r.returncode == 0 and int(r.stdout.strip()) > 0, r.stderr
    assert _processes_holding(marker.encode()) == []


def test_closed_standard_streams_get_a_sentence_not_a_traceback(tmp_path, config):
    """`recall search x >&-` (a tired slip, or a service manager) says the output is closed and
    exits 2, as grep does; with stderr closed too nothing is printed, and it still exits 2; a
    closed stderr alone does not stop a search; `recall mcp <&-` says its input is closed."""
    assert run_recall("index").returncode == 0
    launcher = f"{sys.executable} {REPO / 'recall.py'}"
    for verb in ("search jump01", "doctor", "secret find x"):
        r = subprocess.run(["sh", "-c", f"exec {launcher} {verb} >&-"], capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stderr) == (2, "recall: standard output is closed; send it to a file or a pipe "
                                               "(recall … > out.txt)\n"), (verb, r.stderr)
    r = subprocess.run(["sh", "-c", f"exec {launcher} mcp <&-"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (2, "recall: standard input is closed; 'recall mcp' reads its client's "
                                           "requests there (an MCP client starts it with a pipe)\n")
    r = subprocess.run(["sh", "-c", f"exec {launcher} search jump01 >&- 2>&-"], capture_output=True, timeout=60)
    assert r.returncode == 2
    r = subprocess.run(["sh", "-c", f"exec {launcher} search jump01 2>&-"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "jump-hosts.md" in r.stdout


def test_search_while_index_runs_in_another_process(tmp_path, config, notes):
    """WAL + busy timeout: readers never see 'database is locked' while a writer indexes."""
    for i in range(400):         # enough that several searches fall inside the writer's run
        (notes / "bulk" / f"n{i:03}.md").parent.mkdir(exist_ok=True)
        (notes / "bulk" / f"n{i:03}.md").write_text(f"# note {i}\n\nhost web{i:03}.example.com " * 30)
    r = run_recall("index")
    assert r.returncode == 0, r.stderr
    writer = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "index", "--full"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    failures, overlapped = [], 0
    try:
        while writer.poll() is None:
            r = run_recall("--json", "search", "web123")
            if r.returncode != 0:
                failures.append(r.stderr)
            elif writer.poll() is None:       # began and ended while the writer was indexing
                overlapped += 1
                assert json.loads(r.stdout)["hits"][0]["relpath"] == "bulk/n123.md"
    finally:
        out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert failures == [] and overlapped >= 1


def test_no_traceback_on_bad_config(cli, tmp_path, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - name: n\n    path: /tmp\n    colour: blue\n")
    code, out, err = cli("--config", bad, "index")
    assert code == 1 and "bad.yaml:4" in err and "colour" in err and "Traceback" not in err


def test_read_says_lines_a_b_of_the_files_line_count(cli, config, notes):
    cli("index")
    rel = "incidents/2023/INC-10963-db-failover.md"
    total = len((notes / rel).read_text().splitlines())
    code, out, _ = cli("read", f"{rel}:16")
    assert code == 0 and out.splitlines()[0] == f"notes:{rel} lines 11-17 of {total}"
    assert total == 22 and "Rollback" not in out


def test_keyword_only_search_says_why(cli, config):
    cli("index")
    code, out, _ = cli("search", "failover timeline")
    assert out.rstrip().splitlines()[-1].startswith("(keyword search: no embedding provider is configured")
    code, out, _ = cli("search", "INC-10963")                # an identifier is keyword by design
    assert "no embedding provider" not in out
    code, out, _ = cli("--json", "search", "failover timeline")
    assert json.loads(out)["route"] == "keyword (no embedding provider)"


def test_several_unknown_config_keys_are_each_named_first_in_file_order(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - name: n\n    path: /tmp\n    colour: blue\nsize: 3\n"
                   "embedding:\n  provider: none\n  modle: x\n")
    code, out, err = cli("--config", bad, "index")
    assert code == 1 and len(err.splitlines()) == 1
    assert err.startswith(f"recall: {bad}:4: unknown field 'colour' in a source "
                          "(also 'size' in the config at line 5, 'modle' in embedding at line 8)")


def test_eval_with_no_judged_file_in_the_index_warns_and_exits_1(cli, config, tmp_path):
    cli("index")
    golden = tmp_path / "golden.jsonl"
    golden.write_text('{"query": "disk", "relevant": ["elsewhere/disk.md"]}\n')
    code, out, err = cli("eval", golden)
    assert code == 1 and out == ""
    assert f"none of the 1 file judged in {golden} is in the index" in err and "--config" in err
    golden.write_text('{"query": "disk", "relevant": ["elsewhere/disk.md"]}\n'
                      '{"query": "INC-10963", "relevant": ["incidents/2023/INC-10963-db-failover.md"]}\n')
    code, out, err = cli("eval", golden)
    assert code == 0 and "warning: 1 of 2 judged files are not in the index (e.g. elsewhere/disk.md)" in err


def test_eval_prints_a_judged_query_holding_a_vault_value_through_the_door(cli, make_world, tmp_path):
    """eval opens config and DB as every verb does (api.opened): a missed query it lists is masked."""
    pytest.importorskip("cryptography")
    make_world(secrets=f"- id: jira-api-token\n  service: jira\n  value: {CANARY}\n")
    assert cli("secret", "sync")[0] == 0 and cli("index")[0] == 0
    golden = tmp_path / "golden.jsonl"
    golden.write_text(json.dumps({"query": f"why {CANARY}",
                                  "relevant": ["incidents/2023/INC-10963-db-failover.md"]}) + "\n")
    r = run_recall("eval", "--verbose", golden)       # a process of its own: no masker built before
    code, out, err = r.returncode, r.stdout, r.stderr
    leaked = CANARY in out + err
    assert code == 0 and not leaked
    assert "missed (auto, all): why [recall:jira-api-token]" in out


@pytest.fixture
def synced(cli, make_world):
    pytest.importorskip("cryptography")
    secrets = make_world(secrets=f"- id: jira-api-token\n  service: jira\n  value: {CANARY}\n").secrets
    code, out, err = cli("secret", "sync")
    assert (code, out) == (0, "synced 1 secret: 1 added, 0 updated, 0 removed; 1 value sealed in its "
                         "file (ENC[...])\n"), err
    return secrets


def test_secret_sync_says_unchanged_when_nothing_changed(cli, synced):
    import re
    code, out, _ = cli("secret", "sync")
    assert (code, out) == (0, "synced 1 secret: unchanged\n")
    synced.write_text(synced.read_text().replace("service: jira", "service: jira cloud"))
    code, out, _ = cli("secret", "sync")
    assert out == "synced 1 secret: 0 added, 1 updated, 0 removed\n"
    synced.write_text(re.sub(r"value: .*", f"value: {CANARY}-rotated", synced.read_text()))   # over ENC[...]
    code, out, _ = cli("secret", "sync")
    assert out == "synced 1 secret: 0 added, 1 updated, 0 removed; 1 value sealed in its file " \
                  "(ENC[...])\n" and CANARY not in out


@pytest.mark.parametrize("value, brackets", [("<paste the token>", "and its < > "), ("'<your token here>'", "and its < > "),
                                             (f"<{CANARY}>", "and its < > "), ("…", ""), ("...", "")])
def test_secret_sync_refuses_a_placeholder(cli, synced, value, brackets):
    """A token pasted between the example's < > (only the words selected) was told to replace the placeholder."""
    synced.write_text(f"- id: jira-api-token\n  service: jira\n  value: {value}\n"
                      f"- id: db\n  fields: {{user: admin, password: <the password>}}\n")
    code, out, err = cli("secret", "sync")
    assert code == 1 and out == ""
    assert err == (f"recall: {synced}:3: secret 'jira-api-token' still has a placeholder value — replace the "
                   f"placeholder {brackets}with the real value, then run 'recall secret sync' again\n")
    synced.write_text("- id: db\n  fields: {user: admin, password: <the password>}\n")
    code, out, err = cli("secret", "sync")
    assert code == 1 and "secret 'db.password' still has a placeholder value" in err and "<the password>" not in err


def test_no_message_says_recall_twice(cli, synced, tmp_path):
    cases = [("secret", "get", "jira-api-token"), ("read", "nowhere.md"), ("access", "show", "x"),
             ("index", "--remote", "nobox"), ("eval", tmp_path / "none.jsonl"), ("search", "--mode", "semantic", "x")]
    cli("index")
    for words in cases:
        code, out, err = cli(*words)
        assert code == 1 and err.startswith("recall: "), (words, err)
        assert not err.startswith(("recall: recall", "recall: 'recall")), (words, err)


# -- the first step: init, bare recall, examples, --limit (issue 26 point 1) ---------------------

def test_init_writes_a_starter_that_works_and_names_the_next_three_commands(cli, monkeypatch, isolated_home):
    import stat
    code, out, err = cli("init")
    assert code == 0, err
    folder = isolated_home / ".config" / "recall"
    config, secrets, inventory = folder / "config.yaml", folder / "secrets.yaml", folder / "inventory.yaml"
    assert config.is_file() and inventory.is_file() and (isolated_home / "notes").is_dir()
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600 and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert "path: ~/notes" in config.read_text() and "secrets: [~/.config/recall/secrets.yaml]" in config.read_text()
    commands = [line.split("#")[0].strip() for line in out.split("next:\n")[1].splitlines()[:3]]
    assert commands == ["recall index", 'recall search "some words"', "recall doctor"]
    (isolated_home / "notes" / "jira.md").write_text("# Jira\n\nOur project key is OPS.\n")
    assert cli("index")[0] == 0
    code, out, _ = cli("search", "jira")
    assert code == 0 and "jira.md:1" in out
    for words in (["secret", "sync"], ["access", "find"], ["verify"]):
        code, out, err = cli(*words)
        assert code == 0, (words, out, err)
    # a find over the starter files says where the first entry goes, not only that nothing matched
    assert cli("access", "find", "jump01")[1] == ("no inventory entries match — the inventory holds no entries "
                                                  f"yet: add one to {inventory}\n")
    assert cli("secret", "find", "jira")[1] == ("no secrets match — the vault holds no secrets yet: add one to "
                                                f"{secrets}, then run 'recall secret sync'\n")
    from recall.doctor import run_doctor
    bad = [c for c in run_doctor(extras=False) if not c.ok]
    assert not bad, bad


def test_init_refuses_an_existing_config_and_changes_nothing(cli, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("sources: [{name: notes, path: /nowhere}]\n")
    code, out, err = cli("--config", path, "init")
    assert code == 1 and err.startswith(f"recall: {path} is already a config; nothing written")
    assert path.read_text() == "sources: [{name: notes, path: /nowhere}]\n"
    assert not (tmp_path / "secrets.yaml").exists()


def test_init_with_another_config_hands_out_commands_that_name_it(cli, tmp_path):
    path = tmp_path / "cfg" / "recall.yaml"
    code, out, err = cli("--config", path, "init", "--notes", tmp_path / "work-notes")
    assert code == 0, err
    assert f"recall --config {path} index" in out and (tmp_path / "work-notes").is_dir()
    # the sync too: a bare 'recall secret sync' would sync the default config's files, not these
    assert out.endswith(f"credentials: add them to {path.parent}/secrets.yaml, then 'recall --config {path} "
                        "secret sync'\n")
    assert cli("--config", path, "index")[0] == 0


def _hinted(said: str) -> str:
    """The first recall command a line tells its reader to run ('recall …')."""
    import re
    return re.search(r"'(recall [^']*)'", said).group(1)


def _plain_shell(tmp_path, home) -> dict:
    """The environment of a shell a person pastes a line into: `recall` on its PATH (this checkout), no
    RECALL_CONFIG, RECALL_HOME or PYTHONPATH of this run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "recall").write_text(f'#!/bin/sh\nexec {sys.executable} {REPO / "recall.py"} "$@"\n')
    (bin_dir / "recall").chmod(0o755)
    return {"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin"}


def test_a_hint_names_the_config_given_by_flag_so_pasted_in_a_plain_shell_it_acts_on_that_config(
        tmp_path, isolated_home, monkeypatch):
    """`recall --config FILE …`: each command an error, a notice or doctor hands out names FILE; run as
    printed in another shell (another folder, none of this run's environment) it acts on FILE's notes and
    secrets, never on the default config's. Without --config the hint is as it always was."""
    from tests.world import build
    pytest.importorskip("cryptography")
    monkeypatch.delenv("RECALL_HOME")                # each config its own state folder, as for a person
    work = build(tmp_path / "work", notes={"runbooks/vpn.md": "# VPN\n\nReconnect the wireguard tunnel.\n",
                                           "runbooks/long.md": "# Long\n\n" + "A line of filler.\n" * 40 + "Then MTU.\n"},
                 secrets="- id: tok\n  service: jira\n  value: not-a-real-token-42\n")
    personal = isolated_home / ".config/recall/config.yaml"          # the default: what a bare `recall` reads
    personal.parent.mkdir(parents=True)
    personal.write_text(f"sources: [{{name: home, path: {tmp_path / 'home-notes'}}}]\n")
    (tmp_path / "home-notes").mkdir()
    shell = dict(cwd=tmp_path / "home-notes", env=_plain_shell(tmp_path, isolated_home), shell=True,
                 capture_output=True, text=True)

    r = run_recall("search", "wireguard", env={"RECALL_CONFIG": str(work.config)})     # the default case: unchanged
    assert r.returncode == 1 and r.stderr.endswith(" — run 'recall index' first\n"), r.stderr
    r = run_recall("--config", work.config, "search", "wireguard")                      # 1. an error's hint
    assert r.returncode == 1 and r.stderr.endswith(f" — run 'recall --config {work.config} index' first\n"), r.stderr
    assert subprocess.run(_hinted(r.stderr), **shell).returncode == 0
    r = run_recall("--config", work.config, "search", "wireguard")
    assert r.returncode == 0 and "runbooks/vpn.md" in r.stdout, r.stderr
    assert f"see 'recall --config {work.config} doctor')" in r.stdout          # search's own footer
    r = run_recall("--config", work.config, "read", "runbooks/long.md", "--max-chars", "200")
    footer = r.stdout.splitlines()[-1]                                                # a read cut short
    assert footer.startswith(f"… more: recall --config {work.config} read runbooks/long.md --offset "), r.stdout
    assert "Then MTU." in subprocess.run(footer.removeprefix("… more: "), **shell).stdout

    r = run_recall("--config", work.config, "secret", "exec", "tok", "--", "true")         # 2. another error's
    assert r.returncode == 1 and r.stderr.endswith(f"run 'recall --config {work.config} secret sync'\n"), r.stderr
    assert subprocess.run(_hinted(r.stderr), **shell).returncode == 0
    assert run_recall("--config", work.config, "secret", "exec", "tok", "--", "true").returncode == 0

    (work.notes / "new.md").write_text("# New\n\nThe pager rotation moved to Tuesdays.\n")
    r = run_recall("--config", work.config, "doctor")                                     # 3. doctor's
    said = next(line for line in r.stdout.splitlines() if "not in the index" in line)
    assert f"run 'recall --config {work.config} index'" in said, said
    assert subprocess.run(_hinted(said), **shell).returncode == 0
    assert "new.md" in run_recall("--config", work.config, "search", "pager", "rotation").stdout

    r = run_recall("--config", work.config, "search", " ")                                 # 4. an example
    assert r.stderr.endswith(f"e.g. recall --config {work.config} search 'INC-10963'\n"), r.stderr
    assert not (isolated_home / ".local/share/recall/recall.db").exists()       # the default config's: never touched


def test_bare_recall_lists_the_verbs_and_exits_0(cli):
    from recall.cli import VERBS
    code, out, err = cli()
    assert code == 0 and not err
    for verb in VERBS:
        assert f"\n    {verb} " in out, verb


@pytest.mark.parametrize("words, verbs", [
    (["secret"], "sync, set, key, find, show, command, exec, get, log, restore, rotate-key"),
    (["access"], "find, show, exec"), (["secret", "key"], "backup")])
def test_a_verb_group_alone_lists_its_verbs(words, verbs):
    """`recall secret` to see what it does said only "the following arguments are required: VERB"."""
    r = run_recall(*words)
    prog = " ".join(["recall", *words])
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"recall: {prog} needs a verb: {verbs} — '{prog} --help' says what each does\n"


@pytest.mark.parametrize("words, said", [
    (["search", "jira", "--explian"], "recall search has no option '--explian' — did you mean '--explain'? "
                                      "(a word that starts with '-' goes after '--')"),
    (["index", "--fulll"], "recall index has no option '--fulll' — did you mean '--full'?"),
    (["verify", "--dryrun"], "recall verify has no option '--dryrun' — did you mean '--dry-run'?"),
    (["secret", "sync", "--prnue"], "recall secret sync has no option '--prnue' — did you mean '--prune'?"),
    (["--jsno", "search", "x"], "recall has no option '--jsno' — did you mean '--json'?")])
def test_an_option_typed_wrong_names_the_closest(words, said):
    """`--explian` was told to go after '--' (to be searched for), `--fulll` got argparse's usage and
    'unrecognized arguments'; a word close to no option still gets the '--' hint."""
    r = run_recall(*words)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"recall: {said}\n")
    r = run_recall("search", "jira", "--prod")
    assert r.returncode == 2 and r.stderr.endswith("recall: words that start with '-' go after '--', as in: "
                                                   "recall search -- --prod\n")
    r = run_recall("secret", "set", "new-one", "--service", "jira")    # an id is no word to move after '--'
    assert r.returncode == 2 and r.stderr.endswith("recall: unrecognized arguments: --service jira\n"), r.stderr


def test_every_verb_help_ends_with_an_example(capsys):
    from recall.cli import main
    for words, _ in _all_verbs():
        with pytest.raises(SystemExit):
            main([*words, "--help"])
        out = capsys.readouterr().out
        assert "examples:\n  recall " in out or "examples:\n  claude mcp add recall" in out, words


def test_limit_is_the_long_name_of_n(cli, config):
    cli("index", "--no-embed")
    code, out, err = cli("search", "primary", "--limit", "1")
    assert code == 0, err
    assert out.count("\n1. ") + out.startswith("1. ") == 1 and "\n2. " not in out


def test_the_readme_exec_lines_leave_every_variable_to_the_child():
    """`secret exec db-admin -- psql -U "$DB_ADMIN_USERNAME"` expanded in the caller's shell, where
    the variable is empty: each `$VAR` goes inside sh -c '…', as `secret command` writes it."""
    import re
    lines = [line for line in (REPO / "README.md").read_text().splitlines()
             if re.match(r"\s*recall secret exec \S+ .*--", line)]
    assert lines
    for line in lines:
        outside = re.sub(r"'[^']*'", "''", line.split("#")[0])       # what the caller's shell expands
        assert "$" not in outside, line


def test_the_license_is_the_mit_text_pyproject_names():
    text = (REPO / "LICENSE").read_text()
    assert 'license = {text = "MIT"}' in (REPO / "pyproject.toml").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the recall authors\n")
    assert "WITHOUT WARRANTY OF ANY KIND" in text


def test_the_readme_lists_every_field_of_the_secrets_and_inventory_files():
    import re

    from recall.inventory import FIELDS as INVENTORY_FIELDS
    from recall.vault.secretfile import ALLOWED as SECRET_FIELDS
    text = (REPO / "README.md").read_text()
    section = text[text.index("## File formats"):text.index("## Make targets")]
    secrets, inventory = section.split("**Inventory file**")
    for fields, table in ((SECRET_FIELDS, secrets), (INVENTORY_FIELDS, inventory)):
        listed = re.findall(r"^\| `(\w+)` \| \S", table, re.M)
        assert sorted(listed) == sorted(fields), set(listed) ^ set(fields)


def test_every_n_has_limit_beside_it(capsys):
    """The MCP tools say `limit`; every verb that takes -n takes --limit too."""
    for words, sub in _all_verbs():
        actions = {o: a for a in sub._actions for o in a.option_strings}
        if "-n" in actions:
            assert "--limit" in actions and actions["--limit"] is actions["-n"], words


# -- numbers, write errors, messages, no config, did you mean (issues 36 and 37) -----------------------

NUMBERS = [(["search", "disk", "-n", "99999999999999999999"], "-n/--limit"), (["search", "disk", "-n", "0"], "-n/--limit"),
           (["search", "disk", "-n", "ten"], "-n/--limit"), (["read", "a.md", "--offset", "-1"], "--offset"),
           (["read", "a.md", "--max-chars", "1e99"], "--max-chars"), (["verify", "--timeout", "nan"], "--timeout"),
           (["verify", "--timeout", "0"], "--timeout"), (["verify", "--timeout", "-1"], "--timeout"),
           (["verify", "--timeout", "inf"], "--timeout"), (["secret", "log", "-n", "10000000000000"], "-n/--limit")]


@pytest.mark.parametrize("args,flag", NUMBERS)
def test_every_numeric_flag_has_a_range_said_in_one_line(config, args, flag):
    r = run_recall(*args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"recall: argument {flag}: ") and "--help" in r.stderr
    assert not (Path(os.environ["RECALL_HOME"]) / "recall.db").exists()         # nothing run or stored


def _unbuffered_off():
    return {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


WRITING = [["search", "jump01"], ["--json", "search", "jump01"], ["read", "runbooks/jump-hosts.md"], ["doctor"],
           ["index"], ["--json", "secret", "log"], ["verify", "--dry-run"], ["instructions"], ["access", "find"],
           ["secret", "find"], ["--json", "doctor"], [], ["--help"], ["--version"], ["secret", "--help"]]


@pytest.mark.parametrize("verb", WRITING)
def test_a_full_device_on_stdout_ends_in_one_line_and_exit_1(make_world, verb):
    make_world(inventory="- id: box\n  verify: 'true'\n", secrets="")
    assert run_recall("index").returncode == 0
    with open("/dev/full", "w") as full:        # buffered as a user's shell runs it (no PYTHONUNBUFFERED)
        r = subprocess.run([sys.executable, str(REPO / "recall.py"), *verb], stdout=full, stderr=subprocess.PIPE,
                           text=True, env=_unbuffered_off(), timeout=120)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("recall: could not write the output (No space left on device)"), r.stderr


@pytest.mark.parametrize("verb", [["search", "jump01"], ["read", "runbooks/jump-hosts.md"], ["--json", "doctor"]])
def test_a_closed_pipe_on_stdout_ends_silently(config, verb):
    assert run_recall("index").returncode == 0
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), *verb], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_unbuffered_off())
    proc.stdout.close()                         # as `| head -0` does before recall writes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1 and err == "", err


@pytest.mark.parametrize("text,said", [("sources: {name: notes}\n", "'sources' must be a list (`- name: …`), not a mapping"),
                                       ("sources:\n", "'sources' must be a list (`- name: …`), not empty"),
                                       ("sources: 3\n", "not the number 3"),
                                       ("embedding: [voyage]\n", "must be a mapping (`key: value`), not a list")])
def test_config_mistakes_speak_the_files_words(tmp_path, text, said):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    r = run_recall("--config", path, "search", "x")
    assert r.returncode == 1 and said in r.stderr and f"{path}:1" in r.stderr, r.stderr
    for internal in ("YMap", "YList", "NoneType", "dict", "list,", "int"):
        assert internal not in r.stderr.replace("a list (", "").replace("not a list", ""), r.stderr


NEEDS_CONFIG = [["index"], ["search", "disk"], ["read", "a.md"], ["secret", "sync"], ["secret", "find"],
                ["secret", "show", "x"], ["secret", "log"], ["secret", "command", "x", "--", "env"],
                ["secret", "exec", "x", "--", "env"], ["access", "find"], ["access", "show", "x"],
                ["access", "exec", "x"], ["verify"], ["verify", "--dry-run"], ["eval", "golden/queries.jsonl"],
                ["secret", "rotate-key"]]


@pytest.mark.parametrize("verb", NEEDS_CONFIG)
def test_with_no_config_every_verb_says_recall_init(verb):
    r = run_recall(*verb)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("recall: no config file") and "'recall init'" in r.stderr, r.stderr


def test_a_verb_typed_wrong_gets_the_closest_in_one_line():
    for words, said in ((["serach", "disk"], "recall has no verb 'serach' — did you mean 'search'?"),
                        (["secret", "fnd"], "recall secret has no verb 'fnd' — did you mean 'find'?"),
                        (["search", "x", "--mode", "keywrd"], "--mode takes no 'keywrd' — did you mean 'keyword'?"),
                        # a flag cut short is not taken for the one it starts (`sync --prun` pruned)
                        (["secret", "sync", "--prun"], "recall secret sync has no option '--prun' — did you mean "
                                                       "'--prune'?"),
                        (["--jso", "doctor"], "recall has no option '--jso' — did you mean '--json'?")):
        r = run_recall(*words)
        assert r.returncode == 2 and r.stderr == f"recall: {said}\n", r.stderr


def test_a_read_path_as_the_shell_completes_it_from_here_reads_the_note(config, notes, tmp_path):
    """`recall read notes/runbooks/jump-hosts.md` typed from the folder above the notes (tab-completed)
    said "no indexed note"; a path from here that is not a note inside a source still is one."""
    assert run_recall("index").returncode == 0
    rel = notes.relative_to(tmp_path) / "runbooks" / "jump-hosts.md"
    r = run_recall("read", f"{rel}:3", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("notes:runbooks/jump-hosts.md lines "), r.stderr
    r = run_recall("read", "jump-hosts.md", cwd=notes / "runbooks")
    assert r.returncode == 0 and r.stdout.startswith("notes:runbooks/jump-hosts.md lines "), r.stderr
    (tmp_path / "outside.md").write_text("# Outside\n")
    r = run_recall("read", "outside.md", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("recall: no indexed note outside.md"), r.stderr


def test_a_read_path_typed_wrong_gets_the_closest_indexed_paths(config):
    assert run_recall("index").returncode == 0
    r = run_recall("read", "runbooks/jump-host.md")
    assert r.returncode == 1 and "did you mean: runbooks/jump-hosts.md?" in r.stderr, r.stderr


def test_a_read_path_as_search_shows_it_typed_wrong_gets_the_closest_too(config):
    """The agent copies `notes:path:line` from a hit and slips a letter or the line: it was told to have
    the user run 'recall index', as if the note were new; an empty path was 'no indexed note .'."""
    assert run_recall("index").returncode == 0
    for typed in ("notes:runbooks/jump-host.md:3", "notes:runbooks/jump-hosts.md:-3"):
        r = run_recall("read", typed)
        assert r.returncode == 1 and "did you mean: notes:runbooks/jump-hosts.md?" in r.stderr, r.stderr
    (config.path.parent.parent / "notes" / "runbooks" / "jump-hosts-v2.md").write_text("# New\n")   # on disk, not indexed
    r = run_recall("read", "notes:runbooks/jump-hosts-v2.md")
    assert r.returncode == 1 and r.stderr.endswith("run 'recall index' if it is new\n"), r.stderr
    r = run_recall("read", "")
    assert (r.returncode, r.stderr) == (1, "recall: no path given — use a path from 'recall search' output\n")


def test_a_read_naming_no_source_or_remote_or_holding_a_nul_says_so(config):
    """`recall read buildbox:notes.md:12` with no remote of that name offered a note of another name;
    a NUL in the path was a traceback (over MCP, a bare "Error executing tool")."""
    assert run_recall("index").returncode == 0
    r = run_recall("read", "buildbox:runbooks/jump-hosts.md:12")
    assert r.returncode == 1 and r.stderr == ("recall: no source or remote named 'buildbox', and no indexed note "
                                              "buildbox:runbooks/jump-hosts.md — the sources and remotes: notes\n"), r.stderr
    for typed in ("runbooks/jump-hosts.md\0", "/tmp/\0x"):
        from recall import api
        with pytest.raises(RecallError, match="a path holds no NUL character"):
            api.read(typed)


def test_an_error_quoting_an_id_with_a_newline_stays_one_line(config):
    r = run_recall("secret", "show", "bad\nid")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr


NOT_UTF8 = os.fsdecode(b"jira-\xff\xfe")       # what Python makes of bytes typed that are not UTF-8


def test_words_that_are_not_utf8_are_one_line_and_a_command_gets_its_bytes(synced, tmp_path):
    """A secret id of bytes that are not UTF-8 was a traceback in every secret verb (SQLite cannot
    hold the surrogates Python keeps them as), and so was such a word in exec's command."""
    for verb in (["secret", "show"], ["secret", "command"], ["secret", "find"], ["secret", "log"],
                 ["secret", "get"], ["secret", "exec", NOT_UTF8, "--", "true"]):
        args = verb if NOT_UTF8 in verb else [*verb, NOT_UTF8]
        r = run_recall(*args)
        assert "Traceback" not in r.stderr and r.returncode in (0, 1), (verb, r.stderr[-300:])
    r = run_recall("secret", "show", NOT_UTF8)
    assert r.stderr == "recall: no secret 'jira-\ufffd\ufffd' — see 'recall secret find QUERY'\n", r.stderr
    out = tmp_path / "got"
    r = run_recall("secret", "exec", "jira-api-token", "--", "sh", "-c", 'printf %s "$1" > "$2"', "sh", NOT_UTF8, out)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-300:]
    assert out.read_bytes() == b"jira-\xff\xfe"          # the child got the bytes as typed
    assert "sh 'jira-\ufffd\ufffd'" in run_recall("secret", "log").stdout


def test_a_path_that_is_not_utf8_prints_under_a_strict_utf8_stdout(tmp_path):
    """A UTF-8 locale's stdout refuses surrogates: `instructions --install` of such a path was a traceback."""
    target = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"CLAUDE-\xff.md"))
    r = run_recall("instructions", "--install", target, env={"PYTHONIOENCODING": "utf-8:strict"})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-300:]
    assert r.stdout.startswith(f"created {tmp_path}/CLAUDE-\\udcff.md with the recall rules"), r.stdout


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_terminated_exec_stops_its_child_too(synced, tmp_path, sig):
    """SIGTERM (or SIGHUP: the terminal closed) ended recall and left the child, in a session of its
    own, running with the secret in its environment."""
    import contextlib
    import signal
    import time
    pid_file = tmp_path / "child.pid"
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "secret", "exec", "jira-api-token", "--",
                             "sh", "-c", f'echo $$ > {pid_file}; sleep 60'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(200):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            time.sleep(0.05)
        child = int(pid_file.read_text())
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    try:
        assert proc.returncode == 128 + getattr(signal, sig) and err == f"recall: stopped by {sig}\n", err
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)          # the old code's orphan, not left to the next test


@pytest.mark.parametrize("typed", [["search", "-n", CANARY, "x"], ["search", "--mode", CANARY, "x"], [CANARY],
                                   ["verify", "--timeout", CANARY], ["search", "--" + CANARY]])
def test_a_usage_error_does_not_say_back_a_secret_typed_in_it(synced, typed):
    """argparse's errors echoed the word typed where a number, a mode or a verb was wanted, past the door."""
    r = run_recall(*typed)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert CANARY not in r.stderr and CANARY[8:20] not in r.stderr and "[recall:jira-api-token]" in r.stderr, r.stderr


def _old_pythons() -> list:
    """Interpreters older than 3.9 that pyenv has here (the launcher's user may have only one of them)."""
    import glob
    import pwd
    root = os.environ.get("PYENV_ROOT") or os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", "[23].*", "bin", "python")))
    return [p for p in found if tuple(int(x) for x in Path(p).parent.parent.name.split(".")[:2]) < (3, 9)]


@pytest.mark.parametrize("how", ["launcher", "-m"])
def test_an_older_python_gets_one_line_naming_the_python_it_needs(tmp_path, how):
    """`python3.8 path/to/recall.py` (a box whose python3 is older): one line, exit 1, from 2.7 to 3.8."""
    pythons = _old_pythons()
    if not pythons:
        pytest.skip("no Python older than 3.9 here (pyenv versions)")
    for python in pythons:
        argv = [python, str(REPO / "recall.py"), "search", "x"] if how == "launcher" else [python, "-m", "recall", "search", "x"]
        r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"})
        version = Path(python).parent.parent.name
        assert (r.returncode, r.stdout) == (1, ""), (python, r.stderr)
        assert r.stderr == (f"recall: recall needs Python 3.9 or newer, and this is Python {version} ({python}): "
                            "run it with a newer python3\n"), (python, r.stderr)
