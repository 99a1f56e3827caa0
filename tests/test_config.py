"""Config discovery and validation: every mistake names the file, the line and the key."""
import pytest

from recall.config import counted, default_config_path, load_config
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


def test_a_space_at_the_end_of_a_path_shows(tmp_path):
    """`--config "c.yaml "` said "config file c.yaml does not exist" beside an existing c.yaml; a
    source's `path: "~/notes "` said "~/notes is not a folder": the space did not show."""
    from recall.notes.walk import walk_source
    c = _write(tmp_path, f"sources:\n  - name: n\n    path: '{tmp_path} '\n")
    with pytest.raises(RecallError) as err:
        load_config(f"{c} ")
    assert str(err.value) == f"config file '{c} ' (from --config) does not exist — {c} exists: leave out the " \
                             "space at the end of the name"
    with pytest.raises(RecallError) as err:
        list(walk_source(load_config(str(c)).sources[0]))
    assert f"source 'n': '{tmp_path} ' is not a folder" in str(err.value)


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
    ("sourcse: []\n", 1, "unknown field 'sourcse' in the config — did you mean 'sources'? (known fields: embedding,"),
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
    ("remotes:\n  - {name: a, host: b}\n  - name: my/box\n    host: d\n", 3, "remote name 'my/box' is not one word"),
    ("remotes:\n  - name: 'box:2'\n    host: d\n", 2, "remote name 'box:2' is not one word"),
    ("sources:\n  - {name: notes, path: /x}\nremotes:\n  - name: notes\n    host: d\n", 4,
     "remote name 'notes' is also a source's name"),
    # a bracket or brace was taken as written and matched nothing, silently
    ("sources:\n  - name: a\n    path: /x\n    include: ['*.md', '[unclosed']\n", 4,
     "include pattern '[unclosed' holds [ ] or { }, which recall's patterns do not know — use *, ** and ?"),
    ("sources:\n  - name: a\n    path: /x\n    exclude:\n      - drafts/\n      - '*.{tmp,bak}'\n", 6,
     "exclude pattern '*.{tmp,bak}' holds"),
])
def test_bad_config_names_key_and_line(tmp_path, text, line, word):
    with pytest.raises(RecallError) as err:
        load_config(_write(tmp_path, text))
    msg = str(err.value)
    assert f"c.yaml:{line}" in msg and word in msg


@pytest.mark.parametrize("text,line", [
    ("sources:\n  - name: a\n    path: $HOME/notes\n", 3),
    ("sources:\n  - {name: a, path: ~notes}\n", 2),
    ("secrets:\n  - s.yaml\n  - ${XDG_CONFIG_HOME}/recall/secrets.yaml\n", 3),
    ("home: $HOME/.recall\n", 1),
])
def test_a_shell_variable_in_a_config_path_is_said_not_read_as_a_folder_of_that_name(tmp_path, isolated_home, monkeypatch, text, line):
    """`$HOME/notes` was <config folder>/$HOME/notes: 'not there', or a `$HOME` folder made beside the config."""
    monkeypatch.delenv("RECALL_HOME")        # else `home:` is not read
    (isolated_home / "notes").mkdir()
    with pytest.raises(RecallError) as err:
        load_config(_write(tmp_path, text))
    assert f"c.yaml:{line}:" in str(err.value) and "expands no $VARIABLE or ~user" in str(err.value)
    (tmp_path / "$HOME").mkdir()            # a folder really named so is read as written
    (tmp_path / "$HOME" / "notes").mkdir()
    assert load_config(_write(tmp_path, "sources: [{name: a, path: $HOME/notes}]\n")).sources[0].path == tmp_path / "$HOME" / "notes"


