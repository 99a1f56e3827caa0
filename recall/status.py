"""Stored verify results: record one, and say it the way a person reads it ("ok 2h ago")."""
from __future__ import annotations

import time


def record(con, target: str, status: str, reason: str, command: str) -> None:
    from .setupvars import scrub_inline  # a literal token in a proof command is not stored
    reason, command = scrub_inline(reason), scrub_inline(command)
    con.execute("INSERT INTO verify_results(target, status, reason, command, at) VALUES (?,?,?,?,?) "
                "ON CONFLICT(target) DO UPDATE SET status=excluded.status, reason=excluded.reason, "
                "command=excluded.command, at=excluded.at", (target, status, reason, command, time.time()))


def ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return "just now"


def describe(con, target: str, now: float | None = None) -> str:
    """'ok 2h ago', 'stale 1d ago: log in …', or 'never'."""
    row = con.execute("SELECT status, reason, at FROM verify_results WHERE target=?", (target,)).fetchone()
    if row is None:
        return "never"
    text = f"{row['status']} {ago((now or time.time()) - row['at'])}"
    return text if row["status"] == "ok" or not row["reason"] else f"{text}: {row['reason']}"
