"""The MCP server: one api call per tool, its answer made lean and paged, errors the agent can read;
every byte has passed the library layer's door."""
# No `from __future__ import annotations`: the SDK reads these signatures at run time.
import collections
import inspect
import json
import os
import re
import signal
import threading
from typing import Literal

from . import api
from .api import MODES  # the search modes, spelled once
from .errors import MissingExtra, RecallError

MAX_CHARS = 15_000          # ≈ 4k tokens: the most one response carries (< 16,000 with its footer)
READ_CHARS = 12_000         # one recall_read page; its own `offset` continues it
MAX_LIMIT = 50
EXEC_TIMEOUT = 300.0        # seconds; then the child's process group is killed (exit 124)
KEEP_OUTPUTS = 8            # long exec/verify outputs held so `offset` continues without re-running
STOP_WAIT = 5.0             # seconds a cancelled call is given to stop its child and log it

ARG_DOCS = {
    "query": "What to look for: words, an identifier (INC-10963, a hostname), or a question.",
    "id": "An id or alias from a find result (any case).",
    "path": "A note path from recall_search: 'source:relpath', 'relpath', or 'relpath:LINE' for the "
            "section around that line.",
    "offset": "0 for the start; to continue a long response pass the offset it ends with.",
    "limit": f"How many results (1–{MAX_LIMIT}; more is cut to {MAX_LIMIT}).",
    "mode": "auto (default): identifiers by keyword, the rest hybrid when embeddings exist; "
            "keyword, semantic or hybrid force one route.",
}
TOOL_ARG_DOCS = {
    ("recall_secret_command", "command"): "The command that needs the credential, naming its variables "
        "(e.g. curl -H \"Authorization: Bearer $JIRA_API_TOKEN\" URL). Empty: the secret's own 'use' line.",
    ("recall_access_exec", "command"): "A bash command line, run in the same shell as the entry's setup "
        "steps: pipes, &&, redirects and $VARS work. Empty: the entry's verify command.",
    ("recall_access_exec", "offset"): "0 runs the command. A larger value returns the rest of the "
        "previous output of the same id and command, without running it again.",
    ("recall_secret_find", "query"): "What the credential is for (service, kind, environment). Empty lists all.",
    ("recall_access_find", "query"): "A system's name, alias or words about it. Empty lists all.",
    ("recall_verify", "id"): "An id or alias (any case, spaces allowed), several separated by commas; "
                             "empty checks every entry and secret.",
    ("recall_verify", "offset"): "0 runs the sweep; a larger value continues the previous report "
        "without running it again.",
}

_OUTPUTS = collections.OrderedDict()                 # (tool, args) -> full text of a long response
_LOCK = threading.Lock()
NAMED = {"config": None}    # its --config or RECALL_CONFIG: a shell running a command it hands out has neither


def _told(said):
    """A command told to the agent, for the user's shell: that has none of the client's settings."""
    return api.with_config(said, NAMED["config"], moved=True)


