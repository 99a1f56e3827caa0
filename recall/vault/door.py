"""The one door out: every byte recall emits (CLI text and JSON, errors, MCP answers, a child's
output, display text stored in the DB) passes `scrub`, which knows every vault value (the masker's
forms), every credential literal read from the user's files, and the one secret-name rule."""
from __future__ import annotations

import _thread  # not threading: a search loads no more than it needs
import contextlib
import functools
import os
import re

from ..errors import RecallError

# Variable names that hold a secret: whole words between underscores, so PATH, PWD, AUTHOR stay clear.
_SECRET_WORDS = {"TOKEN", "TOKENS", "PASSWORD", "PASSWORDS", "PASSWD", "PASS", "PAT", "APIKEY", "AUTH",
                 "CREDENTIAL", "CREDENTIALS"}
_SECRET_PAIRS = {("API", "KEY"), ("API", "KEYS"), ("ACCESS", "KEY"), ("ACCESS", "KEYS"),
                 ("PRIVATE", "KEY"), ("PRIVATE", "KEYS")}
_SECRET_NAMES = {"SSHPASS", "MYSQL_PWD"}     # well-known names the word rule cannot see
_NOT_SECRET = {"PWD", "OLDPWD"}              # the shell's folders: PWD is a secret word only beside others
_ASSIGNMENT = re.compile(r"""(?<![\w$])([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|'[^']*'|\$\([^)]*\)|[^\s;&|]+)""")


def sensitive_name(name: str) -> bool:
    """Does a variable name look like it holds a secret (`GITHUB_TOKEN`, `API_KEY`, `X_SECRET_V2` …)?"""
    upper = name.upper()
    if "SECRET" in upper or upper in _SECRET_NAMES:
        return True
    words = [w for w in upper.split("_") if w]
    if upper not in _NOT_SECRET and "PWD" in words:         # DB_PWD, PG_PWD
        return True
    return (any(w in _SECRET_WORDS or w.endswith(("TOKEN", "PASSWORD", "APIKEY")) for w in words)
            or any(pair in _SECRET_PAIRS for pair in zip(words, words[1:])))


def _reference(value: str) -> bool:
    """`$VAR`, `"$VAR"`, `$(cmd)`, what the door already put there (`[recall:ID]`, `[hidden]`), or quotes
    alone (`grep '^TOKEN='`, `TOKEN=''`): not a literal."""
    return (value[0] != "'" and value.strip('"').startswith("$")) or value.startswith(("[recall:", "[hidden]")) \
        or not value.strip("'\"")


def hide_values(step: str) -> str:
    """A step as shown to people and agents: `export GITHUB_TOKEN=[hidden]`; `$VAR` / `$(cmd)` stay."""
    def hide(m):
        name, value = m.group(1), m.group(2)
        return f"{name}=[hidden]" if sensitive_name(name) and not _reference(value) else m.group(0)
    return _ASSIGNMENT.sub(hide, step)


# Names whose values are not secrets (secret_setting)
CLEAR_NAMES = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
               "EDITOR", "PAGER", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
               "AWS_PAGER", "AWS_SDK_LOAD_CONFIG", "KUBECONFIG", "CLOUDSDK_CORE_PROJECT",
               "GOOGLE_CLOUD_PROJECT", "AZURE_DEFAULTS_GROUP", "AZURE_DEFAULTS_LOCATION", "REGION"}
CLEAR_SUFFIXES = ("_CONTEXT", "_REGION", "_ZONE", "_NAMESPACE", "_PROFILE")
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")
_DQ_ESCAPE = re.compile(r'\\([\\"$`])')


def secret_setting(name: str, value: str) -> bool:
    """Is what a setup step sets in `name` a secret (the one rule access exec masks by and every display path
    shows by)? Harmless names, paths and numbers are not; a value too short to mask only if its name says so."""
    from .mask import MIN_SECRET_LEN
    if name in CLEAR_NAMES or name.endswith(CLEAR_SUFFIXES) or name.startswith("LC_"):
        return False
    if _NUMBER.fullmatch(value) or _is_path(value):
        return False
    return len(value) >= MIN_SECRET_LEN or sensitive_name(name)


def _is_path(value: str) -> bool:
    """'/opt/x', '~/.kube/ops', '/a:/b' — each part under a top folder that exists here (so a base64
    token that happens to start with '/' is not taken for a path)."""
    for part in value.split(":"):
        if not re.fullmatch(r"~?/[\w.@+/-]*", part) or "//" in part:
            return False
        if not part.startswith("~") and not os.path.isdir("/" + part[1:].split("/", 1)[0]):
            return False
    return True


def show_step(entry_id: str, step: str) -> str:
    """A step as every display path prints it: each literal access exec would mask becomes
    `NAME=[recall:ENTRY:NAME]`, the label exec's output carries; references and harmless values stay."""
    def hide(m):
        name, value = m.group(1), m.group(2)
        if _reference(value):
            return m.group(0)
        if m.start() and step[m.start() - 1] == "-":          # an option (--token=…), not a variable
            return f"{name}=[hidden]" if sensitive_name(name) else m.group(0)
        literal = value[1:-1] if value[0] == "'" else _DQ_ESCAPE.sub(r"\1", value[1:-1]) if value[0] == '"' else value
        return f"{name}=[recall:{entry_id}:{name}]" if secret_setting(name, literal) else m.group(0)
    return _ASSIGNMENT.sub(hide, step)


