"""Secrets YAML files → validated entries (values still plaintext, in memory only)."""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

from .. import yaml
from ..errors import InputError, RecallError
from ..guard.envnames import run_changing
from ..yaml import check_keys, line_of
from .pending import file_stamp, placeholder

META_FIELDS = ("service", "environment", "kind", "username", "url", "notes", "use")
OUR_FIELDS = ("env", "inject", "check", "value", "fields")
PROXY_FIELDS = ("paths", "ca", "in_query")    # only with inject: proxy (host-bound)
ALLOWED = {"id", "tags", *META_FIELDS, *OUR_FIELDS, *PROXY_FIELDS}
MAX_VALUE_BYTES = 16 * 1024   # a longer value is refused: every child's masker builds its forms
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_FIELD_NAME = re.compile(r"^[a-z_]{1,32}$")   # no digits, no capitals: not how a token looks
# a quoted text as repr() writes it: a quote of the other kind inside, a backslash escape
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
# Words our own messages put in quotes ('key: value', '- id: …'); any other quoted text in an
# error about a secrets file may be a value written on the wrong line, and is not shown.
_OWN_WORDS = {"key", "value", "id", "fields", "secrets", "yaml", "tag", "name", "recall", "secret", "sync",
              "prune"} | set(ALLOWED)


@dataclass
class SecretEntry:
    id: str
    meta: dict                 # service, environment, kind, username, url, notes, use (strings)
    tags: list
    env: str                   # variable name for a single value, or the prefix for fields
    inject: str                # env | stdin
    check: str
    values: dict               # {"": value} or {field: value}
    file: str
    line: int
    variables: dict = field(default_factory=dict)   # variable name -> key in values
    spans: dict = field(default_factory=dict)       # key in values -> yaml.Span of its text in the file
    stamp: tuple = ()                               # the file's (inode, size, mtime) as it was read


_SAFE_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def check_variable_name(name: str, path: str, line, what: str) -> None:
    """Refuse (file:line) a variable name that is not [A-Z_][A-Z0-9_]* or that changes how programs run."""
    if not _SAFE_VAR.match(name):
        raise InputError(path, line, f"{what}: '{name}' is not a variable name of [A-Z_][A-Z0-9_]*",
                         hint="use upper-case letters, digits and '_', not starting with a digit")
    if run_changing(name):
        raise InputError(path, line, f"{what}: '{name}' changes how programs run, so a secret may not set it",
                         hint=f"name it for what it holds, e.g. env: MY_{name.strip('_')}")