def _page(text, offset, tool, key=None):
    """At most MAX_CHARS from `offset`, ending with the offset that continues it."""
    if offset < 0:
        raise RecallError("offset must be 0 or more")
    if offset and offset >= len(text):
        raise RecallError(f"offset {offset} is past the end ({len(text):,} characters)", "start at 0")
    end = offset + MAX_CHARS
    if end >= len(text):
        return text[offset:]
    cut = text.rfind("\n", offset + MAX_CHARS // 2, end)
    end = cut + 1 if cut > 0 else end
    if key is not None:
        with _LOCK:
            _OUTPUTS[key] = text
            _OUTPUTS.move_to_end(key)
            while len(_OUTPUTS) > KEEP_OUTPUTS:
                _OUTPUTS.popitem(last=False)
    part = text[offset:end]
    return (part + ("" if part.endswith("\n") else "\n") + f"… {len(text) - end:,} more characters: "
            f"call {tool} again with the same arguments and offset={end}")


def _continued(key, offset):
    """The long output held under key = (tool, its arguments…), from `offset`, without running it again."""
    with _LOCK:
        text = _OUTPUTS.get(key)
    if text is None:
        raise RecallError(f"there is no earlier {key[0]} output to continue for these arguments",
                          "call it again with offset=0 (that runs it again)")
    return _page(text, offset, key[0], key)


def _json(obj):
    """Compact JSON (no indentation: every space is a token the agent pays for)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


# What a response leaves out, and why: each is said by another field of the same response, is
# for a person's terminal, or is what the agent itself just sent.
HIT_FIELDS = ("read", "breadcrumb", "snippet", "date")  # read: 'source:relpath:line', the note named once
ENTRY_DROPS = {"block", "file", "line"}       # block: these fields as text; file:line: for the user's editor
FIND_FIELDS = ("id", "service", "kind", "environment", "notes", "variables")   # enough to choose one
SHOW_DROPS = {"check"}                        # the proof recall_verify runs; the agent names `use` instead


def _lean(d: dict, drop=()) -> dict:
    """d without empty values and without the keys in `drop`."""
    return {k: v for k, v in d.items() if k not in drop and v not in ("", [], {}, None)}


def _lean_search(data: dict) -> dict:
    """A search's answer for the agent: its route (why nothing matched by meaning), the access entries
    and hits; nothing twice (no query or mode echoed, no path beside `read`, no highlight offsets)."""
    out = {"route": data["route"]}
    if data["access"]:
        out["access"] = [_lean(a, ENTRY_DROPS) for a in data["access"]]
    out["hits"] = [{k: h[k] for k in HIT_FIELDS if h[k] not in (None, "")} for h in data["hits"]]
    for h, full in zip(out["hits"], data["hits"]):
        heading = full["breadcrumb"].rsplit(" › ", 1)[-1]
        if heading and h.get("snippet", "").startswith(heading + " "):     # the breadcrumb says it
            h["snippet"] = h["snippet"][len(heading) + 1:]
        if "explain" in full:
            h["explain"] = full["explain"]
    return {**out, **_lean({"stale": data["stale"], "notices": data["notices"]})}


def _limit(limit, notices):
    """`limit` within 1..MAX_LIMIT; a value outside is brought in and said, not refused."""
    near = min(max(limit, 1), MAX_LIMIT)
    if near != limit:
        notices.append(f"limit {limit} is outside 1–{MAX_LIMIT}: showing up to {near}")
    return near


# CLI verbs in core errors, said as the MCP tool to call (or what to ask the user to run).
_FOR_AGENT = [
    (re.compile(r"'?recall secret exec (\S+) -- CMD( …)?'?"), r"recall_secret_command with id='\1'"),
    (re.compile(r"'?recall access exec (\S+) -- CMD( …)?'?"), r"call recall_access_exec with id='\1' and a command"),
    (re.compile(r"'recall access show ([^']+)'"), r"recall_access_show with id='\1'"),
    (re.compile(r"'recall (access|secret) find( QUERY)?'"), r"recall_\1_find (an empty query lists all)"),
    (re.compile(r"'recall (search|read|verify)'"), r"recall_\1"),
    (re.compile(r"e\.g\. recall (access|secret) find '([^']*)'"), r"e.g. recall_\1_find with query='\2'"),
    (re.compile(r"e\.g\. recall search '([^']*)'"), r"e.g. query='\1'"),
    (re.compile(r"(?:\brun |\buse )?'recall ((?:--config [^']*? )?(?:index|init|secret sync|secret rotate-key|doctor|"
                r"remote install)[^']*)'"), r"ask the user to run 'recall \1'"),
    (re.compile(r"give the command after --|put the command after `--`"), "pass the command"),
    (re.compile(r"— add '"), "— ask the user to add '"),
    (re.compile(r"an --offset below"), "an offset below"),   # the CLI's flags, as this face's arguments
    (re.compile(r"--(offset|mode) (-?\d+|auto|keyword|semantic|hybrid)\b"), r"\1=\2"),
    (re.compile(r"--(offset|mode)\b"), r"\1"),
]


def for_agent(text: str) -> str:
    """An error as an MCP client's agent should read it: MCP tool names, not CLI verbs."""
    for pattern, repl in _FOR_AGENT:
        text = pattern.sub(repl, text)
    return text


def _invalid(tool: str, exc) -> str:
    """A pydantic validation error as one sentence (no URL, no dump of the input)."""
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first.get("loc", ())) or "the arguments"
    kind = first.get("type", "")
    if kind == "missing":
        doc = ARG_DOCS.get(field, "").rstrip(".")
        what = f"needs '{field}'" + (f" ({doc})" if doc else "")
    elif kind.startswith("int"):
        what = f"takes '{field}' as a whole number"
    elif kind.startswith("string"):
        what = f"takes '{field}' as a string"
    elif kind == "literal_error":
        what = f"takes '{field}' as one of {first.get('ctx', {}).get('expected', '')}"
    else:
        what = f"cannot use '{field}': {first.get('msg', 'invalid value')}"
    return f"{tool} {what}."