@functools.lru_cache(maxsize=None)
def _inline_patterns() -> list:
    """Credentials written inline, each pattern's group 2 the literal: URL userinfo, auth headers,
    password/token options, curl's -u USER:PASSWORD."""
    value = r"""(?!['"]?\$|\[recall:|\[hidden\])('[^']*'|"[^"]*"|[^\s;&|'"]+)"""
    return [
        re.compile(r"(://[^/\s:@]+:)(?!\[recall:|\[hidden\])([^/\s@]+)(?=@)"),
        re.compile(r"(?i)((?:authorization|proxy-authorization):\s*(?:bearer|basic|token)\s+)(?!\$|\[recall:|\[hidden\])([^\s'\"]+)"),
        re.compile(r"(?i)((?:x-api-key|private-token|x-auth-token):\s*)(?!\$|\[recall:|\[hidden\])([^\s'\"]+)"),
        re.compile(rf"(?i)(--(?:password|passwd|token|api-key|secret)[= ]){value}"),
        re.compile(r"""(?<![\w-])((?:-u|--user)[= ]?\s*['"]?[^\s:'"$]+:)(?!\$|\[recall:|\[hidden\])([^\s'"@]+)"""),
    ]


def credentials(text: str) -> list:
    """(variable name or None, literal) of each credential written inline in a command line or URL
    (quotes off): what `scrub_inline` hides, for the door to learn."""
    found = [(m.group(1), m.group(2)) for m in _ASSIGNMENT.finditer(text or "")
             if sensitive_name(m.group(1)) and not _reference(m.group(2))]
    found += [(None, m.group(2)) for pattern in _inline_patterns() for m in pattern.finditer(text or "")]
    return [(name, v.strip("'\"")) for name, v in found if v.strip("'\"")]


def scrub_inline(text: str) -> str:
    """A command line as it may be shown or stored: a literal token written inline — `X_TOKEN=abc`
    (any name `sensitive_name` says holds a secret), `https://u:pw@host`, `Bearer abc`, `--password abc`,
    `-u user:pw` — becomes [hidden]; `$VAR` stays."""
    if not text:
        return text
    text = hide_values(text)
    for pattern in _inline_patterns():
        text = pattern.sub(lambda m: m.group(1) + "[hidden]", text)
    return text


def holds_inline(entries: list) -> bool:
    """Inventory entries with a step, proof, check, URL or error (it quotes a denied check) holding a
    literal secret (`export X_TOKEN=abc`, `-u user:pw`, a bearer token, `https://u:pw@…`: what access
    exec masks, `credentials`): such entries are never cached in the DB, so no value is kept there."""
    return any(text and (show_step(e.id, text) != text or hide_values(text) != text
                         or re.search(r"://[^/\s:@]+:[^/\s@]+@", text) or credentials(text))
               for e in entries for text in [*e.access, e.verify, e.check, e.url, e.error])


def inline_credentials(entries: list) -> list:
    """(entry, field, label, literal) of every credential written inline in an inventory entry: in a
    step (its variable's name), `verify`, `check` or a URL's password."""
    found = []
    for e in entries:
        for key, texts in (("access", e.access), ("verify", [e.verify]), ("check", [e.check]), ("url", [e.url])):
            for text in texts:
                found += [(e, key, f"{e.id}:{name or key}", literal) for name, literal in credentials(text)]
    return found


def inline_warnings(entries: list) -> list:
    """One line per entry field holding a credential written inline: where, and the fix."""
    return list(dict.fromkeys(f"{e.file}:{e.line}: entry '{e.id}' has a credential written inline in '{field}' "
                              "(shown as [recall:…]): move it into the secrets file and link it with secrets: [ID]"
                              for e, field, _label, _literal in inline_credentials(entries)))


# -- the door: what it knows, and scrub ---------------------------------------------------------

_LOCK = _thread.allocate_lock()
_LITERALS: dict = {}          # credential literal read from a user file -> its label id (ENTRY:FIELD)
_CACHE: dict = {}             # (vault signature, literals) -> the Masker of both
_BOUND = _thread._local()     # this call's (cfg, con, strict), per thread: where the values come from


def learn(label: str, literal: str) -> None:
    """A credential literal recall read from a user's file (an inventory step, verify, check, a URL's
    password): shown as [recall:LABEL] wherever it would appear, for the rest of this process."""
    from .mask import MIN_SECRET_LEN
    if len(literal) >= MIN_SECRET_LEN:
        with _LOCK:
            _LITERALS.setdefault(literal, label)


@contextlib.contextmanager
def bound(cfg, con, *, strict: bool = True):
    """This call's vault (config and DB), from which `scrub` takes every value. `strict`: a vault that
    holds values but cannot be opened here fails the output (VaultClosed), rather than let it pass."""
    before = getattr(_BOUND, "at", None)
    _BOUND.at = (cfg, con, strict)
    try:
        yield
    finally:
        _BOUND.at = before


