"""The read-only verdict for a proof command: parse it, allow only known argv shapes, deny the rest.

`verdict_for(command)` never runs anything. It lexes the raw string (quote-aware) and denies any
shell syntax, splits it with `shlex`, denies wrappers / env prefixes / unexpected paths, then
matches the argv against one allow-listed shape per tool (in `guard_tools.py`). Anything not
explicitly allowed is denied; `RULES` maps every rule id a `Verdict` can carry to one line for
`verify --dry-run`.
"""
from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
TYPE_CHECKING = False
if TYPE_CHECKING:                  # annotations only: typing costs ms at start-up
    from typing import List, Tuple

from .guard_tools import TOOL_RULES, TOOLS, _curl, _Deny

MAX_COMMAND_CHARS = 4096

RULES: dict = {
    # lexer: shell syntax in the raw string (argv is () for these)
    "empty": "deny: no command",
    "too-long": f"deny: longer than {MAX_COMMAND_CHARS} characters",
    "newline": "deny: newline or carriage return anywhere (a second command)",
    "line-continuation": "deny: backslash-newline line continuation",
    "control-char": "deny: control or invisible characters",
    "escape": "deny: backslash escapes outside single quotes (shells and shlex disagree on them)",
    "shell-metachar": "deny: unquoted ; & | < > ( ) ^ (lists, pipes, redirection, subshells)",
    "shell-expansion": "deny: $ ` ! unquoted or in double quotes (variables, command substitution)",
    "glob": "deny: unquoted * ? [ ] { } (globs and brace expansion)",
    "tilde": "deny: unquoted ~ (home-directory expansion)",
    "comment": "deny: unquoted # (comment)",
    "unbalanced-quote": "deny: a quote is never closed",
    # argv
    "env-assign": "deny: VAR=value prefix",
    "wrapper": "deny: a program that runs another program (env, sh, sudo, xargs, find -exec…)",
    "path": "deny: argv[0] is a path that is not the tool found on PATH",
    "unknown-tool": "deny: tool not on the allow-list",
    **TOOL_RULES,                  # each tool's allowed shapes and denials
}



@dataclass(frozen=True)
class Verdict:
    """Whether a command may run, the rule that decided, and why."""

    allow: bool
    rule: str
    reason: str
    argv: tuple = field(default=())

    @property
    def verdict(self) -> str:
        return "allow" if self.allow else "deny"

    @property
    def tool(self) -> str:
        """The allow-listed tool, however argv[0] spelled it (`/usr/bin/curl` is curl); '' if denied."""
        return self.argv[0].rsplit("/", 1)[-1] if self.allow and self.argv else ""


# ---------------------------------------------------------------- lexer

_METACHARS = frozenset(";&|<>()^")
_EXPANSION = frozenset("$`!")
_GLOB = frozenset("*?[]{}")


def _lex(command: str) -> None:
    """Raise _Deny for the first piece of shell syntax a shell would act on."""
    quote = None
    for i, ch in enumerate(command):
        at = f"at column {i + 1}"
        if ch == "\\" and quote != "'":
            if command[i + 1:i + 2] in ("\n", "\r"):
                raise _Deny("line-continuation", f"backslash-newline {at} continues the line")
            raise _Deny("escape", f"backslash {at} is an escape outside single quotes")
        if ch in "\r\n":
            raise _Deny("newline", f"a newline or carriage return {at} would start a new command")
        if ch not in " \t" and not ch.isprintable():
            raise _Deny("control-char", f"control or invisible character {ch!r} {at}")
        if quote == "'":
            quote = None if ch == "'" else quote
        elif quote == '"':
            if ch == '"':
                quote = None
            elif ch in _EXPANSION:
                raise _Deny("shell-expansion", f"{ch!r} {at} still expands inside double quotes")
        elif ch in "'\"":
            quote = ch
        elif ch in _METACHARS:
            raise _Deny("shell-metachar", f"unquoted {ch!r} {at} is shell syntax")
        elif ch in _EXPANSION:
            raise _Deny("shell-expansion", f"unquoted {ch!r} {at} is a shell expansion")
        elif ch in _GLOB:
            raise _Deny("glob", f"unquoted {ch!r} {at} is a glob or brace expansion")
        elif ch == "~":
            raise _Deny("tilde", f"unquoted '~' {at} expands to a home directory")
        elif ch == "#":
            raise _Deny("comment", f"unquoted '#' {at} can start a comment")
    if quote:
        raise _Deny("unbalanced-quote", f"the {quote} quote is never closed")


# ---------------------------------------------------------------- argv level

_WRAPPERS = frozenset(
    "env timeout nice nohup xargs sh bash zsh dash ksh mksh fish csh tcsh busybox eval exec "
    "command builtin sudo doas su runuser pkexec time stdbuf watch parallel ionice chroot setsid "
    "unshare nsenter script strace ltrace flock taskset chrt systemd-run caffeinate".split())
_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete"})


def _check_argv(argv: List[str], which, url_hosts: tuple, credential: bool) -> Tuple[str, str]:
    head = argv[0]
    if "=" in head:
        raise _Deny("env-assign", f"{head.split('=')[0]}=… sets the environment of the command")
    base = head.rsplit("/", 1)[-1]
    if base == "sudo" and argv[1:] == ["-k", "true"]:
        pass
    elif base in _WRAPPERS:
        raise _Deny("wrapper", f"{base} runs another program, which the guard cannot see")
    elif base == "find" and _FIND_ACTIONS.intersection(argv[1:]):
        raise _Deny("wrapper", "find -exec/-ok/-delete runs programs or deletes files")
    if "/" in head:
        if base == "tcp":
            raise _Deny("path", "tcp is recall's builtin and has no path")
        try:
            found = which(base) if base else None
        except Exception:  # a broken lookup must fail closed
            found = None
        if not found or found != head or not os.path.isabs(found):
            raise _Deny("path", f"{head} is not the {base or 'tool'} found on PATH ({found or 'none'})")
    if base == "curl":
        return _curl(argv, url_hosts, credential)
    if base not in TOOLS:
        raise _Deny("unknown-tool", f"{base or head!r} is not on the allow-list")
    return TOOLS[base](argv)


def verdict_for(command: str, *, url_hosts: tuple = (), credential: bool = False,
                which=shutil.which) -> Verdict:
    """Decide whether `command` may run in a verify sweep; never raises for bad input."""
    argv: Tuple[str, ...] = ()
    try:
        if not isinstance(command, str) or not command.strip():
            raise _Deny("empty", "there is no command")
        if len(command) > MAX_COMMAND_CHARS:
            raise _Deny("too-long", f"the command is longer than {MAX_COMMAND_CHARS} characters")
        _lex(command)
        try:
            argv = tuple(shlex.split(command, posix=True))
        except ValueError as exc:  # the lexer should have caught it; fail closed anyway
            raise _Deny("unbalanced-quote", f"the command does not parse: {exc}")
        if not argv:
            raise _Deny("empty", "there is no command")
        hosts = (url_hosts,) if isinstance(url_hosts, str) else tuple(url_hosts or ())
        rule, reason = _check_argv(list(argv), which, hosts, bool(credential))
        return Verdict(True, rule, reason, argv)
    except _Deny as deny:
        return Verdict(False, deny.rule, deny.reason, argv)