def default_var(secret_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", secret_id).upper()


def load_secret_files(paths: list) -> tuple:
    """(entries, warnings); every problem in any file raises before anything is returned."""
    import shlex

    from .keyfile import hold_privately
    hold_privately()                    # the files may hold plain values, read into memory now
    entries, warnings, seen = [], [], {}
    for path in paths:
        path = str(path)
        if os.path.isfile(path):        # a folder or a FIFO: yaml.load says so
            st = os.stat(path)
            mode = stat.S_IMODE(st.st_mode)
            if mode & 0o077:        # refused, as ssh refuses a loose key
                raise RecallError(f"{path} is readable by group or others ({oct(mode)})",
                                  f"chmod 600 {shlex.quote(path)}")
            if st.st_nlink > 1:     # sealing renames a new file in: the other name keeps the plain text
                raise RecallError(f"{path} has {st.st_nlink} hard links (st_nlink > 1): sealing it in place "
                                  "would leave its plain values under the other name; nothing was written",
                                  f"find it (find / -xdev -samefile {shlex.quote(path)}), remove it or make it a copy, "
                                  "then run this again")
        ids = set(seen)             # ids are names, shown everywhere; an error may quote them
        stamp, first = file_stamp(path), len(entries)
        try:
            for item, line in yaml.load_entries(path, "secrets"):
                if isinstance(item, dict):                        # a key that reads like a field name
                    ids |= {k for k in item if isinstance(k, str) and _FIELD_NAME.match(k)}
                if isinstance(item, dict) and isinstance(item.get("id"), str) and _ID.match(item["id"]):
                    ids.add(item["id"])
                    if isinstance(item.get("fields"), dict):      # field names are names too
                        ids |= {str(k) for k in item["fields"]}
                    if isinstance(item.get("env"), str) and _SAFE_VAR.match(item["env"]):
                        ids.add(item["env"])                      # a variable name the entry chose
                entry = _entry(item, path, line)
                entry.stamp = stamp
                if entry.id in seen:
                    raise InputError(path, entry.line, f"duplicate secret id '{entry.id}'",
                                     hint=f"first defined at {seen[entry.id]}")
                seen[entry.id] = f"{path}:{entry.line}"
                entries.append(entry)
        except InputError as exc:
            raise without_text(exc, ids) from None
        warnings += _comments_after_values(path, stamp, entries[first:])
    _refuse_values_in_metadata(entries)
    return entries, warnings


def text_as_read(path: str, stamp: tuple) -> str | None:
    """The file's text again, when it is still as it was read (`stamp`); None when it changed since
    (the spans read then point into another text: a writer refuses on the same stamp)."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return text if file_stamp(path) == stamp else None


def _comments_after_values(path: str, stamp: tuple, entries: list) -> list:
    """A plain value followed by ' #…' on its line: YAML reads a comment there, so a password holding
    ' #' is cut short, and its rest stays in the file as plain text once the value is sealed. Said
    (never quoted) before the first sync; a quoted, block or sealed value is not asked about."""
    from .redact import public_fields
    plain = [(e, f, s) for e in entries for f, s in e.spans.items()
             if s and not s.flow and f not in public_fields(e.meta) and not e.values[f].startswith("ENC[")]
    text = text_as_read(path, stamp) if plain else None
    if text is None:
        return []
    rows = re.split(r"\r\n|\r|\n", text)
    return [f"{path}:{s.end_row + 1}: a comment follows the value of '{e.id + ('.' + f if f else '')}' on its line: "
            "YAML ends the value before ' #', and the comment stays as written when the value is sealed — if "
            "it is part of the value, quote the value ('…')"
            for e, f, s in plain if rows[s.row][s.col:s.col + 1] not in ("'", '"', "|", ">")
            and re.match(r"[ \t]+#", rows[s.end_row][s.end_col:])]


_SHOWN = ("service", "environment", "kind", "url", "notes", "use")    # metadata every face shows


def _refuse_values_in_metadata(entries: list) -> None:
    """A vault value (of any secret) or a credential written inline in a secret's shown metadata or its
    check: refused with file:line, the text never quoted — metadata is searchable, shown and logged."""
    from .door import credentials
    from .mask import MIN_SECRET_LEN
    from .redact import public_fields
    values = [(e.id, v) for e in entries for f, v in e.values.items()
              if f not in public_fields(e.meta) and len(v) >= MIN_SECRET_LEN]
    for e in entries:
        for key, text in [*((k, e.meta[k]) for k in _SHOWN), ("check", e.check), ("tags", " ".join(e.tags))]:
            holder = next((sid for sid, v in values if v in text), None)
            if holder is not None:
                what = "its own value" if holder == e.id else f"the value of secret '{holder}'"
                raise InputError(e.file, e.line, f"'{key}' of secret '{e.id}' holds {what}; nothing was synced",
                                 hint="name the variable ($VAR) there instead: a value belongs in value: only")
            if key != "tags" and credentials(text):
                raise InputError(e.file, e.line, f"'{key}' of secret '{e.id}' holds a credential written "
                                 "inline; nothing was synced", hint="put it in value: (or fields:) and name "
                                 "its variable ($VAR) in the command")


def _derived(name: str, ids) -> bool:
    """A variable name recall derives from an id of the file (JIRA_TOKEN, DB_ADMIN_PASSWORD): not a
    value, though upper-case text (a TOTP seed, an AWS key id) looks the same, and is not kept."""
    return any(name == default_var(i) or name.startswith(default_var(i) + "_") for i in ids if _ID.match(i))


def without_text(exc: InputError, ids=frozenset()) -> InputError:
    """The same error (file:line:col and what is wrong) with any quoted text of the file left out,
    but our own words and the ids of the file's secrets (`id` or `id.field`)."""
    def keep(m) -> str:
        inner = m.group()[1:-1]
        if inner in ids or inner.rpartition(".")[0] in ids or run_changing(inner) or _derived(inner, ids):
            return m.group()                 # an id, id.field, a variable it names or derives
        words = re.findall(r"[A-Za-z0-9]{2,}", m.group())
        return m.group() if all(w.lower() in _OWN_WORDS for w in words) else "(text not shown)"
    where = exc.path + "".join(f":{n}" for n in (exc.line, exc.col if exc.line is not None else None)
                               if n is not None)
    message = exc.message[len(where) + 2:] if exc.message.startswith(where + ": ") else exc.message
    return InputError(exc.path, exc.line, _QUOTED.sub(keep, message), col=exc.col,
                      hint=_QUOTED.sub(keep, exc.hint) if exc.hint else None)


def _str(item, key, path, line) -> str:
    value = item.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(path, line_of(item, key, line), f"'{key}' must be a string",
                         hint="quote it: YAML reads 0123 as a number and true as a boolean")
    return value


def _entry(item, path: str, line) -> SecretEntry:
    if not isinstance(item, dict):
        raise InputError(path, line, "each secret is a mapping starting with '- id: …'")
    line = item.line
    check_keys(item, ALLOWED, path, "a secret", line)
    sid = _str(item, "id", path, line)
    if not sid:
        raise InputError(path, line, "a secret needs an 'id'")
    if not _ID.match(sid):
        raise InputError(path, line_of(item, "id", line), "a secret id may hold only letters, digits, '-', '_', '.'")
    inject = _str(item, "inject", path, line) or "env"
    if inject not in ("env", "stdin", "proxy"):
        raise InputError(path, line_of(item, "inject", line), "inject must be env or stdin (or proxy, with an https url:)")
    env = _str(item, "env", path, line) or default_var(sid)
    if "fields" not in item:           # with fields, env is a prefix: the derived names are checked
        check_variable_name(env, path, line_of(item, "env", line),
                            "env" if "env" in item else f"secret '{sid}' (its variable, from the id)")
    tags = item.get("tags") or []
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InputError(path, line_of(item, "tags", line), "tags must be a list of strings")
    values, variables, public, spans = _values(item, sid, env, inject, path, line)
    meta = {k: _str(item, k, path, line) for k in META_FIELDS}
    if public:
        meta["public"] = sorted(public)          # injected, never masked nor redacted
    proxy = _proxy_settings(item, inject, sid, meta["url"], path, line)
    if proxy:
        meta["proxy"] = proxy                    # bound with the ciphertext like inject and url
    return SecretEntry(id=sid, meta=meta, tags=list(tags), env=env, inject=inject,
                       check=_str(item, "check", path, line), values=values, file=path, line=line,
                       variables=variables, spans=spans)


def _proxy_settings(item, inject: str, sid: str, url: str, path: str, line) -> dict:
    """{paths, ca, query} of a host-bound secret: an https url is required; the other keys only here."""
    if inject != "proxy":
        for key in PROXY_FIELDS:
            if key in item:
                raise InputError(path, line_of(item, key, line), f"'{key}' applies only to inject: proxy",
                                 hint="add 'inject: proxy' (with an https url:), or remove the line")
        return {}
    from urllib.parse import urlsplit
    where = line_of(item, "url", line_of(item, "inject", line))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if not url or parts is None or parts.scheme != "https" or not parts.hostname or parts.username:
        raise InputError(path, where, f"secret '{sid}' has inject: proxy, which needs url: https://HOST[:PORT]/",
                         hint="the value is attached only to requests for that scheme, host and port")
    paths = item.get("paths") or []
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("/") for p in paths):
        raise InputError(path, line_of(item, "paths", line), "paths must be a list of path prefixes starting with '/'")
    in_query = item.get("in_query", False)
    if in_query not in (True, False):
        raise InputError(path, line_of(item, "in_query", line), "in_query must be true or false")
    ca = _str(item, "ca", path, line)
    if ca:
        ca = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.expanduser(ca))
        if not os.path.isfile(ca) or not os.access(ca, os.R_OK):
            raise InputError(path, line_of(item, "ca", line), f"ca: no readable file {ca}",
                             hint="name a PEM file of the CA that signed the service's certificate")
    return {"host": parts.hostname.lower(), "port": port or 443, "paths": list(paths), "ca": ca,
            "query": bool(in_query)}


