"""Find and load the config (RECALL_CONFIG, RECALL_HOME, XDG) and fill in defaults."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError, RecallError

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
    lines: dict = field(default_factory=dict)      # top-level key -> line, for later errors

    @property
    def db_path(self) -> Path:
        return self.home / "recall.db"

    def require_sources(self) -> None:
        if self.path is None:
            raise RecallError(f"no config file (looked for {default_config_path()})",
                              f"create it with {EXAMPLE!r}, or set RECALL_CONFIG; "
                              "'recall doctor' shows what it found")
        if not self.sources:
            raise RecallError(f"{self.path}: no sources configured", f"add {EXAMPLE!r}")


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else Path.home() / fallback


def default_config_path() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "recall" / "config.yaml"


def home_dir() -> Path:
    value = os.environ.get("RECALL_HOME")
    return Path(value).expanduser() if value else _xdg("XDG_DATA_HOME", ".local/share") / "recall"


def find_config(explicit: str | None = None) -> Path | None:
    """The config file to use: --config, then RECALL_CONFIG, then the XDG default if it exists."""
    for candidate, named in ((explicit, "--config"), (os.environ.get("RECALL_CONFIG"), "RECALL_CONFIG")):
        if candidate:
            path = Path(candidate).expanduser()
            if path.is_dir():
                raise RecallError(f"config file {path} (from {named}) is a folder, not a file",
                                  f"name the file in it, e.g. {path / 'config.yaml'}")
            if not path.is_file():
                raise RecallError(f"config file {path} (from {named}) does not exist",
                                  f"create it with {EXAMPLE!r}")
            return path.resolve()
    default = default_config_path()
    return default.resolve() if default.is_file() else None


def load_config(explicit: str | None = None) -> Config:
    path = find_config(explicit)
    cfg = Config(path=path, home=home_dir())
    if path is None:
        return cfg
    from . import yaml
    doc = yaml.load(str(path))
    if doc is None:
        return cfg
    apply_doc(cfg, doc, str(path))
    return cfg


# -- validation -------------------------------------------------------------------------------

def _expect(value, kind, path, line, what):
    names = {str: "a string", int: "a whole number", list: "a list", dict: "a mapping",
             bool: "true or false", float: "a number"}
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise InputError(path, line, f"'{what}' must be {names[kind]}, not {type(value).__name__}")
    return value


def _at_least(value, minimum, path, line, what):
    """A number below `minimum` (a negative size, a zero timeout) is refused at its line."""
    if not value >= minimum:          # NaN too
        raise InputError(path, line, f"'{what}' must be at least {minimum:g}, not {value:g}")
    return value


def _keys(mapping, allowed, path, what):
    from .yaml import check_keys
    check_keys(mapping, allowed, path, what)


def _resolve(base: Path, text: str) -> Path:
    p = Path(os.path.expanduser(str(text)))
    return p if p.is_absolute() else (base / p)


def _paths(value, path, line, what, base):
    from .yaml import line_of  # loaded already: only a parsed config has lines
    if isinstance(value, str):
        value = [value]
    _expect(value, list, path, line, what)
    return [_resolve(base, _expect(v, str, path, line_of(value, i), what))
            for i, v in enumerate(value)]


def _strings(value, path, line, what):
    from .yaml import line_of  # loaded already: only a parsed config has lines
    if isinstance(value, str):
        value = [value]
    _expect(value, list, path, line, what)
    return [_expect(v, str, path, line_of(value, i), what) for i, v in enumerate(value)]


TOP_KEYS = {"sources", "secrets", "inventory", "embedding", "remotes", "max_file_bytes", "home"}
SOURCE_KEYS = {"name", "path", "include", "exclude"}
EMBEDDING_TYPES = {"provider": str, "model": str, "dimension": int, "token_cap": int,
                   "api_key_secret": str, "batch_size": int, "rerank_model": str, "base_url": str}
REMOTE_KEYS = {"name", "host", "path", "config", "timeout", "ssh_config"}


def _unknown_fields(doc, path: str) -> None:
    """Every unknown key of the config in one error: at the first one in file order, naming the rest."""
    from .yaml import line_of  # loaded already: only a parsed config has lines
    found = []

    def scan(mapping, allowed, what):
        if isinstance(mapping, dict):
            found.extend((line_of(mapping, k) or 0, str(k), what, allowed) for k in mapping if k not in allowed)

    scan(doc, TOP_KEYS, "the config")
    for key, allowed, what in (("sources", SOURCE_KEYS, "a source"), ("remotes", REMOTE_KEYS, "a remote")):
        for item in doc.get(key) if isinstance(doc.get(key), list) else []:
            scan(item, allowed, what)
    scan(doc.get("embedding"), EMBEDDING_TYPES, "embedding")
    if found:
        found.sort(key=lambda f: f[0])
        line, key, what, allowed = found[0]
        also = ", ".join(f"'{k}'{'' if w == what else ' in ' + w} at line {n}" for n, k, w, _ in found[1:])
        raise InputError(path, line, f"unknown field '{key}' in {what}" + (f" (also {also})" if also else ""),
                         hint="known fields: " + ", ".join(sorted(allowed)))


def apply_doc(cfg: Config, doc, path: str) -> None:
    from .yaml import line_of  # loaded already: only a parsed config has lines
    _expect(doc, dict, path, getattr(doc, "line", 1), "the config file")
    _unknown_fields(doc, path)
    base = Path(path).parent
    cfg.lines = {k: line_of(doc, k) for k in doc}
    if "home" in doc and not os.environ.get("RECALL_HOME"):
        cfg.home = _resolve(base, _expect(doc["home"], str, path, line_of(doc, "home"), "home"))
    if "sources" in doc:
        cfg.sources = _sources(doc["sources"], path, line_of(doc, "sources"), base)
    for key in ("secrets", "inventory"):
        if key in doc and doc[key] is not None:
            setattr(cfg, key, _paths(doc[key], path, line_of(doc, key), key, base))
    if "embedding" in doc:
        cfg.embedding = _embedding(doc["embedding"], path, line_of(doc, "embedding"))
    if "remotes" in doc:
        cfg.remotes = _remotes(doc["remotes"], path, line_of(doc, "remotes"))
    if "max_file_bytes" in doc:
        line = line_of(doc, "max_file_bytes")
        cfg.max_file_bytes = _at_least(_expect(doc["max_file_bytes"], int, path, line, "max_file_bytes"),
                                       1, path, line, "max_file_bytes")


def _sources(value, path, line, base):
    from .yaml import line_of  # loaded already: only a parsed config has lines
    _expect(value, list, path, line, "sources")
    out, seen = [], set()
    for i, item in enumerate(value):
        iline = line_of(value, i)
        _expect(item, dict, path, iline, "sources[]")
        _keys(item, SOURCE_KEYS, path, "a source")
        if "path" not in item:
            raise InputError(path, iline, "a source needs a 'path'")
        src_path = _resolve(base, _expect(item["path"], str, path, line_of(item, "path"), "path"))
        name = item.get("name") or src_path.name
        _expect(name, str, path, line_of(item, "name"), "name")
        if name in seen:
            raise InputError(path, line_of(item, "name", getattr(item, "line", None)), f"duplicate source name '{name}'")
        seen.add(name)
        src = Source(name=name, path=src_path, line=iline)
        if "include" in item:
            src.include = _strings(item["include"], path, line_of(item, "include"), "include")
        if "exclude" in item:
            src.exclude = _strings(item["exclude"], path, line_of(item, "exclude"), "exclude")
        out.append(src)
    return out


def _embedding(value, path, line):
    from .yaml import line_of  # loaded already: only a parsed config has lines
    _expect(value, dict, path, line, "embedding")
    emb = Embedding()
    types = EMBEDDING_TYPES
    _keys(value, set(types), path, "embedding")
    for key, kind in types.items():
        if key in value:
            setattr(emb, key, _expect(value[key], kind, path, line_of(value, key), f"embedding.{key}"))
    if emb.provider not in ("voyage", "local", "none"):
        raise InputError(path, line_of(value, "provider"),
                         f"unknown embedding provider '{emb.provider}'", hint="use voyage, local or none")
    for key, minimum in (("token_cap", 0), ("batch_size", 1), ("dimension", 0)):
        if key in value:
            _at_least(getattr(emb, key), minimum, path, line_of(value, key), f"embedding.{key}")
    return emb


def _remotes(value, path, line):
    from .yaml import line_of  # loaded already: only a parsed config has lines
    _expect(value, list, path, line, "remotes")
    out = []
    for i, item in enumerate(value):
        iline = line_of(value, i)
        _expect(item, dict, path, iline, "remotes[]")
        _keys(item, REMOTE_KEYS, path, "a remote")
        for req in ("name", "host"):
            if req not in item:
                raise InputError(path, iline, f"a remote needs a '{req}'")
        rem = Remote(name=_expect(item["name"], str, path, line_of(item, "name"), "name"),
                     host=_expect(item["host"], str, path, line_of(item, "host"), "host"))
        if "path" in item:
            rem.path = _expect(item["path"], str, path, line_of(item, "path"), "path")
        if "config" in item:
            rem.config = _expect(item["config"], str, path, line_of(item, "config"), "config")
        if "ssh_config" in item:
            rem.ssh_config = os.path.expanduser(
                _expect(item["ssh_config"], str, path, line_of(item, "ssh_config"), "ssh_config"))
        if "timeout" in item:
            rem.timeout = float(_at_least(_expect(item["timeout"], float, path, line_of(item, "timeout"), "timeout"),
                                          0.1, path, line_of(item, "timeout"), "timeout"))
        if any(r.name == rem.name for r in out):
            raise InputError(path, line_of(item, "name"), f"duplicate remote name '{rem.name}'")
        out.append(rem)
    return out