def _masker():
    """The Masker of every vault value (of the bound vault) and every learned literal; None: nothing to
    mask. Unbound (a face's last step), the one this process built last: the same vault's values."""
    from .redact import VaultClosed, closed
    cfg, con, strict = getattr(_BOUND, "at", None) or (None, None, False)
    if con is None:
        with _LOCK:
            last = next(iter(_CACHE.values()), None)
            fresh = last is not None and last.literals == len(_LITERALS)
        if fresh:
            return last
    values, sig = {}, ()
    if con is not None:
        from . import pending, store
        from .redact import VaultValues
        count, synced_at = store.signature(con)
        faults = []
        try:
            unsynced, plain = pending.values(con, cfg)   # written into a secrets file since the last sync
        except (OSError, RecallError) as exc:
            faults.append(exc)
            unsynced, plain = ("unread",), VaultValues()
            plain.public = {}
        sig, values = (str(cfg.db_path), unsynced), plain
        if count:
            try:
                from .keyfile import key_path
                store.require_open(con, cfg)             # a key gone or unreadable, said as such
                sig += (count, synced_at, key_path(cfg.home).stat().st_mtime_ns)
                with _LOCK:
                    values = next((m.values for (s, _), m in _CACHE.items() if s == sig), None)
                values = values or pending.with_unsynced(store.load_values(con, cfg), plain)
            except (OSError, RecallError) as exc:
                faults.append(exc)
        if faults and strict:
            exc = faults[0]
            raise exc if isinstance(exc, VaultClosed) else \
                closed(exc if isinstance(exc, RecallError) else RecallError(str(exc))) from None
        # not strict (doctor, show): what could be opened is still masked; a file that does not parse
        # costs its own unsynced values, never the stored ones
    with _LOCK:
        literals = dict(_LITERALS)
    if not values and not literals:
        return None
    key = (sig, tuple(sorted(literals.items())))
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    from .mask import Masker
    from .redact import secret_parts
    parts = secret_parts(values, values.public) if values else {}
    for literal, label in literals.items():
        parts.setdefault(label, []).append(literal)
    masker = Masker(parts)
    masker.values, masker.literals = values, len(literals)
    with _LOCK:
        _CACHE.clear()              # one vault at a time: the old masker's values leave memory
        _CACHE[key] = masker
    return masker


def masker(extra: dict | None = None):
    """The Masker a child's output streams through: the door's (vault values, literals) and `extra`
    ({label: [values]}: what this child was given or its setup set)."""
    from .mask import Masker
    base = _masker()
    if not extra:
        return base or Masker({})
    from .redact import secret_parts
    parts = secret_parts(base.values, base.values.public) if base is not None and base.values else {}
    if base is not None and all(v in parts.get(label, ()) for label, values in extra.items() for v in values):
        return base                 # `secret exec ID`: the child's values are the vault's, masked already
    with _LOCK:
        for literal, label in _LITERALS.items():
            parts.setdefault(label, []).append(literal)
    for label, values in extra.items():
        parts.setdefault(label, []).extend(values)
    return Masker(parts)


def scrub(text: str) -> str:
    """`text` as it may leave recall: every vault value and learned literal as [recall:ID], every
    credential written inline as [hidden]."""
    return scrub_many([text])[0] if text else text


def scrub_many(texts: list) -> list:
    """Each of `texts` scrubbed (see `scrub`): the strings of one answer, masked at one look at the
    vault's forms."""
    m = _masker() if any(texts) else None
    if m is not None:
        datas = [t.encode("utf-8", "surrogatepass") for t in texts]
        texts = [t if out == data else out.decode("utf-8", "replace")
                 for t, data, out in zip(texts, datas, m.mask_many(datas))]
    return [scrub_inline(t) for t in texts]


def scrub_data(obj):
    """`obj` (JSON-like: dicts, lists, strings) with every string scrubbed, all at once; a hit whose
    snippet changed loses its highlight offsets (they pointed into the old text)."""
    strings: list = []
    _strings(obj, strings)
    return _rebuilt(obj, iter(scrub_many(strings)))


def _strings(obj, found: list) -> None:
    if isinstance(obj, str):
        found.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _strings(v, found)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _strings(v, found)


def _rebuilt(obj, clean):
    """`obj` with its strings taken in turn from `clean` (the order `_strings` found them in)."""
    if isinstance(obj, str):
        return next(clean)
    if isinstance(obj, dict):
        out = {k: _rebuilt(v, clean) for k, v in obj.items()}
        if "highlights" in out and isinstance(obj.get("snippet"), str) and out["snippet"] != obj["snippet"]:
            out["highlights"] = []
        return out
    if isinstance(obj, (list, tuple)):
        return [_rebuilt(v, clean) for v in obj]
    return obj


def forget() -> None:
    """Drop what the door learned and built, the vault's forms and the unsynced values read (the tests'
    fresh process)."""
    from . import mask, pending
    with _LOCK:
        _LITERALS.clear()
        _CACHE.clear()
        mask._BUILT.clear()
        pending._LAST.clear()
