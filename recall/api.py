"""The library layer both faces call: what a failure says, the same for the CLI and the MCP server."""
from __future__ import annotations

LONG_ARGUMENT = 256         # an argument longer than this (no path or id is) is echoed as …
ECHO_CHARS = 40             # … its first 40 characters + '…'
ERROR_CHARS = 4_000         # and no error is longer than this, whatever it quotes


def bound_echoes(text: str, arguments: list) -> str:
    """`text` with every long argument it repeats (as given, or as repr shows it) cut to a prefix
    + '…', and the whole cut at ERROR_CHARS: an error never hands a 100,000-character id back."""
    for value in sorted({a for a in arguments if len(a) > LONG_ARGUMENT}, key=len, reverse=True):
        short = value[:ECHO_CHARS] + "…"
        text = text.replace(value, short).replace(repr(value)[1:-1], short)
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "…"