def _values(item, sid, env, inject, path, line):
    has_value, has_fields = "value" in item, "fields" in item
    if has_value == has_fields:
        raise InputError(path, line, f"secret '{sid}' needs exactly one of 'value' or 'fields'")
    if has_value:
        value = _str(item, "value", path, line)
        if not value:
            raise InputError(path, line_of(item, "value", line), f"secret '{sid}' has an empty value")
        _refuse_placeholder(value, sid, path, line_of(item, "value", line))
        check_value(value, sid, path, line_of(item, "value", line), on_stdin(inject, ""))
        return {"": value}, {env: ""}, [], {"": item.spans.get("value")}
    fields = item["fields"]
    if not isinstance(fields, dict) or not fields:
        raise InputError(path, line_of(item, "fields", line), "fields must be a mapping of name: value")
    values, variables, public, spans = {}, {}, [], {}
    for name, value in fields.items():
        spans[str(name)] = fields.spans.get(name)
        if isinstance(value, dict) and set(value) <= {"value", "public"} and "value" in value:
            if value.get("public") not in (True, False, None):
                raise InputError(path, line_of(value, "public", line), "public must be true or false")
            if value.get("public"):
                public.append(str(name))
            spans[str(name)] = value.spans.get("value")
            value = value["value"]
        if not isinstance(value, str) or not value:
            raise InputError(path, line_of(fields, name, line), f"field {str(name)!r} must be a non-empty string",
                             hint="quote it, or write {value: …, public: true}")
        _refuse_placeholder(value, f"{sid}.{name}", path, line_of(fields, name, line))
        check_value(value, f"{sid}.{name}", path, line_of(fields, name, line), on_stdin(inject, str(name)))
        values[str(name)] = value
        variable = f"{env}_{default_var(str(name))}"
        check_variable_name(variable, path, line_of(fields, name, line), f"field {str(name)!r} (variable {variable})")
        variables[variable] = str(name)
    return values, variables, public, spans


