"""Find and load the config (RECALL_CONFIG, XDG) and its state folder (RECALL_HOME, `home:`, one per config
file), and fill in defaults."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import yaml
from .errors import InputError, RecallError
from .yaml import line_of

DEFAULT_INCLUDE = ["*.md", "*.markdown", "*.mdx", "*.mkd", "*.md.erb", "*.txt", "*.rst"]
EXAMPLE = 'sources: [{name: notes, path: ~/notes}]'


@dataclass
class Source:
    name: str = ""
    path: Path | None = None
    include: list = field(default_factory=lambda: list(DEFAULT_INCLUDE))
    exclude: list = field(default_factory=list)
    line: int = 0
    config_path: str = "config"     # the config file that names it, for errors at its line


@dataclass
class Embedding:
    provider: str = "none"          # voyage | local | none
    model: str = ""
    dimension: int = 0              # 0: the model's default
    token_cap: int = 20_000_000
    api_key_secret: str = ""        # a vault id holding the Voyage key
    batch_size: int = 64
    rerank_model: str = "rerank-2.5-lite"
    base_url: str = ""              # Voyage endpoint override (tests, proxies)


@dataclass
class Remote:
    name: str = ""
    host: str = ""
    path: str = "~/recall"
    config: str = ""
    timeout: float = 10.0
    ssh_config: str = ""            # an `ssh -F` file, when the host is not in ~/.ssh/config


@dataclass
class Config:
    path: Path | None = None        # None: no config file was found
    home: Path | None = None
    sources: list = field(default_factory=list)
    secrets: list = field(default_factory=list)
    inventory: list = field(default_factory=list)
    embedding: Embedding = field(default_factory=Embedding)
    remotes: list = field(default_factory=list)
    max_file_bytes: int = 2_000_000

    @property
    def db_path(self) -> Path:
        return self.home / "recall.db"

    def require_file(self) -> None:
        """The one answer for "no config": every verb that reads one says this when there is none."""
        if self.path is None:
            raise RecallError(f"no config file (looked for {default_config_path()})",
                              "run 'recall init' to write a starter one (or name yours with --config FILE)")

    def require_files(self, kind: str) -> None:
        """No `secrets` (or `inventory`) file named: the line to add, naming the file `recall init`
        would have written beside this config, outside the notes."""
        self.require_file()
        if not getattr(self, kind):
            raise RecallError(f"no {kind} files configured in {shown(self.path)}",
                              f"add '{kind}: [{shown(self.path.parent / (kind + '.yaml'))}]' to it "
                              "(a file outside the notes tree)")

    def require_sources(self) -> None:
        self.require_file()
        if not self.sources:
            raise RecallError(f"{self.path}: no sources configured", f"add {EXAMPLE!r}")


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else Path.home() / fallback


def shown(path: Path) -> str:
    """A path as the config says it: under the home folder with '~'."""
    home = Path.home()
    try:
        return "~/" + str(path.relative_to(home))
    except ValueError:
        return str(path)


def counted(n: int, noun: str) -> str:
    """`n` and the noun, plural but for one: '1 secret', '2 secrets', '3 entries', '1,024 chunks'."""
    if n == 1:
        return f"1 {noun}"
    return f"{n:,} {noun[:-1]}ies" if noun.endswith("y") else f"{n:,} {noun}s"


def default_config_path() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "recall" / "config.yaml"


def default_home() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share") / "recall"


def home_dir(config_path: Path | None = None) -> Path:
    """The state folder (the DB and all derived from it): RECALL_HOME; else the default folder for the
    default config file (or none); else one of the config file's own, so that no other config reads or
    rewrites the personal index (a `home:` in the config names another, see apply_doc)."""
    value = os.environ.get("RECALL_HOME")
    if value:
        return Path(value).expanduser()
    if config_path is None or Path(config_path) == default_config_path().resolve():
        return default_home()
    return default_home() / "configs" / state_name(Path(config_path))


def state_name(config_path: Path) -> str:
    """`<folder>-<file>-<hash of its absolute path>`: a config file's own state folder, recognisable by name."""
    import hashlib
    import re
    words = f"{config_path.parent.name}-{config_path.stem}".strip("-")
    digest = hashlib.sha256(str(config_path).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]", "_", words) + "-" + digest


