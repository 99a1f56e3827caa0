"""The library layer both faces call: config and DB opened once, the vault, inventory and remotes
wired into index, search, read and verify here; what a failure says, the same for the CLI and MCP."""
from __future__ import annotations

import contextlib

from .errors import RecallError

LONG_ARGUMENT = 256         # an argument longer than this (no path or id is) is echoed as …
ECHO_CHARS = 40             # … its first 40 characters + '…'
ERROR_CHARS = 4_000         # and no error is longer than this, whatever it quotes


def bound_echoes(text: str, arguments: list) -> str:
    """`text` with every long argument it repeats (as given, or as repr shows it) cut to a prefix + '…',
    and the whole cut at ERROR_CHARS."""
    for value in sorted({a for a in arguments if len(a) > LONG_ARGUMENT}, key=len, reverse=True):
        short = value[:ECHO_CHARS] + "…"
        text = text.replace(value, short).replace(repr(value)[1:-1], short)
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "…"


@contextlib.contextmanager
def opened(config: str | None = None, *, readonly: bool = False, notes: bool = False):
    """(cfg, con) for one verb or tool call, closed after; `notes`: a config without sources is the
    error ("no config file" says more than "no index")."""
    from . import db
    from .config import load_config
    cfg = load_config(config)
    if notes:
        cfg.require_sources()
    con = db.connect(cfg.db_path, readonly=readonly)
    try:
        yield cfg, con
    finally:
        con.close()


def index(cfg, *, full: bool = False, only: str | None = None, embed: bool = True, prune: bool = False,
          progress=None, notify=None):
    """`recall index`: the vault's redactor and values wired in; `--full` rebuilds a broken DB."""
    from .db.repair import index_repairing
    from .notes.index import run_index
    from .vault import store as vault
    cfg.require_sources()
    embed = embed and cfg.embedding.provider != "none"
    return index_repairing(cfg.db_path, lambda con: run_index(
        con, cfg, full=full, only=only, progress=progress, embed=embed, notify=notify,
        redactor=vault.redactor, load_values=vault.load_values, prune=prune),
        full=full, vectors=embed, notify=notify, holds_values=vault.holds_values)


def watcher(cfg=None, report=lambda kind, result: None):
    """The sources followed (watch.Watcher) with the vault's redactor and values, as `index` has them;
    the config (`cfg`'s file; None: RECALL_CONFIG or the default) loaded again when it changes or is fixed."""
    from .config import load_config
    from .notes.watch import Watcher
    from .vault import store as vault
    path = None if cfg is None or cfg.path is None else str(cfg.path)
    return Watcher(cfg, reload=lambda: load_config(path), redactor=vault.redactor,
                   load_values=vault.load_values, report=report)


def not_following(cfg, watchers) -> tuple:
    """(stale source names, notices) for a search answer while a watcher (recall mcp's) cannot follow
    the sources — every source, and why — and for each source folder not there."""
    from .notes.walk import missing_sources
    said = [why for why in (w.trouble() for w in watchers) if why]
    notices = [f"results may be behind the notes: they are not being followed right now ({why}); "
               "following resumes by itself" for why in said]
    return [s.name for s in cfg.sources] if said else [], notices + missing_sources(cfg.sources)


def _read_remote(cfg, name: str, target: str, **kw) -> dict:
    from .remote import read_remote  # loaded only for a NAME:path on a configured remote
    return read_remote(cfg, name, target, **kw)


def read(con, cfg, target: str, *, max_chars: int, offset: int = 0):
    """A note or section, redacted by the vault's values; NAME:path reads a remote's."""
    from .notes.read import read_note
    from .vault.store import redactor
    return read_note(con, cfg, target, redactor=redactor, max_chars=max_chars, offset=offset,
                     read_remote=_read_remote)


def search_hooks(cfg, *, local: bool = False):
    """The vault, and (unless `local`) the inventory's pins and the remotes when the config names them."""
    from .notes.search import SearchHooks
    from .vault import store as vault
    ask = pins = None
    if cfg.remotes and not local:
        from .remote import ask_remotes as ask
    if cfg.inventory and not local:
        from .inventory import pin_access as pins
    return SearchHooks(ask_remotes=ask, pins=pins, require_open=vault.require_open, load_values=vault.load_values)


def entries(cfg, con) -> list:
    """The inventory's entries (a broken one carries its error); none configured is the error."""
    from . import inventory
    if not cfg.inventory:
        raise RecallError("no inventory files configured", "add 'inventory: [~/notes/inventory.yaml]' to the config")
    return inventory.load_inventory(cfg, con)


def verify(con, cfg, ids=None, *, dry_run: bool = False, timeout: float | None = None):
    from .verify import DEFAULT_TIMEOUT, run_verify
    return run_verify(con, cfg, ids or None, dry_run=dry_run, timeout=DEFAULT_TIMEOUT if timeout is None else timeout)
