"""The guard's option parser (`_Flags` → ordered (name, value) items, or `_Deny`) and the host, port and number shapes."""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass


class _Deny(Exception):
    def __init__(self, rule: str, reason: str):
        super().__init__(reason)
        self.rule, self.reason = rule, reason


# ---------------------------------------------------------------- option parsing

@dataclass(frozen=True)
class _Flags:
    """One tool's option grammar: which names take values, short letters, and named denials."""

    tool: str
    values: frozenset[str]
    bools: frozenset[str]
    short: dict[str, str]                 # letter -> canonical name
    denied: dict[str, tuple[str, str]]    # canonical name -> (rule, reason)
    long_equals: bool                     # accepts --opt=value (argparse, pflag; not curl)
    short_equals: bool                    # -o=value means "value" (argparse, pflag; not getopt)


def _deny_map(rule: str, names: str, reason: str) -> dict:
    return {n: (rule, reason) for n in names.split()}


def _parse(spec: _Flags, args: list[str], stop_at: int | None = None,
           spans: list | None = None) -> list[tuple[str, str | None]]:
    """Split args into ordered items: (option name, value|None) or ("", positional); after `stop_at` positionals
    all is positional (ssh's remote command). `spans` gets each item's (first arg, last arg, offset of its letter)."""
    items: list[tuple[str, str | None]] = []
    spans = [] if spans is None else spans
    unknown = f"{spec.tool}.flag"
    i, rest = 0, False

    def add(name: str, value: str | None, first: int, letter: int = 0) -> None:
        if name and (not value or value.startswith("-")) and name not in spec.bools:
            raise _Deny(f"{spec.tool}.value", f"{name} needs a value that does not start with '-'")
        items.append((name, value))
        spans.append((first, i - 1, letter))

    while i < len(args):
        tok = args[i]
        i += 1
        if rest or not tok.startswith("-"):
            rest = rest or (stop_at is not None and len(_positionals(items)) >= stop_at)
            add("", tok, i - 1)
            continue
        if tok in ("-", "--"):
            raise _Deny(unknown, f"{tok!r} is not accepted by the {spec.tool} allow-list")
        long = tok.startswith("--")
        for j in range(0 if long else 1, 1 if long else len(tok)):    # a long option, or each letter of -abc
            name, eq, value = tok.partition("=") if long else (spec.short.get(tok[j], ""), "", tok[j + 1:])
            if name in spec.denied:
                raise _Deny(*spec.denied[name])
            if name in spec.bools and not eq:
                add(name, None, i - 1, j)
                continue
            if name not in spec.values:
                raise _Deny(unknown, f"{spec.tool} option {tok!r} is not on the allow-list" if long else
                            f"{spec.tool} flag -{tok[j]} (in {tok!r}) is not on the allow-list")
            if eq and not spec.long_equals:
                raise _Deny(unknown, f"{spec.tool} has no --opt=value form: {tok!r}")
            first = i - 1
            if not (eq or value):
                value = args[i] if i < len(args) else None
                i += 1
            elif not long and spec.short_equals and value[0] == "=":
                value = value[1:]
            add(name, value, first, j)
            break
    return items


def _positionals(items) -> list[str]:
    return [v for n, v in items if not n]


def _options(items) -> dict[str, str]:
    """Last value wins, as in every parser here; bools map to ''."""
    return {n: (v or "") for n, v in items if n}


def _only(tool: str, opts: dict[str, str], allowed: set, where: str) -> None:
    for name in opts:
        if name not in allowed:
            raise _Deny(f"{tool}.flag", f"{name} is not allowed with {where}")


_HOST = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?$")
_NUMBER = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
_RESOURCE = re.compile(r"^[A-Za-z0-9_.:/,-]+$")


def _is_host(text: str) -> bool:
    try:
        return bool(_HOST.match(text)) or ipaddress.IPv6Address(text) is not None
    except ValueError:
        return False


def _port_ok(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= 65535