def on_stdin(inject: str, field: str) -> bool:
    """Whether a value goes to the child's stdin, not its environment (store.on_stdin: the single
    value, else the 'password' field)."""
    return inject == "stdin" and field in ("", "password")


def check_value(value: str, what: str, path, line, stdin: bool = False) -> None:
    """Refuse a value longer than recall masks efficiently (each exec builds the forms of every value),
    or holding a NUL byte when it goes into the environment. (A sealed value is checked once open.)"""
    if "\0" in value and not stdin:          # exec would die on it: no variable can hold one
        raise InputError(path, line, f"secret '{what}' holds a NUL byte, which no environment variable can "
                         "carry", hint="remove it (a '\\0' escape or a stray byte), "
                         "or give the value on stdin (inject: stdin)")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_VALUE_BYTES and not value.startswith("ENC["):
        raise InputError(path, line, f"secret '{what}' is {size:,} bytes; recall masks values of at most "
                         f"{MAX_VALUE_BYTES // 1024} KiB ({MAX_VALUE_BYTES:,} bytes), so it is not stored",
                         hint="split it into fields (one certificate each), or keep it in a file of its "
                         "own (chmod 600) and name that file in the secret's notes")


def _refuse_placeholder(value: str, what: str, path, line) -> None:
    """`<paste the token>` or `…` copied from an example is not a credential (never echoed back)."""
    if placeholder(value):
        raise InputError(path, line, f"secret '{what}' still has a placeholder value", hint="replace the placeholder "
                         + ("and its < > " if value.strip().strip("'\"").startswith("<") else "")   # a token pasted inside them
                         + "with the real value, then run 'recall secret sync' again")


def too_short(entries: list) -> list:
    """A line for each value of `entries` that exec will refuse as too short to mask (kept: a PIN read
    at a terminal with 'secret get' is a use)."""
    from .mask import MIN_SECRET_LEN
    from .redact import public_fields
    return [f"secret '{e.id}{'.' + name if name else ''}' is {len(value)} characters: exec refuses values "
            f"under {MIN_SECRET_LEN} (too short to mask); 'recall secret get' still reads it"
            for e in entries for name, value in e.values.items()
            if name not in public_fields(e.meta) and len(value) < MIN_SECRET_LEN]