def key_folder(home: Path) -> Path:
    """Where the vault key of state folder `home` lives: a config's own folder (default/configs/NAME) keeps
    none, the person's key in the default folder opens its values — two configs may name the same secrets
    files, sealed under one key; any other home (RECALL_HOME, `home:`) keeps its own."""
    home = Path(home)
    return default_home() if home.parent == default_home() / "configs" else home


def key_file(home) -> Path:
    """The vault key's file: RECALL_KEY_FILE, else vault.key in the key's folder (key_folder)."""
    override = os.environ.get("RECALL_KEY_FILE")
    return Path(override).expanduser() if override else key_folder(home) / "vault.key"


def spelled(path: str) -> str:
    """A path as typed, quoted when a space or tab at its ends would not show ('notes ' is not 'notes')."""
    import shlex
    return shlex.quote(path) if path != path.strip() else path


def find_config(explicit: str | None = None) -> Path | None:
    """The config file to use: --config, then RECALL_CONFIG, then the XDG default if it exists."""
    for candidate, named in ((explicit, "--config"), (os.environ.get("RECALL_CONFIG"), "RECALL_CONFIG")):
        if candidate:
            path = Path(candidate).expanduser()
            if path.is_dir():
                raise RecallError(f"config file {path} (from {named}) is a folder, not a file",
                                  f"name the file in it, e.g. {path / 'config.yaml'}")
            if not path.is_file():
                trimmed = Path(str(path).strip())
                raise RecallError(f"config file {spelled(str(path))} (from {named}) does not exist",
                                  f"{trimmed} exists: leave out the space at the end of the name"
                                  if trimmed != path and trimmed.is_file() else
                                  f"run 'recall --config {path} init' to write a starter one there")
            return path.resolve()
    default = default_config_path()
    return default.resolve() if default.is_file() else None


def load_config(explicit: str | None = None) -> Config:
    path = find_config(explicit)
    cfg = Config(path=path, home=home_dir(path))
    if path is not None:
        doc = yaml.load(str(path))
        if doc is not None:
            apply_doc(cfg, doc, str(path))
    return cfg


# -- validation -------------------------------------------------------------------------------

TOP_KEYS = {"sources", "secrets", "inventory", "embedding", "remotes", "max_file_bytes", "home"}
SOURCE_KEYS = {"name", "path", "include", "exclude"}
EMBEDDING_TYPES = {"provider": str, "model": str, "dimension": int, "token_cap": int,
                   "api_key_secret": str, "batch_size": int, "rerank_model": str, "base_url": str}
REMOTE_TYPES = {"name": str, "host": str, "path": str, "config": str, "ssh_config": str, "timeout": float}
_KINDS = {str: "text", int: "a whole number", list: "a list (`- name: …`)", dict: "a mapping (`key: value`)",
          float: "a number"}


def written_as(value) -> str:
    """What a YAML value is, in the words of the file: never a Python or parser type name."""
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a yes/no)"
    if isinstance(value, (int, float)):
        return f"the number {value:g}"
    return next((_KINDS[kind] for kind in (list, dict) if isinstance(value, kind)), "text")


def _expect(value, kind, path, line, what):
    # a bool is no number; a whole number is a float
    if not isinstance(value, (int, float) if kind is float else kind) or \
            (kind in (int, float) and isinstance(value, bool)):
        raise InputError(path, line, f"'{what}' must be {_KINDS[kind]}, not {written_as(value)}")
    if isinstance(value, str) and "\0" in value:      # no path or name holds one: every stat() would raise
        raise InputError(path, line, f"'{what}' holds a NUL byte", hint="remove it (a '\\0' escape?)")
    return value


def _field(mapping, key, kind, path, what=None, minimum=None):
    """mapping[key] checked to be of `kind` (and at least `minimum`), or an error at its line."""
    value = _expect(mapping[key], kind, path, line_of(mapping, key), what or key)
    if minimum is not None and not value >= minimum:          # NaN too
        raise InputError(path, line_of(mapping, key), f"'{what or key}' must be at least {minimum:g}, not {value:g}")
    return value


