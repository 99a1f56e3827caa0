"""Config discovery and validation: every mistake names the file, the line and the key."""
import pytest

from recall.config import default_config_path, load_config
from recall.errors import RecallError


def _write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return str(p)


def test_discovery_order(tmp_path, monkeypatch, isolated_home):
    assert load_config().path is None
    default = default_config_path()
    default.parent.mkdir(parents=True)
    default.write_text("sources: []\n")
    assert load_config().path == default.resolve()
    env = _write(tmp_path, "sources: []\n")
    monkeypatch.setenv("RECALL_CONFIG", env)
    assert str(load_config().path) == env
    other = tmp_path / "other.yaml"
    other.write_text("sources: []\n")
    assert load_config(str(other)).path == other


def test_missing_explicit_config(tmp_path):
    with pytest.raises(RecallError, match="does not exist"):
        load_config(str(tmp_path / "nope.yaml"))


def test_recall_home_and_relative_paths(tmp_path, monkeypatch):
    (tmp_path / "n").mkdir()
    cfg = load_config(_write(tmp_path, "sources:\n  - {name: a, path: n}\nsecrets: s.yaml\n"))
    assert cfg.sources[0].path == tmp_path / "n"
    assert cfg.secrets == [tmp_path / "s.yaml"]
    assert str(cfg.home) == str(tmp_path / "state")


def test_tilde_is_expanded(tmp_path, isolated_home):
    cfg = load_config(_write(tmp_path, "sources: [{name: a, path: ~/notes}]\n"))
    assert cfg.sources[0].path == isolated_home / "notes"


@pytest.mark.parametrize("text,line,word", [
    ("sourcez: []\n", 1, "sourcez"),
    ("sources:\n  - name: a\n    path: /x\n    colour: red\n", 4, "colour"),
    ("sources: 3\n", 1, "sources"),
    ("sources:\n  - name: a\n", 2, "path"),
    ("sources: []\nembedding:\n  provider: openai\n", 3, "openai"),
    ("sources: []\nembedding:\n  token_cap: lots\n", 3, "token_cap"),
    ("sources: []\nembedding:\n  token_cap: true\n", 3, "token_cap"),
    ("sources:\n  - {name: a, path: /x}\n  - {name: a, path: /y}\n", 3, "duplicate"),
    ("sources: []\nmax_file_bytes: -5\n", 2, "max_file_bytes' must be at least 1, not -5"),
    ("sources: []\nembedding:\n  provider: none\n  batch_size: 0\n", 4, "batch_size' must be at least 1"),
    ("sources: []\nembedding:\n  token_cap: -1\n", 3, "token_cap' must be at least 0"),
    ("sources: []\nembedding:\n  dimension: -256\n", 3, "dimension' must be at least 0"),
    ("remotes:\n  - {name: a, host: b}\n  - name: c\n    host: d\n    timeout: -1\n", 5, "timeout"),
    ("remotes:\n  - name: c\n    host: d\n    timeout: .nan\n", 4, "timeout' must be at least"),
])
def test_bad_config_names_key_and_line(tmp_path, text, line, word):
    with pytest.raises(RecallError) as err:
        load_config(_write(tmp_path, text))
    msg = str(err.value)
    assert f"c.yaml:{line}" in msg and word in msg
