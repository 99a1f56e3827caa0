"""The MCP server: one thin tool per core call, errors the agent can read, no value in any response."""
# No `from __future__ import annotations`: the SDK reads these signatures at run time, and the
# module must still import on Python 3.9 with nothing installed (`mcp` is imported lazily).
import collections
import contextlib
import inspect
import json
import shlex
import threading
from typing import Literal

from . import audit
from .errors import MissingExtra, RecallError

MAX_CHARS = 32_000          # ≈ 8k tokens: the most one response carries
READ_CHARS = 16_000         # one recall_read page; its own `offset` continues it
MAX_LIMIT = 50
EXEC_TIMEOUT = 300.0        # seconds; then the child's process group is killed (exit 124)
KEEP_OUTPUTS = 8            # long exec/verify outputs held so `offset` continues without re-running

ARG_DOCS = {
    "query": "What to look for: words, an identifier (INC-10963, a hostname), or a question.",
    "id": "The exact id from a find result (or an alias for an inventory entry).",
    "command": "One command line, split like a shell but not run by one: no pipes, redirects or "
               "$VARS unless you wrap it in sh -c '…'.",
    "path": "A note path from recall_search: 'source:relpath', 'relpath', or 'relpath:LINE' for the "
            "section around that line.",
    "offset": "0 for the start; to continue a long response pass the offset it ends with.",
    "limit": f"How many results (1–{MAX_LIMIT}).",
    "mode": "auto (default): identifiers by keyword, the rest hybrid when embeddings exist; "
            "keyword, semantic or hybrid force one route.",
}
TOOL_ARG_DOCS = {
    ("recall_secret_command", "command"): "The command that needs the credential, as one string "
        "(it may name the secret's variables, e.g. $JIRA_API_TOKEN). Empty: the secret's own 'use' line.",
    ("recall_access_exec", "command"): "One command line, split like a shell but not run by one (no "
        "pipes, redirects or $VARS unless wrapped in sh -c '…'). Empty: the entry's verify command.",
    ("recall_access_exec", "offset"): "0 runs the command. A larger value returns the rest of the "
        "previous output of the same id and command, without running it again.",
    ("recall_verify", "id"): "One id, or several separated by spaces; empty checks every entry and secret.",
    ("recall_verify", "offset"): "0 runs the sweep; a larger value continues the previous report "
        "without running it again.",
}

_WARM = {}                                           # kept across calls: the response masker …
_OUTPUTS = collections.OrderedDict()                 # (tool, args) -> full text of a long response
_LOCK = threading.Lock()


# -- per call: config, DB, masking, bounds ------------------------------------------------------

@contextlib.contextmanager
def _opened(readonly=False, notes=False):
    """Config and DB opened per call (edits to the config apply at once); closed after."""
    from . import db, inventory
    from .config import load_config
    inventory.forget_checks()        # "once per process" means once per call in a long-lived server
    cfg = load_config()
    if notes:
        cfg.require_sources()         # "no config file" says more than "no index"
    con = db.connect(cfg.db_path, readonly=readonly)
    try:
        yield cfg, con
    except RecallError as exc:        # an error may echo a command line or a child's message
        masker = _response_masker(con, cfg)
        if masker is None:
            raise
        raise RecallError(_mask(masker, str(exc))) from None
    finally:
        con.close()


def _response_masker(con, cfg):
    """Every vault value masked in every response (a note may hold a pasted token); cached until
    the vault or its key changes. None when there is no usable vault."""
    from . import keyfile, vault
    sig = con.execute("SELECT count(*), max(synced_at) FROM secrets").fetchone()
    if not sig[0]:
        return None
    try:
        keyfile.require_crypto()
        key = keyfile.key_path(cfg.home)
        stamp = key.stat().st_mtime_ns
    except (RecallError, OSError):
        return None                    # no crypto or no key: no value can be decrypted here either
    sig = (str(cfg.db_path), sig[0], sig[1], stamp)
    with _LOCK:
        held = _WARM.get("masker")
    if held and held[0] == sig:
        return held[1]
    masker = vault.masker_for(vault.load_values(con, cfg))
    with _LOCK:
        _WARM["masker"] = (sig, masker)
    return masker


def _mask(masker, text):
    return text if masker is None else masker.mask(text.encode("utf-8")).decode("utf-8", "replace")


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


def _held(key, tool):
    with _LOCK:
        text = _OUTPUTS.get(key)
    if text is None:
        raise RecallError(f"there is no earlier {tool} output to continue for these arguments",
                          "call it again with offset=0 (that runs it again)")
    return text


def _json(obj):
    return json.dumps(obj, indent=1, ensure_ascii=False, default=str)


def _limit(limit):
    if not 1 <= limit <= MAX_LIMIT:
        raise RecallError(f"limit must be between 1 and {MAX_LIMIT}")
    return limit


def _argv(command):
    try:
        return shlex.split(command)
    except ValueError as exc:
        raise RecallError(f"cannot split the command: {exc}", "check its quotes") from None


# -- the tools: each opens, makes one core call, formats, bounds ---------------------------------

