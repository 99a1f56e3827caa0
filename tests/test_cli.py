"""The CLI as a user meets it: help, exit codes, text and --json output, no tracebacks."""
import json
import os
import subprocess
import sys

import pytest

from recall.cli import build_parser
from tests.conftest import REPO, run_recall


def _verbs():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "verb")
    return action.choices


def test_every_verb_has_help_text_and_help_works(cli):
    for name, sub in _verbs().items():
        assert sub.description or any(a.help for a in sub._actions), name
        with pytest.raises(SystemExit) as exit_:
            cli(name, "--help")
        assert exit_.value.code == 0


def test_every_verb_is_known_to_the_one_verb_parser():
    from recall.cli import VERBS, _verb_of
    assert tuple(_verbs()) == VERBS
    assert _verb_of(["--config", "search", "secret", "find", "x"]) == "secret"
    assert _verb_of(["--json", "search", "x"]) == "search" and _verb_of(["--help"]) is None


def test_usage_error_exits_2(cli):
    with pytest.raises(SystemExit) as exit_:
        cli("search")
    assert exit_.value.code == 2


def test_no_config_is_a_friendly_message(cli):
    code, out, err = cli("search", "x")
    assert code == 1
    assert err.startswith("recall: no config file") and "sources:" in err
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


def test_doctor_reports_versions_and_paths(cli, config):
    code, out, _ = cli("doctor")
    assert code == 0
    assert "python" in out and "sqlite" in out and "fts5" in out and str(config.path) in out
    code, out, _ = cli("--json", "doctor")
    names = {c["name"] for c in json.loads(out)}
    assert {"python", "sqlite", "fts5", "config", "database", "extra cryptography"} <= names


def test_doctor_says_which_extras_really_import(config, tmp_path):
    """Stand-in packages first on the path: one that fails to import, one that imports."""
    shadow = tmp_path / "shadow"
    for name, body in (("cryptography", "raise ImportError('libssl.so.3: cannot open shared object file')\n"),
                       ("mcp", "__version__ = '9.9.9'\n")):
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(body)
    r = run_recall("doctor", env={"PYTHONPATH": str(shadow)})
    lines = {line.split()[2]: line for line in r.stdout.splitlines() if line.split()[1:2] == ["extra"]}
    assert "fails to import: ImportError: libssl.so.3" in lines["cryptography"]
    assert "recall[crypto]" in lines["cryptography"]
    assert "imports (9.9.9)" in lines["mcp"]


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


def test_search_while_index_runs_in_another_process(tmp_path, config, notes):
    """WAL + busy timeout: readers never see 'database is locked' while a writer indexes."""
    for i in range(1000):        # enough that several searches fall inside the writer's run
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