@pytest.mark.parametrize("text,line,word", [       # "\0" in a double-quoted path (a Windows habit)
    ('sources:\n  - name: a\n    path: "notes\\0x"\n', 3, "'path' holds a NUL byte"),
    ('secrets: ["s.yaml\\0"]\n', 1, "'secrets' holds a NUL byte"),
    ('inventory:\n  - i.yaml\n  - "j\\0.yaml"\n', 3, "'inventory' holds a NUL byte"),
    ('home: "st\\0ate"\n', 1, "'home' holds a NUL byte"),
])
def test_a_nul_byte_in_a_config_path_is_one_line_for_every_verb(tmp_path, monkeypatch, text, line, word):
    """Each verb stat()s the paths: a NUL in one was a ValueError traceback (index, search, doctor, sync)."""
    from tests.conftest import run_recall
    monkeypatch.delenv("RECALL_HOME", raising=False)
    config = _write(tmp_path, text)
    for verb in (["index"], ["search", "x"], ["doctor"], ["secret", "sync"], ["access", "find", "x"]):
        r = run_recall("--config", config, *verb)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (verb, r.stderr)
        assert f"c.yaml:{line}: {word}" in r.stderr + r.stdout, (verb, r.stderr)


@pytest.mark.parametrize("spelling", ["~/both.yaml", "absolute", "a link"])
def test_a_file_named_under_both_secrets_and_inventory_is_refused_at_its_line(tmp_path, isolated_home, cli, spelling):
    """A file is a secrets file or an inventory: named under both (in any spelling), every verb says the config
    line, and nothing reads or writes the file (a sync would have sealed it, access find listed it broken)."""
    both = isolated_home / "both.yaml"
    both.write_text("- id: tok\n  service: jira\n  value: abcdefgh1234\n")
    both.chmod(0o600)
    (tmp_path / "link.yaml").symlink_to(both)
    named = {"absolute": str(both), "a link": str(tmp_path / "link.yaml")}.get(spelling, spelling)
    config = _write(tmp_path, f"sources: []\nsecrets: [~/both.yaml]\ninventory:\n  - other.yaml\n  - {named}\n")
    said = (f"{config}:5: 'inventory' names {named.replace('~', str(isolated_home))}, which 'secrets' names too (line 2) "
            "— keep the credentials and the inventory entries in two files, each named once")
    for verb in (["secret", "sync"], ["access", "find"]):
        assert cli("--config", config, *verb) == (1, "", f"recall: {said}\n"), verb
    assert f"  {said}\n" in cli("--config", config, "doctor")[1]          # its config check
    assert both.read_text() == "- id: tok\n  service: jira\n  value: abcdefgh1234\n"
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("kind, verb", [("secrets", ["secret", "sync"]), ("inventory", ["access", "find"])])
def test_a_config_naming_no_file_of_a_kind_says_the_line_that_adds_one_beside_it(tmp_path, isolated_home, cli,
                                                                                   kind, verb):
    """No secrets file (or inventory) named: the error names the config and the line to add, for a file
    beside the config as `recall init` writes it — outside the notes tree, never inside it — and with
    that line and file in place, the verb runs."""
    notes = isolated_home / "notes"
    notes.mkdir()
    folder = isolated_home / ".config" / "recall"
    folder.mkdir(parents=True)
    config = folder / "config.yaml"
    config.write_text("sources: [{name: notes, path: ~/notes}]\n")
    code, _, err = cli("--config", str(config), *verb)
    add = f"{kind}: [~/.config/recall/{kind}.yaml]"
    assert (code, err) == (1, f"recall: no {kind} files configured in ~/.config/recall/config.yaml — add "
                              f"'{add}' to it (a file outside the notes tree)\n")
    assert "~/notes" not in err
    config.write_text(config.read_text() + add + "\n")
    (folder / f"{kind}.yaml").write_text("")
    (folder / f"{kind}.yaml").chmod(0o600)
    assert cli("--config", str(config), *verb)[0] == 0