# The tools: each makes one api call, then makes its answer lean and bounded.

def recall_search(query: str, limit: int = 10, mode: Literal[MODES] = "auto",
                  offset: int = 0) -> str:
    """Search my notes (runbooks, incidents, decisions). Use it FIRST for any question about my
    systems, past incidents or how something is done here, instead of grep over the notes.
    Identifiers (INC-10963, hostnames) match exactly. Returns JSON: `route`, `access` (the inventory
    entry of any system the query names) and `hits` (read = 'source:relpath:line', breadcrumb, snippet, date).
    Next: recall_read with path=the hit's `read`."""
    notices: list = []
    data = api.search(query, n=_limit(limit, notices), mode=mode).to_dict()
    data["notices"] = _told(notices + data["notices"])
    return _page(_json(_lean_search(data)), offset, "recall_search")


def recall_read(path: str, offset: int = 0) -> str:
    """Read a note, or with 'relpath:LINE' the heading section around that line, with line numbers.
    Use it after recall_search to see a hit in full; long notes page by `offset`. Secrets files
    cannot be read. Next: for a system it names, recall_access_find; for a credential,
    recall_secret_find."""
    data = api.read(path, max_chars=READ_CHARS, offset=offset).to_dict()
    tail = ("" if data["next_offset"] is None else
            f"… more: call recall_read with path={path!r} and offset={data['next_offset']}\n")
    return _page(api.read_header(data) + "\n" + data["text"] + tail, 0, "recall_read")


def _echo(query: str) -> str:
    """The agent's own query as a notice repeats it: its first 40 characters when it is long."""
    return query if len(query) <= 80 else query[:40] + "…"


def _listing(key: str, found: list, total: int, limit: int, lean, none: str) -> str:
    """The first `limit` of `found`, each made lean, as JSON, with what the agent should know."""
    notices: list = []
    shown = [lean(x) for x in found[:_limit(limit, notices)]]
    out = {"count": total, key: shown}
    if total > len(shown):
        notices.append(f"{total - len(shown)} more: narrow the query, or raise limit (up to {MAX_LIMIT})")
    if not total:
        notices.append(none)
    if notices:
        out["notices"] = _told(notices)
    return _json(out)


def recall_secret_find(query: str = "", limit: int = 10) -> str:
    """Find credentials by what they are for (service, environment, kind, username, tags, notes);
    values are never shown. Use it when a task needs a token, password or key; an empty query
    lists them all. Returns JSON: `count` and `secrets` (id, service, kind, environment, notes,
    variables). Next: recall_secret_show (url, `use` line, inject when not env), then
    recall_secret_command."""
    ans = api.secret_find(query, limit=MAX_LIMIT)
    return _page(_listing("secrets", ans.to_dict(), ans.extra["total"], limit,
                          lambda m: _lean({k: m.get(k) for k in FIND_FIELDS}),
                          f"no secrets match {_echo(query)!r}: " + (ans.extra["why_none"]
                                                                     or "try service, kind or environment words, or an empty query")),
                 0, "recall_secret_find")