def _resolve(base: Path, text: str, path: str, line) -> Path:
    """`text` under the config's folder (an absolute path replaces it), `~/` the home folder; no shell
    reads a config, so a `$VAR` or an unknown `~user` in a path that is not there is said, not guessed."""
    full = base / os.path.expanduser(text)
    if "$" in text or text.startswith("~"):
        import re
        if re.search(r"\$\{?\w|^~[^/]", text) and not full.exists():
            raise InputError(path, line, f"{text!r} is not there as written: recall expands no $VARIABLE or ~user",
                             hint="write ~/… or an absolute path")
    return full


def _strings(value, path, line, what):
    if isinstance(value, str):
        value = [value]
    _expect(value, list, path, line, what)
    return [_expect(v, str, path, line_of(value, i), what) for i, v in enumerate(value)]


def _unknown_fields(doc, path: str) -> None:
    """Every unknown key of the config in one error: at the first one in file order, naming the rest."""
    found = []

    def scan(mapping, allowed, what):
        if isinstance(mapping, dict):
            found.extend((line_of(mapping, k) or 0, str(k), what, allowed) for k in mapping if k not in allowed)

    scan(doc, TOP_KEYS, "the config")
    for key, allowed, what in (("sources", SOURCE_KEYS, "a source"), ("remotes", REMOTE_TYPES, "a remote")):
        for item in doc.get(key) if isinstance(doc.get(key), list) else []:
            scan(item, allowed, what)
    scan(doc.get("embedding"), EMBEDDING_TYPES, "embedding")
    if found:
        found.sort(key=lambda f: f[0])
        line, key, what, allowed = found[0]
        also = ", ".join(f"'{k}'{'' if w == what else ' in ' + w} at line {n}" for n, k, w, _ in found[1:])
        from .errors import did_you_mean
        known = "known fields: " + ", ".join(sorted(allowed))
        raise InputError(path, line, f"unknown field '{key}' in {what}" + (f" (also {also})" if also else ""),
                         hint=did_you_mean(key, allowed, known).replace("?", f"? ({known})", 1))


def apply_doc(cfg: Config, doc, path: str) -> None:
    """Fill `cfg` from a parsed config document; unknown keys are refused before anything is read."""
    _expect(doc, dict, path, getattr(doc, "line", 1), "the config file")     # a scalar has no line
    _unknown_fields(doc, path)
    base = Path(path).parent
    if "home" in doc and not os.environ.get("RECALL_HOME"):
        cfg.home = _resolve(base, _field(doc, "home", str, path), path, line_of(doc, "home"))
    if "sources" in doc:
        cfg.sources = _sources(doc["sources"], path, line_of(doc, "sources"), base)
    for key in ("secrets", "inventory"):
        if doc.get(key) is not None:
            listed, line = doc[key], line_of(doc, key)
            files = [_resolve(base, s, path, line_of(listed, i) if isinstance(listed, list) else line)
                     for i, s in enumerate(_strings(listed, path, line, key))]
            if key == "inventory":
                _secrets_apart(cfg.secrets, files, doc, path)
            setattr(cfg, key, files)
    if "embedding" in doc:
        cfg.embedding = _embedding(doc["embedding"], path, line_of(doc, "embedding"))
    if "remotes" in doc:
        cfg.remotes = _remotes(doc["remotes"], path, line_of(doc, "remotes"), {s.name for s in cfg.sources}, base)
    if "max_file_bytes" in doc:
        cfg.max_file_bytes = _field(doc, "max_file_bytes", int, path, minimum=1)


def _secrets_apart(secrets: list, inventory: list, doc, path: str) -> None:
    """A file named under both `secrets:` and `inventory:` (in any spelling: ~, relative, a link) is refused
    before anything reads it: each entry would be read as a secret and as an access entry."""
    real = [os.path.realpath(p) for p in secrets]
    for i, p in enumerate(inventory):
        if os.path.realpath(p) in real:
            line = line_of(doc.get("secrets"), real.index(os.path.realpath(p)), line_of(doc, "secrets"))
            raise InputError(path, line_of(doc["inventory"], i, line_of(doc, "inventory")),
                             f"'inventory' names {p}, which 'secrets' names too" + (f" (line {line})" if line else ""),
                             hint="keep the credentials and the inventory entries in two files, each named once")