def recall_search(query: str, limit: int = 10, mode: Literal["auto", "keyword", "semantic", "hybrid"] = "auto",
                  offset: int = 0) -> str:
    """Search my notes (runbooks, incidents, decisions, code docs). Use it FIRST for any question
    about my systems, past incidents or how something is done here, and instead of grep/cat/find
    over the notes folders. Identifiers (INC-10963, hostnames, error codes) match exactly and rank
    first. Returns JSON: `access` (the access block of any cluster/host/account the query names —
    use it with recall_access_exec) and `hits` (relpath, line, breadcrumb, snippet, date). Next:
    recall_read with path='source:relpath:line' for the full section."""
    from .search import search
    with _opened(readonly=True, notes=True) as (cfg, con):
        result = search(con, cfg, query, n=_limit(limit), mode=mode)
        text = _json(result.public())
        return _page(_mask(_response_masker(con, cfg), text), offset, "recall_search")


def recall_read(path: str, offset: int = 0) -> str:
    """Read a note, or with 'relpath:LINE' just the heading section around that line, with line
    numbers. Use it after recall_search to see a hit in full. A page holds about 16k characters;
    when there is more, the response ends with the offset that continues it. Secrets files
    cannot be read. Next: act on what the note says — for a system it names, recall_access_find;
    for a credential, recall_secret_find."""
    from .read import read_note
    with _opened(readonly=True, notes=True) as (cfg, con):
        res = read_note(con, cfg, path, max_chars=READ_CHARS, offset=offset)
        head = f"{res.source}:{res.relpath} lines {res.start_line}-{res.end_line} of {res.range_end}\n"
        tail = ("" if res.next_offset is None else
                f"… more: call recall_read with path={path!r} and offset={res.next_offset}\n")
        return _page(_mask(_response_masker(con, cfg), head + res.text + tail), 0, "recall_read")


def recall_secret_find(query: str, limit: int = 10) -> str:
    """Find credentials by what they are for (service, environment, kind, username, url, tags,
    notes) — never by value: values are never shown. Use it when a task needs a token, password
    or key. Returns JSON metadata with each id and its `use` line. Next: recall_secret_show for
    one id, then recall_secret_command to get the command line that uses it."""
    from . import vault
    with _opened() as (cfg, con):
        found = vault.find(con, query, limit=_limit(limit), cfg=cfg)
        text = _json(found) if found else (f"no secrets match {query!r}: try the service, kind or "
                                           "environment words, e.g. 'jira token'")
        return _page(_mask(_response_masker(con, cfg), text), 0, "recall_secret_find")


def recall_secret_show(id: str) -> str:
    """One credential's metadata: service, environment, username, url, notes, its `use` line,
    the environment variables it is injected as, and when it was last verified. Never the value.
    Use it to learn which variable a command should name. Next: recall_secret_command with this
    id (and your command) to get the line to run."""
    from . import vault
    with _opened() as (cfg, con):
        return _page(_mask(_response_masker(con, cfg), _json(vault.show(con, id))), 0, "recall_secret_show")


def recall_secret_command(id: str, command: str = "") -> str:
    """The one shell line that runs your command with this credential injected into its
    environment (or stdin), and its output masked. Use it whenever a command needs a secret:
    write the command naming the variable (e.g. curl -H "Authorization: Bearer $JIRA_API_TOKEN" …;
    recall_secret_show lists the variables). Never put a value in a command yourself. Empty
    command: the secret's own `use` line. Next: run the returned line exactly as given in your
    shell."""
    from . import vault
    with _opened() as (cfg, con):
        line = vault.command_line(con, id, command or None)
        text = f"{line}\n\nRun exactly this line in a shell; the value is injected and masked in its output.\n"
        return _mask(_response_masker(con, cfg), text)


def _entries(cfg, con):
    from . import inventory
    if not cfg.inventory:
        raise RecallError("no inventory files configured",
                          "add 'inventory: [~/notes/inventory.yaml]' to the config")
    return inventory.load_inventory(cfg, con)


def recall_access_find(query: str, limit: int = 10) -> str:
    """Find how to reach a cluster, host, account, VPN or service: exact id, name or alias first,
    then entries whose tags, notes or environment match. Use it before touching any remote system.
    Returns JSON entries, each with its access `block` (setup steps, prerequisites, verify command,
    last verified). Next: recall_access_show for one entry, or recall_access_exec to run a command."""
    from . import inventory
    with _opened() as (cfg, con):
        found = inventory.find(_entries(cfg, con), query)[:_limit(limit)]
        text = (_json([inventory.describe(con, e) for e in found]) if found
                else f"no inventory entries match {query!r}")
        return _page(_mask(_response_masker(con, cfg), text), 0, "recall_access_find")


def recall_access_show(id: str) -> str:
    """One inventory entry as JSON: kind, environment, account, prerequisites (requires), setup
    steps (access), linked secrets, verify command, notes, and when it was last verified. Use it
    to see how a system is reached before running anything there. Next:
    recall_access_exec with this id to run a command there."""
    from . import inventory
    with _opened() as (cfg, con):
        entry = inventory.get_entry(_entries(cfg, con), id)
        text = _json(inventory.describe(con, entry))
        return _page(_mask(_response_masker(con, cfg), text), 0, "recall_access_show")


