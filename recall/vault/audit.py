"""The access log: who (cli or mcp, and the parent process) touched which id, how, and the outcome."""
from __future__ import annotations

import os
import time

CALLER = {"name": "cli"}        # the MCP server sets "mcp" at start-up


def parent_name() -> str:
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        import subprocess
        try:
            out = subprocess.run(["ps", "-o", "comm=", "-p", str(ppid)], capture_output=True,
                                 text=True, timeout=2).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        return os.path.basename(out) or str(ppid)


def log(con, verb: str, target: str, *, argv: str, verdict: str, exit_code=None) -> int:
    """Append one row (autocommitted outside a transaction), its text through the door; its id."""
    target, argv, verdict = _stored(target), _stored(argv), _stored(verdict)
    return con.execute("INSERT INTO access_log(at, caller, parent, verb, target, argv, verdict, exit_code) "
                       "VALUES (?,?,?,?,?,?,?,?)",
                       (time.time(), CALLER["name"], parent_name(), verb, target, argv, verdict, exit_code)).lastrowid


def finish(con, row: int, *, argv: str, verdict: str, exit_code=None) -> None:
    """How a run logged before it started (verdict 'running') ended."""
    con.execute("UPDATE access_log SET argv=?, verdict=?, exit_code=? WHERE id=?",
                (_stored(argv), _stored(verdict), exit_code, row))


def _stored(text: str) -> str:
    """`text` through the door, a byte of an argument that is not UTF-8 (held by os as a lone
    surrogate, which SQLite text cannot hold) written as \\xff."""
    from .door import scrub
    return scrub(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def entries(con, target: str | None = None, limit: int = 50) -> list:
    where, args = (" WHERE target=?", [target]) if target else ("", [])
    rows = con.execute("SELECT at, caller, parent, verb, target, argv, verdict, exit_code FROM access_log"
                       f"{where} ORDER BY id DESC LIMIT ?", args + [limit]).fetchall()
    return [{**dict(r), "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["at"]))}
            for r in reversed(rows)]