def _sources(value, path, line, base):
    _expect(value, list, path, line, "sources")
    out, seen = [], set()
    for i, item in enumerate(value):
        iline = line_of(value, i)
        _expect(item, dict, path, iline, "sources[]")
        if "path" not in item:
            raise InputError(path, iline, "a source needs a 'path'")
        src_path = _resolve(base, _field(item, "path", str, path), path, line_of(item, "path"))
        name = item.get("name") or src_path.name
        _expect(name, str, path, line_of(item, "name"), "name")
        if name in seen:
            raise InputError(path, line_of(item, "name", item.line), f"duplicate source name '{name}'")
        seen.add(name)
        src = Source(name=name, path=src_path, line=iline)
        for key in ("include", "exclude"):
            if key in item:
                patterns = _strings(item[key], path, line_of(item, key), key)
                odd = next((i for i, p in enumerate(patterns) if any(c in p for c in "[]{}")), None)
                if odd is not None:     # taken as written, '*.[mM]d' matched nothing, and nothing said so
                    raise InputError(path, line_of(item[key], odd) if isinstance(item[key], list) else line_of(item, key),
                                     f"{key} pattern '{patterns[odd]}' holds [ ] or {{ }}, which recall's patterns "
                                     "do not know", hint="use *, ** and ? (e.g. '*.md', 'docs/**', 'drafts/'), "
                                     "one pattern per kind of file")
                setattr(src, key, patterns)
        out.append(src)
    return out


def _embedding(value, path, line):
    _expect(value, dict, path, line, "embedding")
    emb = Embedding()
    for key, kind in EMBEDDING_TYPES.items():
        if key in value:
            setattr(emb, key, _field(value, key, kind, path, f"embedding.{key}"))
    if emb.provider not in ("voyage", "local", "none"):
        raise InputError(path, line_of(value, "provider"),
                         f"unknown embedding provider '{emb.provider}'", hint="use voyage, local or none")
    for key, minimum in (("token_cap", 0), ("batch_size", 1), ("dimension", 0)):
        if key in value:
            _field(value, key, int, path, f"embedding.{key}", minimum)
    return emb


def _remotes(value, path, line, sources: set, base: Path):
    """The remotes, each named by one word no source has (its hits and `recall read` say NAME:path); an
    ssh_config relative to the config file (path and config are the remote's own)."""
    import re
    _expect(value, list, path, line, "remotes")
    out = []
    for i, item in enumerate(value):
        iline = line_of(value, i)
        _expect(item, dict, path, iline, "remotes[]")
        for req in ("name", "host"):
            if req not in item:
                raise InputError(path, iline, f"a remote needs a '{req}'")
        rem = Remote()
        for key, kind in REMOTE_TYPES.items():
            if key in item:
                setattr(rem, key, _field(item, key, kind, path, minimum=0.1 if key == "timeout" else None))
        rem.ssh_config, rem.timeout = rem.ssh_config and str(_resolve(base, rem.ssh_config, path, line_of(item, "ssh_config"))), float(rem.timeout)
        if any(r.name == rem.name for r in out):
            raise InputError(path, line_of(item, "name"), f"duplicate remote name '{rem.name}'")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", rem.name):
            raise InputError(path, line_of(item, "name"), f"remote name {rem.name!r} is not one word",
                             hint="use letters, digits, '.', '-' and '_': its notes are read as NAME:path")
        if rem.name in sources:
            raise InputError(path, line_of(item, "name"), f"remote name '{rem.name}' is also a source's name",
                             hint="rename one: NAME:path must say which it reads")
        out.append(rem)
    return out


# -- how a line recall hands out calls recall again, so it runs where it is handed out: in a plain shell
# with none of this process's environment (a bare PATH, another folder)


def launcher() -> list:
    """The argv start that reaches this very recall from any shell: this checkout's launcher when it started
    this process; else this interpreter's console script; else `python -m recall` if a fresh one imports us."""
    python = os.path.abspath(sys.executable or "python3")
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkout = os.path.join(top, "recall.py")
    started_by = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.isfile(checkout) and os.path.realpath(started_by) == os.path.realpath(checkout):
        return [python, checkout]
    if script := console_script(started_by):
        return [script]
    return [python, checkout] if os.path.isfile(checkout) and not _importable(top) else [python, "-m", "recall"]


