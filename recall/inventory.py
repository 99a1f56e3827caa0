"""Inventory YAML → entries; find / show; prerequisites (checked once per process); pins in search."""
from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import asdict, dataclass, field, fields

from .errors import InputError, PrerequisiteDown, RecallError, did_you_mean
from .vault.door import inline_warnings, show_step

DEFAULT_TCP_TIMEOUT = 3.0
DEFAULT_COMMAND_TIMEOUT = 20.0
_TCP = re.compile(r"^tcp\s+(\[[0-9a-fA-F:.]+\]|[^\s:]+):(\d{1,5})$")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class Entry:
    id: str = ""
    kind: str = ""
    name: str = ""
    aliases: list = field(default_factory=list)
    environment: str = ""
    account: str = ""
    requires: list = field(default_factory=list)
    access: list = field(default_factory=list)
    verify: str = ""
    secrets: list = field(default_factory=list)
    check: str = ""
    hint: str = ""
    tags: list = field(default_factory=list)
    notes: str = ""
    url: str = ""
    timeout: float = 0.0
    file: str = ""
    line: int = 0
    error: str = ""               # set: this entry is broken (file:line: what, did you mean), the rest work

    def names(self) -> list:
        return [n for n in [self.id, self.name, *self.aliases] if n]


FIELDS = {f.name for f in fields(Entry)} - {"file", "line", "error"}     # what an inventory entry may set
LIST_FIELDS = {f.name for f in fields(Entry) if f.type == "list"}


# -- loading and validation ------------------------------------------------------------------------