def recall_access_exec(id: str, command: str = "", offset: int = 0) -> str:
    """Run one command against an inventory entry: recall checks its prerequisites (e.g. the VPN),
    runs its setup steps in a clean shell, injects its linked secrets, runs the command and masks
    the output. Use it for every command against a cluster, host or account — it is the only way
    to reach them. Empty command: the entry's verify command. Returns the exit code, stdout and
    stderr (masked; long output pages by offset, without re-running). Runs up to 5 minutes, then
    is killed (exit 124). Next: on 'prerequisite … is down', ask the user to connect it (do not
    debug credentials); after an auth error (401, 403, expired), run recall_verify."""
    from .access import exec_entry
    key = ("recall_access_exec", id, command)
    if offset:
        return _page(_held(key, "recall_access_exec"), offset, "recall_access_exec", key)
    argv = _argv(command) if command.strip() else None
    with _opened() as (cfg, con):
        result = exec_entry(con, cfg, id, argv, timeout=EXEC_TIMEOUT)
        lines = [f"exit code: {result.code}" + (f" (timed out after {EXEC_TIMEOUT:g}s)" if result.timed_out else "")]
        lines += [f"left out: {step} ({why})" for step, why in result.left_out]
        lines += ["--- stdout ---", result.stdout.decode("utf-8", "replace").rstrip("\n"),
                  "--- stderr ---", result.stderr.decode("utf-8", "replace").rstrip("\n")]
        text = _mask(_response_masker(con, cfg), "\n".join(lines) + "\n")
        return _page(text, 0, "recall_access_exec", key)


def recall_verify(id: str = "", offset: int = 0) -> str:
    """Check that credentials and access entries still work, by running each one's read-only
    proof (only commands recall's guard allows). Use it before a task that spans several systems
    and after any authentication error (401, 403, expired token). Returns JSON per entry: status
    (ok, stale, unreachable, missing, skipped, error) and the reason. Next: act on each reason
    (ask the user to log in, renew or connect) rather than retrying or debugging credentials."""
    key = ("recall_verify", id)
    if offset:
        return _page(_held(key, "recall_verify"), offset, "recall_verify", key)
    from .verify import run_verify
    ids = id.replace(",", " ").split() or None
    with _opened() as (cfg, con):
        report = run_verify(con, cfg, ids=ids)
        text = _mask(_response_masker(con, cfg), _json(report.public()))
        return _page(text, 0, "recall_verify", key)


TOOLS = [recall_search, recall_read, recall_secret_find, recall_secret_show, recall_secret_command,
         recall_access_find, recall_access_show, recall_access_exec, recall_verify]
TITLES = {"recall_search": "Search my notes", "recall_read": "Read a note section",
          "recall_secret_find": "Find a credential", "recall_secret_show": "Show a credential's metadata",
          "recall_secret_command": "Command line that uses a credential",
          "recall_access_find": "Find how to reach a system", "recall_access_show": "Show an access entry",
          "recall_access_exec": "Run a command on a system", "recall_verify": "Verify access and credentials"}


# -- the SDK side ---------------------------------------------------------------------------------

def _annotations(name):
    from mcp.types import ToolAnnotations
    exec_ = name == "recall_access_exec"
    return ToolAnnotations(title=TITLES[name], read_only_hint=not exec_, destructive_hint=exec_,
                           idempotent_hint=not exec_,
                           open_world_hint=name in ("recall_access_exec", "recall_verify"))


def _as_tool(fn):
    """fn with RecallError → ToolError (so its text reaches the agent) and documented arguments."""
    import functools
    from typing import Annotated
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    @functools.wraps(fn)
    def tool(**kwargs):
        try:
            return fn(**kwargs)
        except RecallError as exc:
            raise ToolError(str(exc)) from None

    sig = inspect.signature(fn)
    params = [p.replace(annotation=Annotated[p.annotation, Field(
        description=TOOL_ARG_DOCS.get((fn.__name__, p.name), ARG_DOCS[p.name]))])
        for p in sig.parameters.values()]
    tool.__signature__ = sig.replace(parameters=params)
    return tool


def build_server():
    """The MCPServer with every tool registered; marks this process's access-log entries as mcp."""
    from mcp.server.mcpserver import MCPServer
    from . import __version__
    from .instructions import RULES
    audit.CALLER["name"] = "mcp"
    server = MCPServer(name="recall", version=__version__, instructions=RULES, log_level="WARNING")
    for fn in TOOLS:
        server.add_tool(_as_tool(fn), name=fn.__name__, title=TITLES[fn.__name__],
                        description=" ".join(fn.__doc__.split()), annotations=_annotations(fn.__name__),
                        structured_output=False)
    return server


def serve() -> int:
    """`recall mcp`: serve on stdio until the client closes it."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        raise MissingExtra("mcp", "the MCP server") from None
    build_server().run("stdio")
    return 0
