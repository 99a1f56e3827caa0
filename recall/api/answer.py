"""What every api call returns (an Answer: its JSON shape, its text, its notices, its exit code) and
how it is made: config and DB opened, the door bound to that vault, every string scrubbed."""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field

from ..errors import RecallError

LONG_ARGUMENT = 256         # an argument longer than this (no path or id is) is echoed as …
ECHO_CHARS = 40             # … its first 40 characters + '…'
ERROR_CHARS = 4_000         # and no error is longer than this, whatever it quotes


@dataclass
class Answer:
    """One verb's or tool's answer, every string already through the door: `data` is its --json
    shape, `shown` what the CLI prints, `notices` one line each for stderr, `code` the exit code;
    `extra`: what else a face may say (a listing's total, verify's kinds; `own`: its text and data are recall's
    sentences, no note, entry or value, so a face may name its --config in the commands they hand out),
    never printed as is."""
    data: object
    shown: str = ""
    notices: list = field(default_factory=list)
    code: int = 0
    extra: dict = field(default_factory=dict)

    def to_dict(self):
        return self.data

    def text(self) -> str:
        return self.shown


def answer(data, shown: str = "", notices=(), code: int = 0, **extra) -> Answer:
    """An Answer of what a verb found, scrubbed by the door (bound to this call's vault by `opened`)."""
    from ..vault import door
    data, shown, notices, extra = door.scrub_data([data, shown, list(notices), extra])   # one look
    return Answer(data, shown, notices, code, extra)


@contextlib.contextmanager
def opened(config: str | None = None, *, readonly: bool = False, strict: bool = True, connect: bool = True,
           need_config: bool = True, need_sources: bool = False, vectors=False):
    """(cfg, con) for one call, the door bound to its vault, closed after. `strict=False`: a vault that
    cannot be opened here does not stop the output (doctor must say why); `connect=False`: no DB (con
    is None); `vectors`: the DB opened to search vectors (a bool, or what the config decides:
    vectors(cfg)). An error raised inside leaves through the door too."""
    from .. import db
    from ..config import load_config
    from ..vault import door
    checks = sys.modules.get(__name__.split(".")[0] + ".inventory")
    if checks is not None:  # prerequisites are checked once per call (the MCP server lives for many)
        checks.forget_checks()
    cfg = load_config(config)
    if need_sources:
        cfg.require_sources()
    elif need_config:
        cfg.require_file()
    if callable(vectors):
        vectors = vectors(cfg)
    con = db.connect(cfg.db_path, readonly=readonly, vectors=vectors) if connect else None
    try:
        with door.bound(cfg, con, strict=strict):
            try:
                yield cfg, con
            except RecallError as exc:
                _scrub_error(exc)
                raise
    finally:
        if con is not None:
            con.close()


@contextlib.contextmanager
def looking(config: str | None = None):
    """The door bound to `config`'s vault, its DB only looked at (never created, migrated or written):
    an answer that quotes the user's files (doctor's) is masked by that vault's values. Unbound when
    the config or the DB does not open: the answer says why."""
    import sqlite3

    from .. import db
    from ..config import load_config
    from ..vault import door
    try:
        cfg = load_config(config)
        con = db.look(cfg.db_path) if cfg.db_path.is_file() else None
    except (RecallError, sqlite3.Error, OSError):
        con = cfg = None
    if cfg is None or con is None:
        yield
        return
    con.row_factory = sqlite3.Row
    try:
        with door.bound(cfg, con, strict=False):
            yield
    finally:
        con.close()


def _scrub_error(exc: RecallError) -> None:
    """The error's message and hint through the door, in place (its type and exit code stay)."""
    from ..vault import door
    try:
        message, hint = door.scrub(exc.message), exc.hint and door.scrub(exc.hint)
    except RecallError:                   # the vault cannot be opened: the rules and literals still apply
        message, hint = door.scrub_inline(exc.message), exc.hint and door.scrub_inline(exc.hint)
    exc.message, exc.hint, exc.args = message, hint, (message,)


def error_text(exc, arguments=()):
    """(the RecallError a user sees, its one line) for `exc`, or None for a bug (it keeps its
    traceback): a storage fault said in one line, long arguments it echoes cut, through the door."""
    from ..db import explain
    from ..vault import door
    err = explain(exc)
    if err is None:
        return None
    text = str(err)
    for value in sorted({a for a in arguments if len(a) > LONG_ARGUMENT}, key=len, reverse=True):
        short = value[:ECHO_CHARS] + "…"
        text = text.replace(value, short).replace(repr(value)[1:-1], short)
    text = " ".join(door.scrub(text).split())        # one line, whatever an id or a quoted text held
    return err, text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "…"


def heard(notify):
    """`notify` hearing each line through the door (None: nobody listens)."""
    from ..vault import door
    return None if notify is None else (lambda line: notify(door.scrub(line)))


def scrub(text: str) -> str:
    """A face's last step for text it put together itself: through the door (vault/door.py)."""
    from ..vault import door
    return door.scrub(text)


def scrub_typed(text: str, config: str | None = None) -> str:
    """Words the person typed, echoed by a usage error before any verb ran, through the door of the
    vault `config` names (a value typed where a number was wanted is masked as anywhere else); with no
    index or config to open, the inline rules only."""
    from ..db import explain
    from ..vault import door
    try:
        with opened(config, readonly=True, strict=False, need_config=False):
            return door.scrub(text)
    except Exception as exc:        # a storage fault or ours: the rules still apply
        if explain(exc) is None:
            raise
        return door.scrub_inline(text)