def recall_secret_show(id: str) -> str:
    """One credential's metadata: service, environment, username, url, notes, its `use` line,
    the variables it is injected as, when it was last verified. Never the value. Use it to learn
    which variable a command should name. Next: recall_secret_command."""
    meta = api.secret_show(id).to_dict()           # `inject` only when it is not the default env
    return _page(_json(_lean(meta, SHOW_DROPS | ({"inject"} if meta["inject"] == "env" else set()))),
                 0, "recall_secret_show")


def recall_secret_command(id: str, command: str = "") -> str:
    """Returns one shell line, nothing else: it runs your command with the credential injected
    (env or stdin) and its output masked, from any shell. Use it whenever a command needs a secret;
    name the variable in the command (recall_secret_show lists them), never a value. Empty command:
    the secret's `use` line. Next: run the line exactly as returned in your shell."""
    return api.secret_command(id, command or None).to_dict()["command"]


def recall_access_find(query: str = "", limit: int = 10) -> str:
    """Find how to reach a cluster, host, account, VPN or service: id, name or alias first, then
    entries whose tags or notes match; an empty query lists them all. Use it before touching any
    remote system. Returns JSON: `count` and `entries`, each with its access `block`. Next:
    recall_access_exec with the entry's id."""
    ans = api.access_find(query)
    found = ans.to_dict()
    return _page(_listing("entries", found, len(found), limit, lambda e: _lean(e, ENTRY_DROPS),
                          f"no inventory entries match {_echo(query)!r}: {ans.extra['why_none'] or 'try an empty query'}"),
                 0, "recall_access_find")


def recall_access_show(id: str) -> str:
    """One inventory entry as JSON: kind, environment, prerequisites (requires), setup steps,
    linked secrets, verify command, notes, last verified. Use it to see how a system is reached.
    Next: recall_access_exec with this id."""
    return _page(_json(_lean(api.access_show(id).to_dict(), ENTRY_DROPS - {"file", "line"})), 0, "recall_access_show")


def recall_access_exec(id: str, command: str = "", offset: int = 0) -> str:
    """Run a bash command line against an inventory entry: prerequisites checked (e.g. the VPN),
    then one clean bash runs the entry's setup steps and your command (pipes, &&, $VARS from the
    setup work), linked secrets injected, output masked; kubectl without --context gets the entry's
    kube context. Use it for every command on a cluster, host or account. Returns the exit code,
    stdout, stderr. Killed after 5 minutes (exit 124).
    Next: on 'prerequisite … is down', ask the user to connect it; on 'setup step not allowed',
    nothing ran: tell the user which step to fix; after 401/403/expired, recall_verify."""
    key = ("recall_access_exec", id, command)
    if offset:
        return _continued(key, offset)
    d = api.access_exec(id, command.strip() or None, timeout=EXEC_TIMEOUT).to_dict()
    lines = [f"exit code: {d['code']}" + (f" (timed out after {EXEC_TIMEOUT:g}s)" if d["timed_out"] else "")]
    lines += [f"note: {note}" for note in d["notes"]]
    for name in ("stdout", "stderr"):
        if d[name].strip():           # an empty stream's header says nothing
            lines += [f"--- {name} ---", d[name].rstrip("\n")]
    return _page("\n".join(lines) + "\n", 0, "recall_access_exec", key)


