"""No hidden switches: every environment variable recall reads is in the README's reference table,
and each one does what the table says."""
import ast
import re

import pytest

from tests.conftest import REPO

NOT_SWITCHES = {"PATH", "COLUMNS"}   # programs to run, the help's width: read as every tool does; not settings


def _read_in_code() -> dict:
    """{variable: first file:line} for every literal name recall reads from os.environ / os.getenv."""
    found: dict = {}
    for path in sorted((REPO / "recall").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = None
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = ast.unparse(node.func)
                if func in ("os.environ.get", "os.getenv", "environ.get", "getenv", "_xdg"):   # _xdg(var, …) in config
                    name = node.args[0].value
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                    and ast.unparse(node.value) in ("os.environ", "environ") and isinstance(node.slice, ast.Constant):
                name = node.slice.value
            if isinstance(name, str) and name not in NOT_SWITCHES:
                found.setdefault(name, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def _documented() -> set:
    text = (REPO / "README.md").read_text()
    table = text[text.index("## Environment variables"):]
    table = table[:table.index("\n## ")] if "\n## " in table else table
    return set(re.findall(r"^\| `([A-Z_]+)` \|", table, re.M))


def test_every_variable_recall_reads_is_in_the_readme_and_tested():
    code, documented = _read_in_code(), _documented()
    missing = {name: at for name, at in code.items() if name not in documented}
    assert not missing, f"read but not in the README's 'Environment variables' table: {missing}"
    stale = documented - set(code)
    assert not stale, f"the README documents variables recall no longer reads: {sorted(stale)}"
    tests = "".join(p.read_text() for p in (REPO / "tests").glob("test_*.py") if p.name != "test_environment.py")
    untested = sorted(name for name in documented if name not in tests)
    assert not untested, f"no test sets {untested}"
    assert len(code) >= 8            # the check sees the reads (RECALL_HOME, RECALL_CONFIG, …)


def test_config_and_state_folders_follow_the_variables(tmp_path, monkeypatch):
    from recall import config
    from recall.vault import keyfile
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("RECALL_HOME")
    assert config.default_config_path() == tmp_path / "cfg" / "recall" / "config.yaml"
    assert config.home_dir() == tmp_path / "data" / "recall"
    monkeypatch.setenv("RECALL_HOME", str(tmp_path / "state"))
    assert config.home_dir() == tmp_path / "state"
    assert keyfile.key_path(config.home_dir()) == tmp_path / "state" / "vault.key"
    monkeypatch.setenv("RECALL_KEY_FILE", str(tmp_path / "elsewhere.key"))
    assert keyfile.key_path(config.home_dir()) == tmp_path / "elsewhere.key"


def test_recall_config_names_the_file_and_recall_home_wins_over_home_in_it(tmp_path, monkeypatch):
    from recall import config
    path = tmp_path / "c.yaml"
    path.write_text(f"home: {tmp_path / 'from-config'}\n")
    monkeypatch.setenv("RECALL_CONFIG", str(path))
    assert config.find_config() == path.resolve()
    assert config.load_config().home == tmp_path / "state"          # RECALL_HOME (set for every test)
    monkeypatch.delenv("RECALL_HOME")
    assert config.load_config().home == tmp_path / "from-config"
    monkeypatch.setenv("RECALL_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(config.RecallError, match="from RECALL_CONFIG"):
        config.find_config()


def test_voyage_base_url_comes_from_the_config_then_the_variable(monkeypatch):
    from recall.config import Embedding
    from recall.embed import providers as embed
    monkeypatch.delenv("RECALL_VOYAGE_BASE_URL", raising=False)
    assert embed.voyage_base_url(Embedding(provider="voyage")) == embed.VOYAGE_URL.rstrip("/")
    monkeypatch.setenv("RECALL_VOYAGE_BASE_URL", "http://127.0.0.1:9/v1/")
    assert embed.voyage_base_url(Embedding(provider="voyage")) == "http://127.0.0.1:9/v1"
    assert embed.voyage_base_url(Embedding(provider="voyage", base_url="http://127.0.0.1:8")) == "http://127.0.0.1:8"