def test_only_the_commands_a_text_hands_out_name_the_config(tmp_path):
    """The rule both faces apply under --config: a command recall tells its reader to run names the file;
    prose that only names recall, and a command that names a config already, stay as they are."""
    from recall.config import with_config
    c = tmp_path / "c.yaml"
    named = {
        "no index at x — run 'recall index' first": f"no index at x — run 'recall --config {c} index' first",
        "read it at a terminal with `recall secret get`": f"read it at a terminal with `recall --config {c} secret get`",
        "entry 'vpn' has no verify command — recall access exec vpn -- CMD …":
            f"entry 'vpn' has no verify command — recall --config {c} access exec vpn -- CMD …",
        "empty query — say what to look for, e.g. recall search 'INC-10963'":
            f"empty query — say what to look for, e.g. recall --config {c} search 'INC-10963'",
    }
    kept = ["recall secret get needs a controlling terminal (/dev/tty)", "a.md reads as a recall secrets file",
            "x — recall reads only the notes it indexes", "pip install 'recall[mcp]'", "recall mcp follows the sources",
            "run 'recall --config /else.yaml init' to write one there"]
    assert with_config([*named, *kept], str(c)) == [*named.values(), *kept]
    assert with_config({"detail": [*named]}, None) == {"detail": [*named]}


# -- each config has its own state: another --config never reads or rewrites the personal index

def _personal(isolated_home, notes):
    """The default config file naming `notes`, and no RECALL_HOME: the state where a user's is."""
    default = default_config_path()
    default.parent.mkdir(parents=True)
    default.write_text(f"sources:\n  - name: notes\n    path: {notes}\n")
    return default