def recall_verify(id: str = "", offset: int = 0) -> str:
    """Check that credentials and access entries still work, by running each one's read-only
    proof (only what recall's guard allows). Use it before a task spanning several systems and
    after any 401, 403 or expired token. Returns JSON: a one-line `summary`, then per entry its
    kind, status (ok, stale, unreachable, missing, skipped, error) and reason. Next: act on the
    reason (ask the user to log in, renew or connect); do not retry blindly."""
    key = ("recall_verify", id)
    if offset:
        return _continued(key, offset)
    ids = [name.strip() for name in id.split(",") if name.strip()] or None      # an alias may hold spaces
    if ids is None and id.strip():          # commas alone: a slip, not "check everything"
        raise RecallError("id names nothing (only commas and spaces)",
                          "name an entry or secret, or leave id empty to check every one")
    ans = api.verify(ids)
    kinds = ans.extra["kinds"]
    rows = [_lean({"id": e["id"], "kind": kinds.get(f"{e['kind']}:{e['id']}", e["kind"]),
                   "status": e["commands"][0]["status"], "reason": e["commands"][0]["detail"]})
            for e in ans.to_dict()["entries"]]
    counts = collections.Counter(r["status"] for r in rows)
    data = {"summary": f"{len(rows)} checked: " + ", ".join(f"{n} {s}" for s, n in counts.most_common()),
            "entries": rows}
    return _page(_json(_told(data)), 0, "recall_verify", key)


TOOLS = [recall_search, recall_read, recall_secret_find, recall_secret_show, recall_secret_command,
         recall_access_find, recall_access_show, recall_access_exec, recall_verify]
TITLES = {"recall_search": "Search my notes", "recall_read": "Read a note section",
          "recall_secret_find": "Find a credential", "recall_secret_show": "Show a credential's metadata",
          "recall_secret_command": "Command line that uses a credential",
          "recall_access_find": "Find how to reach a system", "recall_access_show": "Show an access entry",
          "recall_access_exec": "Run a command on a system", "recall_verify": "Verify access and credentials"}