def _entry(item, path: str, line) -> Entry:
    from .yaml import line_of
    if not isinstance(item, dict):      # an InputError: an item that does not parse (a duplicate key, an open quote)
        raise item if isinstance(item, InputError) else InputError(path, line, "each inventory entry is a mapping "
                                                                               "starting with '- id: …'")
    entry = Entry(file=path, line=item.line)
    for key in item:
        if key not in FIELDS:
            raise InputError(path, line_of(item, key, item.line), f"unknown field '{key}' in an inventory entry",
                             hint=did_you_mean(str(key), sorted(FIELDS), "known fields: " + ", ".join(sorted(FIELDS))))
    for key, value in item.items():
        kline = line_of(item, key, item.line)
        if key in LIST_FIELDS:
            value = [value] if isinstance(value, str) else (value or [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InputError(path, kline, f"'{key}' must be a list of strings")
            value = list(value)
        elif key == "timeout":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise InputError(path, kline, "'timeout' must be a positive number of seconds")
            value = float(value)
        elif value is None:
            value = ""
        elif not isinstance(value, str):
            raise InputError(path, kline, f"'{key}' must be a string", hint="quote it")
        if "\0" in ("".join(value) if isinstance(value, list) else str(value)):    # bash drops it: 'true\0x' ran truex
            raise InputError(path, kline, f"'{key}' holds a NUL byte, which no command can carry", hint="remove it")
        setattr(entry, key, value)
    if not entry.id or not _ID.match(entry.id):
        raise InputError(path, item.line, "an entry needs an 'id' of letters, digits, '-', '_' or '.'")
    if entry.check and not is_tcp_check(entry.check):
        from .guard import verdict_for
        if not verdict_for(entry.check).allow:
            raise InputError(path, line_of(item, "check", item.line),
                             f"check '{entry.check}' is not a read-only command recall may run",
                             hint="use 'tcp HOST:PORT' or a command 'recall verify --dry-run' allows")
    return entry


def _secret_ids(cfg) -> set:
    from . import yaml
    ids = set()
    for path in cfg.secrets:
        if os.path.exists(path):         # a top level that is not a list is an error at file:1
            try:
                entries = yaml.load_entries(path, "secrets")
            except InputError as exc:            # never quote a secrets file (issue 11)
                from .vault.secretfile import without_text
                raise without_text(exc) from None
            ids.update(str(item.get("id")) for item, _ in entries if isinstance(item, dict))
    return ids


def _check_references(entries: list, secret_ids: set, items: dict) -> None:
    """A dangling reference or a cycle breaks the entries it is in, each with file:line (of the
    field in its item, from `items`: id -> parsed mapping) and the closest names; the rest stay usable."""
    from .yaml import line_of
    by_id = {e.id: e for e in entries}

    def _broken(e: Entry, key: str, message: str, hint: str) -> None:
        if not e.error:                      # its first error is the one it shows
            where = line_of(items.get(e.id), key, e.line)
            e.error = str(InputError(e.file, where, f"entry '{e.id}': {message}", hint=hint))

    for e in entries:
        refs = [("account", e.account)] if e.account else []
        for what, ref in refs + [("requires", r) for r in e.requires]:
            if ref not in by_id:
                _broken(e, what, f"{what} '{ref}' is not an inventory id",
                        did_you_mean(ref, by_id, "see 'recall access find'"))
        for sid in e.secrets:
            if sid not in secret_ids:
                _broken(e, "secrets", f"secret '{sid}' is not in the secrets files",
                        did_you_mean(sid, secret_ids, "see 'recall secret find'"))
    done: set = set()

    def visit(e, trail):                  # trail: the entries whose requires led here
        if e.id in trail:
            cycle = trail[trail.index(e.id):] + [e.id]
            for i in set(cycle):
                _broken(by_id[i], "requires", "a cycle in 'requires': " + " → ".join(cycle),
                        "remove one of these requires")
        elif e.id not in done:
            for r in e.requires:
                if r in by_id:
                    visit(by_id[r], trail + [e.id])
            done.add(e.id)

    for e in entries:
        visit(e, [])
        # a prerequisite with nothing to check (no check, no requires of its own) is never assumed up
        for r in (by_id[r] for r in e.requires if r in by_id and not (by_id[r].check or by_id[r].requires or by_id[r].error)):
            _broken(e, "requires", f"requires '{r.id}', which has no check, so recall cannot tell whether it is up",
                    f"give '{r.id}' ({r.file}:{r.line}) a 'check: tcp HOST:PORT' or a read-only command")


_RULES = ("inventory.py", "errors.py", "vault/door.py", "guard", "yaml")     # the code that decides an entry


def _rules() -> list:
    """recall's own files that validate an entry: a cache another version of them wrote is not used
    (an upgrade's new rule applies at once, and an old cache's fields never reach Entry)."""
    here = os.path.dirname(os.path.abspath(__file__))
    files = []
    for rel in _RULES:
        path = os.path.join(here, rel)
        files += sorted(e.path for e in os.scandir(path) if e.name.endswith(".py")) if os.path.isdir(path) else [path]
    return files


def _signature(cfg) -> str:
    parts = []
    for p in [*cfg.inventory, *cfg.secrets, *_rules()]:
        try:
            st = os.stat(p)
            parts.append(f"{p}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{p}:absent")
    return "|".join(parts)


def load_inventory(cfg, con=None) -> list:
    """Every entry of every inventory file, validated (a bad one kept with its own error, the rest
    usable); cached in the DB while the files are unchanged."""
    if not cfg.inventory:
        return []
    from . import yaml
    from .db import get_meta, is_sqlite_error, set_meta, waiting_at_most
    sig = _signature(cfg)
    cached = json.loads(get_meta(con, "inventory_cache") or "{}") if con is not None else {}
    if cached.get("sig") == sig:
        return [Entry(**e) for e in cached["entries"]]
    loaded = [(_loaded(item, path, line), item) for path in map(str, cfg.inventory)
              for item, line in yaml.load_entries(path, "inventory", each=True)]
    entries = _one_name_one_entry([e for e, _ in loaded])
    _check_references(entries, _secret_ids(cfg), {e.id: item for e, item in reversed(loaded)})
    from .vault import door
    for _e, _field, label, literal in door.inline_credentials(entries):     # shown as [recall:ENTRY:FIELD]
        door.learn(label, literal)
    if con is not None and not door.holds_inline(entries):
        try:
            with waiting_at_most(con):      # a search must not wait out another writer for a cache
                set_meta(con, "inventory_cache", json.dumps({"sig": sig, "entries": [asdict(e) for e in entries]}))
        except Exception as exc:   # a read-only moment (another writer) only costs the cache
            if not is_sqlite_error(exc):
                raise
    return entries


def _loaded(item, path: str, line: int) -> Entry:
    """The entry one item of a file describes; one that does not load is kept broken with its own
    error, named by its id, name and aliases where they read (else by FILE:LINE, as verify lists it)."""
    try:
        return _entry(item, path, line)
    except InputError as exc:
        fields = item if isinstance(item, dict) else {"id": getattr(item, "id", None)}
        ident, name, aliases = fields.get("id"), fields.get("name"), fields.get("aliases")
        aliases = [aliases] if isinstance(aliases, str) else aliases if isinstance(aliases, list) else []
        return Entry(id=ident if isinstance(ident, str) and _ID.match(ident) else f"{os.path.basename(path)}:{line}",
                     name=name if isinstance(name, str) else "", aliases=[a for a in aliases if isinstance(a, str)],
                     file=path, line=line, error=str(exc))


def _one_name_one_entry(entries: list) -> list:
    """Each name names one entry. An id two entries spell alike names neither: they stay one broken
    entry saying where both are. A name (the id in another case, an alias, the name) that another
    entry's id or an earlier entry's name already holds breaks the entry that repeats it."""
    kept: dict = {}
    for e in entries:
        first = kept.setdefault(e.id, e)
        if first is not e:
            first.aliases += e.aliases
            first.error = str(InputError(e.file, e.line, f"inventory id '{e.id}' is also at {first.file}:{first.line}",
                                         hint="rename one of them"))
    owners: dict = {}
    for e in kept.values():                # ids first: an alias never takes another entry's id
        owners.setdefault(e.id.lower(), e)
    for e in kept.values():
        for name in e.names():
            owner = owners.setdefault(name.lower(), e)
            if owner is not e and not e.error:
                e.error = str(InputError(e.file, e.line, f"'{name}' already names entry '{owner.id}' "
                                         f"({owner.file}:{owner.line}), in any case",
                                         hint=f"give '{e.id}' another id, alias or name"))
    return list(kept.values())


def name_table(entries: list, ids=()) -> dict:
    """{every id, name and alias: its id}; an id (each of `ids` too) wins over an alias."""
    table = {i: i for i in [*ids, *(e.id for e in entries)]}
    for e in entries:
        for n in e.names():
            table.setdefault(n, e.id)
    return table


def get_entry(entries: list, entry_id: str) -> Entry:
    """The entry an id, name or alias names, in any case; else NotFound with the closest names."""
    from .errors import resolve
    by_id = {e.id: e for e in entries}
    entry = by_id[resolve(entry_id, name_table(entries), "inventory entry", "see 'recall access find QUERY'")]
    if entry.error:
        raise RecallError(entry.error)
    return entry


# -- find, show, pins ------------------------------------------------------------------------------

def find(entries: list, query: str) -> list:
    """Exact id / name / alias first, then entries whose words (tags, notes, kind …) match; an
    empty query lists every entry."""
    q = (query or "").strip().lower()
    if not q:
        return list(entries)
    exact = [e for e in entries if q in (n.lower() for n in e.names())]
    words = [w for w in re.findall(r"[\w.-]+", q) if len(w) > 1]
    hay = {e.id: " ".join([*e.names(), e.kind, e.environment, e.account, *e.tags, e.notes, e.url]).lower()
           for e in entries}
    scored = [(-sum(w in hay[e.id] for w in words), e.id, e) for e in entries if e not in exact]
    return exact + [e for score, _, e in sorted(scored, key=lambda x: x[:2]) if score]


def mentioned(entries: list, query: str) -> list:
    """Entries the query names (id, name or alias; case-insensitive; whole words; a hyphen, an
    underscore and a space are the same separator: `jump host` names `jump-host`)."""
    def named(name: str) -> bool:
        words = [re.escape(w) for w in re.split(r"[-_\s]+", name.strip()) if w]
        return bool(words) and bool(re.search(r"(?<![\w-])" + r"[-_\s]+".join(words) + r"(?![\w-])", query, re.I))
    return [e for e in entries if any(named(n) for n in e.names())]


def describe(con, e: Entry) -> dict:
    """The access block as data (what `access show` prints and search pins)."""
    d = {k: v for k, v in asdict(e).items() if v not in ("", [], 0.0)}
    if e.access:
        d["access"] = [show_step(e.id, step) for step in e.access]
    d["last_verified"] = describe_status(con, f"entry:{e.id}", config=config_of(e))
    d["block"] = block_text(e, d["last_verified"])
    return d


def pin_access(con, cfg, result) -> None:
    """A search's pins (search passes its result to the function the faces give it): the entries
    the query names go first, as access blocks; a broken inventory is a notice, not a failure."""
    try:
        entries = load_inventory(cfg, con)
    except RecallError as exc:
        result.notices.append(f"inventory not loaded: {exc}")
        return
    pinned = mentioned(entries, result.query)
    result.access = [describe(con, e) for e in pinned]
    result.notices += inline_warnings(pinned)


def block_text(e: Entry, last_verified: str) -> str:
    head = " · ".join(x for x in (e.kind, e.environment) if x)
    lines = [f"Access: {e.id}" + (f" ({head})" if head else "")]
    lines += [f"  {label}: {value}" for label, value in
              (("name", e.name), ("account", e.account), ("requires", ", ".join(e.requires))) if value]
    lines += [f"  {i}. {show_step(e.id, step)}" for i, step in enumerate(e.access, start=1)]
    lines += [f"  {label}: {value}" for label, value in
              (("check", e.check), ("verify", e.verify), ("secrets", ", ".join(e.secrets)),
               ("last verified", last_verified), ("broken", e.error)) if value]
    return "\n".join(lines)


# -- prerequisites ---------------------------------------------------------------------------------

_CHECKED: dict = {}      # id -> (up, detail): each prerequisite is checked once per process


def forget_checks() -> None:
    """Start afresh: a long-lived process (the MCP server) checks once per call instead."""
    _CHECKED.clear()


def tcp_check(target: str, timeout: float) -> tuple:
    """(up, detail): resolve and connect to HOST:PORT, the whole of it within `timeout` seconds."""
    m = _TCP.match(target.strip())
    if not m:
        return False, f"'{target}' is not 'tcp HOST:PORT'"
    host, port = m.group(1).strip("[]"), int(m.group(2))
    started = time.monotonic()
    try:
        addresses = _resolve(host, port, timeout)
        if addresses is None:
            return False, f"{host} did not resolve within {timeout:g}s"
        _connect_any(addresses, started + timeout)
        return True, f"{host}:{port} answered in {(time.monotonic() - started) * 1000:.0f} ms"
    except socket.timeout:
        return False, f"{host}:{port} did not answer within {timeout:g}s"
    except OSError as exc:
        return False, f"{host}:{port}: {exc.strerror or exc}"


def _connect_any(addresses: list, deadline: float) -> None:
    """Connect to the first address that accepts before the deadline (as create_connection does)."""
    error: OSError = OSError("no address")
    for family, kind, proto, _, address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(left)
            try:
                sock.connect(address)
                return
            except socket.timeout:
                raise
            except OSError as exc:
                error = exc
    raise error


def _resolve(host: str, port: int, timeout: float):
    """getaddrinfo bounded by `timeout` (it has none of its own: an unreachable DNS server blocks it
    for the resolver's retries); None when it did not finish in time."""
    import threading
    outcome: list = []

    def resolve():
        try:
            outcome.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=resolve, name=f"resolve {host}", daemon=True)
    worker.start()
    worker.join(timeout)
    if outcome and isinstance(outcome[0], OSError):
        raise outcome[0]
    return outcome[0] if outcome else None


def is_tcp_check(text: str) -> bool:
    """Is a check `tcp HOST:PORT` (a connect), not a command?"""
    return bool(_TCP.match(text.strip()))


def check_timeout(e: Entry) -> float:
    """Seconds a prerequisite's check may take: its `timeout`, else 3 (tcp) or 20 (a command)."""
    return e.timeout or (DEFAULT_TCP_TIMEOUT if is_tcp_check(e.check) else DEFAULT_COMMAND_TIMEOUT)


def probe(e: Entry, timeout: float) -> tuple:
    """(up, detail) of one run of a prerequisite's check within `timeout` seconds: `tcp HOST:PORT`
    connects, else the command runs (no stdin). The one probe: access, verify and doctor word it alike."""
    if is_tcp_check(e.check):
        return tcp_check(e.check, timeout)
    import shlex

    from .vault.runner import run_check
    try:
        code = run_check(shlex.split(e.check), timeout)
    except OSError as exc:
        return False, f"'{e.check}' could not run: {exc.strerror or exc}"
    if code is None:
        return False, f"'{e.check}' did not finish within {timeout:g}s"
    return code == 0, f"'{e.check}' exit {code}"


def check_one(e: Entry) -> tuple:
    """(up, detail) of a prerequisite, checked once per process; a broken entry is never up."""
    if e.id not in _CHECKED:
        _CHECKED[e.id] = ((False, e.error) if e.error else (True, "no check") if not e.check
                          else probe(e, check_timeout(e)))
    return _CHECKED[e.id]


def prerequisites(entries: list, e: Entry) -> list:
    """Every `requires` entry of e, transitively, deepest first (each once)."""
    by_id = {x.id: x for x in entries}
    order: list = []
    seen: set = set()

    def walk(x):                   # a dangling id or a cycle breaks its own entries: passed over here
        seen.add(x.id)
        for r in (r for r in x.requires if r in by_id and r not in seen):
            walk(by_id[r])
            if by_id[r] not in order:
                order.append(by_id[r])

    walk(e)
    return order


def ensure_prerequisites(entries: list, e: Entry) -> None:
    """Raise PrerequisiteDown (exit 69) naming the first prerequisite that is down; a broken one
    cannot be checked, so it stops the entry too (its own error)."""
    for p in prerequisites(entries, e):
        up, detail = check_one(p)
        if p.error:
            raise RecallError(blocked_by(p, detail))
        if not up:
            raise PrerequisiteDown(blocked_by(p, p.hint or detail))


def blocked_by(p: Entry, why: str) -> str:
    """What stops an entry whose prerequisite `p` is not up: down (why), or broken (its error)."""
    return f"prerequisite '{p.id}' cannot be checked: {p.error}" if p.error else f"prerequisite '{p.id}' is down: {why}"


# -- stored verify results: record one, and say it the way a person reads it ("ok 2h ago")

def config_of(e: Entry) -> str:
    """What a verify result of `e` was for: its steps, proof, prerequisites, secrets, url, timeout."""
    import hashlib
    what = [e.access, e.verify, e.check, e.requires, e.secrets, e.url, e.timeout]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]


def record_status(con, target: str, status: str, reason: str, command: str, config: str = "") -> None:
    from .vault.door import scrub  # no value or literal token in a proof command or its reason is stored
    reason, command = scrub(reason), scrub(command)
    con.execute("INSERT OR REPLACE INTO verify_results(target, status, reason, command, at, config) "
                "VALUES (?,?,?,?,?,?)", (target, status, reason, command, time.time(), config))


def ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return "just now"


def describe_status(con, target: str, config: str = "") -> str:
    """'ok 2h ago', 'stale 1d ago: log in …', or 'never'. A skip (it says nothing of the entry
    itself) or a result from before the entry changed (`config`, its config_of) is history:
    'skipped 2h ago then: prerequisite …', 'ok 3d ago then (the entry changed since)'."""
    row = con.execute("SELECT status, reason, at, config FROM verify_results WHERE target=?", (target,)).fetchone()
    if row is None:
        return "never"
    changed = bool(config and row["config"] and row["config"] != config)
    text = f"{row['status']} {ago(time.time() - row['at'])}"
    if changed or row["status"] == "skipped":
        text += " then" + (" (the entry changed since)" if changed else "")
    return text if row["status"] == "ok" or not row["reason"] else f"{text}: {row['reason']}"