def test_each_config_file_has_a_state_folder_of_its_own(tmp_path, monkeypatch, isolated_home):
    from recall.config import default_home, key_folder
    monkeypatch.delenv("RECALL_HOME")
    assert load_config().home == default_home() == isolated_home / ".local/share/recall"   # no config
    _personal(isolated_home, tmp_path)
    assert load_config().home == default_home()                                          # the default file
    other = load_config(_write(tmp_path, "sources: []\n"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "c.yaml").write_text("sources: []\n")
    third = load_config(str(tmp_path / "elsewhere" / "c.yaml"))
    assert other.home.parent == third.home.parent == default_home() / "configs"
    assert other.home != third.home and other.home.name.startswith(f"{tmp_path.name}-c-")
    monkeypatch.chdir(tmp_path)
    assert load_config("c.yaml").home == other.home                                    # however it is named
    assert key_folder(other.home) == default_home()          # the person's key: the same secrets files open
    named = load_config(_write(tmp_path, "sources: []\nhome: state-here\n"))
    assert named.home == tmp_path / "state-here" and key_folder(named.home) == named.home
    monkeypatch.setenv("RECALL_HOME", str(tmp_path / "forced"))
    assert load_config(str(tmp_path / "c.yaml")).home == tmp_path / "forced"          # RECALL_HOME wins


def test_the_sample_notes_line_leaves_the_personal_index_alone(notes, isolated_home, monkeypatch):
    """The README's `recall --config golden/recall.yaml index`, run by a user with their own index."""
    import json

    from tests.conftest import run_recall
    monkeypatch.delenv("RECALL_HOME")
    _personal(isolated_home, notes)
    assert run_recall("index").returncode == 0
    r = run_recall("--config", "golden/recall.yaml", "index")
    assert r.returncode == 0 and ", 0 removed" in r.stdout, r.stdout + r.stderr
    again = run_recall("index")
    assert again.returncode == 0 and "0 new, 0 changed, 0 removed" in again.stdout, again.stdout
    hits = json.loads(run_recall("--json", "search", "jump01").stdout)["hits"]
    assert [h["relpath"] for h in hits] == ["runbooks/jump-hosts.md"]
    golden = json.loads(run_recall("--json", "--config", "golden/recall.yaml", "search", "jump01").stdout)
    assert {h["source"] for h in golden["hits"]} <= {"golden"}
    for folder in (".local/share/recall", ".local/share/recall/configs"):      # 0700 all the way
        assert not (isolated_home / folder).stat().st_mode & 0o077


def test_a_second_config_naming_the_same_secrets_files_opens_them_and_the_first_keeps_them(
        notes, isolated_home, tmp_path, monkeypatch):
    """Two configs, one secrets file sealed under the person's key: each syncs and runs with it; neither
    config's sync reseals it out of the other's reach."""
    import subprocess
    import sys

    from tests.conftest import CANARY, run_recall
    pytest.importorskip("cryptography")
    monkeypatch.delenv("RECALL_HOME")
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(f"- id: jira-api-token\n  service: jira\n  value: {CANARY}\n")
    secrets.chmod(0o600)
    personal = _personal(isolated_home, notes)
    personal.write_text(personal.read_text() + f"secrets: [{secrets}]\n")
    work = tmp_path / "work.yaml"
    work.write_text(f"sources:\n  - name: notes\n    path: {notes}\nsecrets: [{secrets}]\n")
    prints = ["secret", "exec", "jira-api-token", "--", sys.executable, "-c",
              "import os; print(len(os.environ['JIRA_API_TOKEN']))"]
    assert run_recall("secret", "sync").returncode == 0
    sealed = secrets.read_text()
    assert CANARY not in sealed
    r = run_recall("--config", work, "secret", "sync")
    assert r.returncode == 0, r.stderr
    assert secrets.read_text() == sealed                           # nothing resealed under another key
    for first in ([], ["--config", str(work)]):
        r = run_recall(*first, *prints)
        assert (r.returncode, r.stdout) == (0, f"{len(CANARY)}\n"), r.stderr
    line = run_recall("--config", work, "secret", "command", *prints[2:]).stdout.strip()
    assert "RECALL_HOME" not in line and f"--config {work}" in line      # the file names its state
    bare = {"HOME": str(isolated_home), "PATH": "/usr/bin:/bin"}           # a shell with none of ours
    r = subprocess.run(line, shell=True, capture_output=True, text=True, env=bare, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, f"{len(CANARY)}\n"), r.stderr
    assert sorted(p.name for p in (isolated_home / ".local/share/recall").rglob("vault.key")) == ["vault.key"]


def test_a_handed_out_line_names_the_state_only_when_the_environment_moved_it(tmp_path, monkeypatch):
    from recall.config import invocation
    monkeypatch.delenv("RECALL_HOME")
    cfg = load_config(_write(tmp_path, "sources: []\n"))
    line = invocation(cfg)
    assert line.endswith(f" --config {cfg.path}") and "RECALL_HOME" not in line and "XDG" not in line
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert invocation(load_config(str(cfg.path))).startswith(f"XDG_DATA_HOME={tmp_path / 'data'} ")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))      # the default config's state is the default's
    assert invocation(load_config(str(cfg.path))).startswith(
        f"XDG_DATA_HOME={tmp_path / 'data'} XDG_CONFIG_HOME={tmp_path / 'cfg'} ")
    monkeypatch.setenv("RECALL_HOME", str(tmp_path / "state"))
    assert invocation(load_config(str(cfg.path))).startswith(f"RECALL_HOME={tmp_path / 'state'} ")
    monkeypatch.setenv("RECALL_KEY_FILE", str(tmp_path / "keys" / "k"))
    assert invocation(load_config(str(cfg.path))).startswith(
        f"RECALL_HOME={tmp_path / 'state'} RECALL_KEY_FILE={tmp_path / 'keys' / 'k'} ")


def test_a_count_reads_as_english_one_and_many():
    """What every count in a sentence recall says goes through: `synced 1 secret`, `3 entries`."""
    assert [counted(n, "secret") for n in (0, 1, 2)] == ["0 secrets", "1 secret", "2 secrets"]
    assert [counted(n, "entry") for n in (1, 3)] == ["1 entry", "3 entries"]
    assert counted(45020, "chunk") == "45,020 chunks"