def _as_tool(fn):
    """fn with RecallError → ToolError (so its text reaches the agent) and documented arguments, run on a
    worker thread that a cancelled call (or a client gone away) stops: its child is killed, not left."""
    import functools
    from typing import Annotated

    import anyio
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    def answer(kwargs, stop, done):
        try:
            with api.stopping(stop):
                return api.scrub(fn(**kwargs))      # what the tool put together passes the door once more
        except Exception as exc:      # ours, or a full disk, a damaged DB: its one line, not a logged traceback
            said = api.error_text(exc, [v for v in kwargs.values() if isinstance(v, str)])
            if said is None:
                raise
            raise ToolError(_told(for_agent(said[1]))) from None
        finally:
            done.set()

    @functools.wraps(fn)
    async def tool(**kwargs):
        stop, done = threading.Event(), threading.Event()
        try:
            return await anyio.to_thread.run_sync(answer, kwargs, stop, done, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            stop.set()                # the call's child ends now; wait for its access-log row
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(done.wait, STOP_WAIT, abandon_on_cancel=True)
            raise

    sig = inspect.signature(fn)
    params = [p.replace(annotation=Annotated[p.annotation, Field(
        description=TOOL_ARG_DOCS.get((fn.__name__, p.name)) or ARG_DOCS[p.name])])
        for p in sig.parameters.values()]
    tool.__signature__ = sig.replace(parameters=params)
    return tool


def build_server():
    """The MCPServer with every tool registered; marks this process's access-log entries as mcp."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
    from pydantic import ValidationError

    from . import __version__
    api.as_caller("mcp")

    class Server(MCPServer):
        async def call_tool(self, name, arguments, context=None):
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:          # the SDK's text is a pydantic dump with a URL
                if isinstance(exc.__cause__, ValidationError):
                    raise ToolError(_invalid(name, exc.__cause__)) from exc.__cause__
                if type(exc.__cause__) is ToolError:   # ours: its sentence, without "Error executing tool X: "
                    raise ToolError(str(exc.__cause__)) from None
                raise

    server = Server(name="recall", version=__version__, instructions=api.agent_rules(),
                    log_level="WARNING")
    for fn in TOOLS:
        name, runs = fn.__name__, fn is recall_access_exec
        hints = ToolAnnotations(title=TITLES[name], read_only_hint=not runs, destructive_hint=runs,
                                idempotent_hint=not runs,
                                open_world_hint=fn in (recall_access_exec, recall_verify))
        server.add_tool(_as_tool(fn), name=name, title=TITLES[name], description=" ".join(fn.__doc__.split()),
                        annotations=hints, structured_output=False)
    return server


def serve() -> int:
    """`recall mcp`: serve on stdio until the client closes it, following the sources meanwhile so the
    next search sees a note saved a moment ago. No child outlives the server: SIGTERM, SIGINT or SIGHUP
    stop the running ones first, then end it as the signal would."""
    import sys
    if sys.version_info < (3, 10):        # no mcp package installs here: the pip line would not help
        raise RecallError(f"the MCP server needs Python 3.10 or newer (its mcp package), and this is Python "
                          f"{sys.version.split()[0]} ({sys.executable})",
                          "start 'recall mcp' with a newer python3 that has 'recall[mcp]' installed")
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        raise MissingExtra("mcp", "the MCP server") from None
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _end_by_signal)
    _answerable_stdin()
    NAMED["config"] = os.environ.get("RECALL_CONFIG")
    api.follow()
    try:
        build_server().run("stdio")
    except Exception as exc:
        if not _client_gone(exc):
            raise
    finally:
        api.stop_following()
        api.stop_runs()
    return 0


def _client_gone(exc) -> bool:
    """Whether `exc` (or every error of an exception group) says the client closed its end of the pipes:
    a write after it went away, which ends the server quietly."""
    parts = getattr(exc, "exceptions", None)
    if parts is not None:
        return all(_client_gone(e) for e in parts)
    return isinstance(exc, (BrokenPipeError, ConnectionResetError))


def _end_by_signal(signum, frame):
    """The children first (their groups killed, their rows written), then the default end of `signum`."""
    api.stop_runs()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


# -- every request answered: a line the SDK's schema refuses is dropped by it, unanswered --------------

_LONE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,15}(?![.\deE])|"(?:[^"\\]|\\.){0,200}")')


def _answerable_stdin() -> None:
    """fd 0 becomes a pipe a thread fills from the client's stdin, each line as `_readable` makes it, so
    the SDK (which claims fd 0 next) answers every request it is sent."""
    import threading
    wire, (out, into) = os.dup(0), os.pipe()
    os.dup2(out, 0)
    os.close(out)

    def pump():
        with open(wire, "rb") as client, open(into, "wb") as sdk:
            try:
                for line in client:
                    sdk.write(b"".join(one + b"\n" for one in _readable(line.rstrip(b"\r\n"))))
                    sdk.flush()
            except OSError:               # the server ended: nothing reads the pipe any more
                pass
    threading.Thread(target=pump, name="recall-stdin", daemon=True).start()


def _readable(line: bytes) -> list:
    """The line, or what the SDK answers in its place: a lone surrogate escape as U+FFFD; else, for a line
    its schema refuses (an id but no method, jsonrpc 1.0, params as a list, nested too deep, a batch,
    cut short) a request of an unknown method with each id it holds, which gets an error with that id.
    A line with no id to answer is passed on as it is (the SDK drops it)."""
    from mcp_types import jsonrpc_message_adapter

    def valid(text):
        try:
            jsonrpc_message_adapter.validate_json(text, by_name=False)
            return True
        except Exception:          # noqa: BLE001 — a refusal of any kind: answered below
            return False
    if not line.strip() or valid(line):
        return [line]
    mended = _LONE.sub(rb"\\ufffd", line)
    if mended != line and valid(mended):
        return [mended]
    try:
        doc = json.loads(line)
        ids = [d.get("id") for d in (doc if isinstance(doc, list) else [doc]) if isinstance(d, dict)]
    except (ValueError, RecursionError):
        found = _ID.search(line)
        try:
            ids = [json.loads(found.group(1))] if found else []
        except ValueError:
            ids = []
    answered = [json.dumps({"jsonrpc": "2.0", "id": i, "method": "recall/unreadable-request"}).encode()
                for i in ids if isinstance(i, (int, str)) and not isinstance(i, bool)]
    return answered or [line]
