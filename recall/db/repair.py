"""The quick check, and the rebuild that moves a damaged or foreign DB aside (a fault's one line is db.explain)."""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from .. import db
from ..errors import RecallError
from . import explain  # also imported from here (cli, mcp_server)

LEDGER_COLUMNS = "at, provider, model, kind, state, estimate, tokens, items, pid, run"


def quick_check(path) -> tuple:
    """(ok, detail) of `PRAGMA quick_check` and the schema version, without changing the file."""
    path = Path(path)
    if not path.exists():
        return True, "absent (the first 'recall index' creates it)"
    try:
        con = db.look(path)
        try:
            rows = [r[0] for r in con.execute("PRAGMA quick_check(5)")]
            version = db.schema_version(con, path)
        finally:
            con.close()
    except (sqlite3.Error, RecallError, OSError) as exc:
        return False, str(explain(exc, path) or exc)
    if rows != ["ok"]:
        found = [line.strip() for row in rows for line in str(row).splitlines()
                 if line.strip() and not line.startswith("*** in database")]
        return False, (f"damaged ({'; '.join(found[:2])}{'; …' if len(found) > 2 else ''}) — run "
                       "'recall index --full': it moves the file aside and rebuilds it, keeping the vault key")
    return True, f"quick_check ok, schema {version}"


def index_repairing(path, run, *, full: bool, vectors: bool = False, notify=None, holds_values=None):
    """run(connection) for `recall index`. With `full`, a DB found damaged or foreign by quick_check
    or by the run itself (damage inside a page) is moved aside and the run made again on a new one;
    `holds_values(con)` (the vault's) tells whether the old file held secrets."""
    if not full:
        return run(db.connect(path, vectors=vectors))
    try:
        ok, detail = quick_check(path)          # first: its stdlib connection closed before ours opens
        con = db.connect(path, vectors=vectors)
        if ok:
            try:
                return run(con)
            except Exception as exc:
                err = explain(exc)
                if not isinstance(err, db.BrokenDatabase):
                    raise
                why = err.why
        else:
            why = detail.split(" — ")[0].removeprefix(f"{path} is ")      # an error's own text names the file
        con.close()
    except db.BrokenDatabase as exc:
        why = exc.why
    return run(_rebuild(Path(path), why, vectors, notify or (lambda line: None), holds_values))


def _rebuild(path: Path, why: str, vectors: bool, say, holds_values):
    """Move the DB aside, open a new one, copy the token ledger over; say what happened."""
    moved = _move_aside(path)
    ledger, had_secrets = _salvage(moved, holds_values)
    con = db.connect(path, vectors=vectors)
    say(f"{path} was {why}: moved it to {moved.name} and rebuilding the index")
    if ledger is None:
        say("the token ledger could not be read from it: the embedding cap counts from 0 again")
    elif ledger:
        with db.transaction(con):
            con.executemany(f"INSERT INTO embed_ledger({LEDGER_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)", ledger)
        say(f"carried over the token ledger ({len(ledger)} request{'s' * (len(ledger) != 1)})")
    if had_secrets is not False:
        say("the vault in the new index is empty: run 'recall secret sync' again (the vault key is kept)")
    return con


def _move_aside(path: Path) -> Path:
    """Rename the DB and its -wal/-shm to recall.db.broken-<time>(-wal, -shm); returns the new name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = path.with_name(f"{path.name}.broken-{stamp}")
    n = 1
    while moved.exists():
        n += 1
        moved = path.with_name(f"{path.name}.broken-{stamp}-{n}")
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        if side.exists():
            os.replace(side, str(moved) + suffix)
    os.replace(path, moved)
    return moved


def _salvage(moved: Path, holds_values) -> tuple:
    """(ledger rows or None when unreadable, whether it held secrets: True/False/None unknown)."""
    try:
        con = db.look(moved)
    except sqlite3.Error:
        return None, None
    try:
        try:
            rows = [tuple(r) for r in con.execute(f"SELECT {LEDGER_COLUMNS} FROM embed_ledger")]
            # a reservation of the old file cannot be settled any more: it stays counted, unconfirmed
            ledger = [r[:4] + ("unconfirmed" if r[4] == "reserved" else r[4],) + r[5:] for r in rows]
        except sqlite3.Error as exc:
            ledger = [] if "no such table" in str(exc) else None     # another program's file: none
        try:
            had = holds_values(con) if holds_values is not None else None
        except sqlite3.Error as exc:
            had = False if "no such table" in str(exc) else None
        return ledger, had
    finally:
        con.close()