def console_script(started_by: str = "") -> str | None:
    """The `recall` script installed for this interpreter (its shebang names this environment's
    Python), by absolute path; None when there is none."""
    import sysconfig
    here = os.path.dirname(os.path.abspath(sys.executable or ""))
    name = "recall.exe" if os.name == "nt" else "recall"
    candidates = [started_by] if os.path.basename(started_by) == name else []
    candidates += [os.path.join(sysconfig.get_path("scripts") or here, name), os.path.join(here, name)]
    for path in candidates:
        interpreter = _shebang(path)
        if interpreter and os.path.dirname(os.path.abspath(interpreter)) == here and os.access(path, os.X_OK):
            return os.path.abspath(path)
    return None


def _shebang(path: str) -> str | None:
    """The interpreter a console script runs: `#!/venv/bin/python`, or pip's `#!/bin/sh` form for a
    long or spaced path (`'''exec' "/venv/bin/python" "$0" "$@"`)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    import shlex  # not on a search's path (every verb loads this module)
    if head[0].strip() == "#!/bin/sh" and len(head) > 1 and head[1].startswith("'''exec'"):
        words = shlex.split(head[1][len("'''exec'"):])
    else:
        words = head[0][2:].split()
    return words[0] if words else None


def _importable(top: str) -> bool:
    """Whether a fresh interpreter (no PYTHONPATH of ours, another folder) imports recall from `top`."""
    import site
    import sysconfig
    places = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        places.add(site.getusersitepackages())
    real = os.path.realpath(top)
    return any(p and os.path.realpath(p) == real for p in places)


def invocation(cfg=None) -> str:
    """The start of a line that reaches this recall, its vault and config from a shell holding none of this
    process's environment: the variables of `location_env`, the launcher, --config FILE unless the default
    (~/.config/recall/config.yaml)."""
    import shlex
    words = [shlex.quote(w) for w in launcher()]
    if cfg is None:
        return " ".join(words)
    if cfg.path is not None and Path(cfg.path) != (Path.home() / ".config/recall/config.yaml").resolve():
        words += ["--config", shlex.quote(str(cfg.path))]
    return " ".join([f"{k}={shlex.quote(v)}" for k, v in location_env().items()] + words)


# a recall command recall tells its reader to run: quoted ('…', `…`), a hint that is one ('— recall …'), an example
_TOLD = (r"(?:(?<=['`])|(?<=— )|(?<=e\.g\. ))recall (?=(?:init|index|search|read|eval|secret|access|verify|remote|mcp|"
         r"instructions|doctor)\b)")


def told_as(config: str | None, *, moved: bool = False) -> str:
    """How a recall command handed out under this run's --config FILE starts: `recall --config FILE`;
    `moved`: after the variables of `location_env` (a shell that is not this process's has none)."""
    moved_to = location_env() if moved else {}
    if not config and not moved_to:
        return "recall"
    import shlex
    words = [f"{k}={shlex.quote(v)}" for k, v in moved_to.items()] + ["recall"]
    if config:
        words += ["--config", shlex.quote(str(Path(config).expanduser().resolve()))]
    return " ".join(words)


def with_config(said, config: str | None, *, moved: bool = False):
    """`said` (a text, or a list or dict of them) with every recall command it tells its reader to run
    started as `told_as` says: the shell the line is pasted into has no --config of this run (nor,
    `moved`, its environment). Prose that names recall ('recall reads …', 'recall: ') stays."""
    named = told_as(config, moved=moved) + " "
    if named == "recall " or not isinstance(said, (str, list, dict)):
        return said
    if isinstance(said, dict):
        return {k: with_config(v, config, moved=moved) for k, v in said.items()}
    if isinstance(said, list):
        return [with_config(v, config, moved=moved) for v in said]
    import re
    return re.sub(_TOLD, lambda _: named, said)


def location_env() -> dict:
    """The variables of this environment that a process started without it needs to find the same state
    folder and vault key (the config file is named apart), as absolute paths: RECALL_HOME, else XDG_DATA_HOME
    and XDG_CONFIG_HOME where they are not the defaults (the default config's state is the default folder);
    RECALL_KEY_FILE."""
    home = Path.home()
    moved = {name: str(Path(os.environ[name]).expanduser().resolve()) for name in
             ("RECALL_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "RECALL_KEY_FILE") if os.environ.get(name)}
    defaults = {"XDG_DATA_HOME": home / ".local/share", "XDG_CONFIG_HOME": home / ".config"}
    return {name: value for name, value in moved.items() if not (name in defaults and (
        "RECALL_HOME" in moved or value == str(defaults[name].resolve())))}
