"""The verdict for a proof command or a setup step: only known read-only argv shapes pass, a denial says what would; nothing runs."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
from dataclasses import dataclass

from .classify import classify
from .cloud import CLOUD_RULES, CLOUD_TOOLS, SUDO_FORMS
from .parse import _Deny
from .tools import TOOL_RULES, Binding, _curl, _kubectl, _ssh, binding_for, curl_headers, run_form

__all__ = ["MAX_COMMAND_CHARS", "RULES", "Binding", "Verdict", "binding_for", "classify", "curl_headers",
           "run_form", "setup_verdict", "verdict_for"]

MAX_COMMAND_CHARS = 4096

RULES: dict = {
    # lexer: shell syntax in the raw string (argv is () for these)
    "empty": "deny: no command",
    "too-long": f"deny: longer than {MAX_COMMAND_CHARS} characters",
    "newline": "deny: newline or carriage return anywhere (a second command)",
    "line-continuation": "deny: backslash-newline line continuation",
    "control-char": "deny: a control or format character anywhere (VT, FF, ESC, NUL, zero-width, bidi "
                    "overrides …): shells and the guard would read the word differently",
    "unicode-space": "deny: a space or blank other than ASCII space and tab anywhere (NBSP, U+2000–U+200A, "
                     "U+2028, U+3000, Hangul filler …): it looks like a space but stays inside the word",
    "escape": "deny: backslash escapes outside single quotes (a literal \\X in double quotes is fine "
              "when X is not $ ` \" \\)",
    "shell-metachar": "deny: unquoted ; & | < > ( ) ^ (lists, pipes, redirection, subshells)",
    "shell-expansion": "deny: $ ` ! unquoted or in double quotes (variables, command substitution)",
    "glob": "deny: unquoted * ? [ ] { } (globs and brace expansion; tcp [IPv6]:PORT is fine)",
    "tilde": "deny: unquoted ~ (home-directory expansion) except ~/ as ssh -i's KEY",
    "comment": "deny: unquoted # (comment)",
    "unbalanced-quote": "deny: a quote is never closed",
    # argv
    "env-assign": "deny: VAR=value prefix",
    "wrapper": "deny: a program that runs another program (env, sh, sudo, xargs, find -exec…)",
    "path": "deny: argv[0] is a path that is not the tool found on PATH",
    "unknown-tool": "deny: tool not on the allow-list",
    **TOOL_RULES, **CLOUD_RULES,   # each tool's allowed shapes and denials
    # setup steps (an inventory entry's access:), judged by setup_verdict
    "setup.source": "allow: source FILE / . FILE of a file you own that group and others cannot write",
    "setup.export": "allow: export NAME=literal (no $, backticks or globs; ~/ after = is fine)",
    "setup.unset": "allow: unset NAME",
    "setup.source-path": "deny: source of a relative path (bash would search PATH for it)",
    "setup.source-file": "deny: source of a file that does not exist or is not a regular file",
    "setup.source-owner": "deny: source of a file another user owns",
    "setup.source-mode": "deny: source of a file group or others can write",
    "setup.export-name": "deny: inline export of a name that loads code, names a program to start, turns on "
                         "request logging or changes trust (LD_*, BASH_ENV, *PAGER, *EDITOR, LESSOPEN, "
                         "*DEBUG, CLOUDSDK_CORE_LOG_HTTP, SSL_CERT_*, proxies, endpoints …): set it in a file "
                         "you source",
    "setup.export-path": "deny: inline PATH / KUBECONFIG / AWS_CONFIG_FILE … naming a path that is not yours "
                         "alone (another owner, group/world-writable, relative or missing)",
    "setup.args": "deny: malformed source/export/unset arguments",
    "setup.context": "allow: kubectl config use-context X when every kubectl of the command gets --context X "
                     "in its place (the step itself never runs)",
    "setup.global-state": "deny: a step that switches state for every shell (kubectl config use-context, "
                          "az account set …): name the context in the proof instead",
    "setup.command": "deny: a setup step other than source, ., export NAME=literal, unset",
}

SETUP_FORM = ("source FILE or . FILE (absolute or ~/, yours, not writable by group or others), "
              "export NAME=literal, unset NAME")

_TOOLS = "kubectl, curl, ssh, aws, az, gcloud, true, tcp HOST:PORT, sudo -k true | -n true | -v"
# what a denial says is allowed instead: by rule, else by tool (_FORMS)
_INSTEAD = {
    "empty": "one read-only command, e.g. kubectl --context C get nodes, curl -s https://HOST/health, tcp HOST:PORT",
    "too-long": "one command of at most 4096 characters",
    "newline": "one command on one line (a folded `verify: >` block is joined into one line)",
    "line-continuation": "one command on one line (a folded `verify: >` block is joined into one line)",
    "control-char": "printable characters, words separated by plain spaces or tabs",
    "unicode-space": "words separated by plain ASCII spaces or tabs",
    "escape": "backslashes inside single quotes ('a\\b'), or \\X in double quotes where X is not $ ` \" \\",
    "shell-metachar": "one command, with ; & | < > ( ) ^ only inside quotes; several checks are several entries",
    "shell-expansion": "literal text ($ ` ! inside single quotes); a secret only as a curl header, "
                       "-H \"Authorization: Bearer $VAR\", which verify sends on stdin",
    "glob": "* ? [ ] { } inside quotes ('po*'); [IPv6] only as a URL's or tcp's host",
    "tilde": "~/ only as ssh -i ~/KEY or curl --cacert ~/FILE; elsewhere an absolute path",
    "comment": "# inside quotes",
    "unbalanced-quote": "every quote closed on the same line",
    "env-assign": "the variable set by a setup step of the entry (export NAME=literal), then the bare command",
    "wrapper": f"the tool itself: {_TOOLS}",
    "path": "the bare tool name, or exactly the path PATH finds for it",
    "unknown-tool": f"one of {_TOOLS}",
    "curl.insecure": "the same proof without -k (for a private CA: --cacert FILE)",
    "curl.redirect": "the same proof without -L, at the URL it ends on",
    "curl.host-header": "the proof without -H Host:, at the URL of the site itself",
    "curl.credential": "the secret as a header, -H \"Authorization: Bearer $VAR\" (verify sends it on stdin)",
    "curl.config": "every option on the command line",
    "kubectl.secret": "kubectl get of any other resource type (secret values are never a proof)",
    "kubectl.identity": "--context C to pick the cluster and user of your kubeconfig",
    "ssh.jump": "-J through an inventory host (its id, name, alias or ssh:// url host)",
    "aws.endpoint": "the service's own endpoint (drop --endpoint-url); the region with --region",
}
_FORMS = {
    "kubectl": "kubectl [--context C] [-n NS] get TYPE [NAME…] [-o json|yaml|wide|name|jsonpath=…] [-A] [-l SEL], "
               "get --raw /readyz|/healthz|/livez, top nodes|pods, version, cluster-info, api-resources, "
               "auth whoami, auth can-i VERB RESOURCE, config current-context|get-contexts",
    "curl": TOOL_RULES["curl.get"].split(": ", 1)[1],
    "ssh": TOOL_RULES["ssh.probe"].split(": ", 1)[1],
    "aws": "aws sts get-caller-identity or aws s3 ls [s3://BUCKET[/PREFIX]], with [--profile X] [--region X] "
           "[--output json|text|table] [--query Q] [--no-cli-pager] [--cli-connect-timeout N]",
    "az": CLOUD_RULES["az.account-show"].split(": ", 1)[1],
    "gcloud": CLOUD_RULES["gcloud.list"].split(": ", 1)[1],
    "true": "true, alone",
    "tcp": "tcp HOST:PORT or tcp [IPv6]:PORT",
}


@dataclass(frozen=True)
class Verdict:
    """Whether a command may run, the rule that decided, and why."""

    allow: bool
    rule: str
    reason: str
    argv: tuple = ()

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
# printable to Python, blank to the eye: fillers, the braille blank, joiners, variation selectors
_BLANKS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f\u180b\u180c\u180d\u180f"
                    + "".join(map(chr, range(0xFE00, 0xFE10))) + "".join(map(chr, range(0xE0100, 0xE01F0))))


def _not_understood(ch: str, at: str) -> tuple:
    """(rule, reason) for a character the guard does not understand: named, with its code point."""
    import unicodedata
    category = unicodedata.category(ch)
    name = unicodedata.name(ch, "") or {"\x0b": "VERTICAL TAB", "\x0c": "FORM FEED", "\x1b": "ESCAPE",
                                        "\x00": "NUL", "\x7f": "DELETE", "\x85": "NEXT LINE"}.get(ch, category)
    what = f"U+{ord(ch):04X} {name}"
    if category in ("Zs", "Zl", "Zp") or ch in _BLANKS:
        return "unicode-space", (f"{what} {at} looks like a space but is not one to the shell: "
                                 "retype it as a plain space (or remove it)")
    return "control-char", f"{what} {at} is a control or invisible character: remove it"


def _lex(command: str) -> list:
    """Raise _Deny for the first shell syntax a shell would act on; return what only the argv can decide, as
    (word index, rule, reason, after '='): an unquoted `[ ]` (fine in `tcp [::1]:22`), `~/` at a word's start or after `=`."""
    quote, word, in_word, deferred = None, -1, False, []
    for i, ch in enumerate(command):
        at = f"at column {i + 1}"
        if quote is None and ch in " \t":
            in_word = False
            continue
        if not in_word:
            word, in_word = word + 1, True
        if ch == "\\" and quote != "'":
            nxt = command[i + 1:i + 2]
            if nxt in ("\n", "\r"):
                raise _Deny("line-continuation", f"backslash-newline {at} continues the line")
            if quote == '"' and nxt and nxt not in '$`"\\':
                continue          # shells and shlex both keep \X as two characters here (-w "%{http_code}\n")
            raise _Deny("escape", f"backslash {at} is an escape outside single quotes")
        if ch in "\r\n":
            raise _Deny("newline", f"a newline or carriage return {at} would start a new command")
        if ch not in " \t" and (not ch.isprintable() or ch in _BLANKS):
            raise _Deny(*_not_understood(ch, at))
        if quote:
            if ch == quote:
                quote = None
            elif quote == '"' and ch in _EXPANSION:
                raise _Deny("shell-expansion", f"{ch!r} {at} still expands inside double quotes")
        elif ch in "'\"":
            quote = ch
        elif ch in _METACHARS:
            raise _Deny("shell-metachar", f"unquoted {ch!r} {at} is shell syntax")
        elif ch in _EXPANSION:
            raise _Deny("shell-expansion", f"unquoted {ch!r} {at} is a shell expansion")
        elif ch in "[]":
            deferred.append((word, "glob", f"unquoted {ch!r} {at} is a glob", False))
        elif ch in _GLOB:
            raise _Deny("glob", f"unquoted {ch!r} {at} is a glob or brace expansion")
        elif ch == "~" and command[i + 1:i + 2] == "/" and (i == 0 or command[i - 1] in " \t="):
            deferred.append((word, "tilde", f"unquoted '~' {at} expands to your home directory",
                             command[i - 1:i] == "="))
        elif ch == "~":
            raise _Deny("tilde", f"unquoted '~' {at} expands to a home directory")
        elif ch == "#":
            raise _Deny("comment", f"unquoted '#' {at} can start a comment")
    if quote:
        raise _Deny("unbalanced-quote", f"the {quote} quote is never closed")
    return deferred


# ---------------------------------------------------------------- argv level

_WRAPPERS = frozenset(
    "env timeout nice nohup xargs sh bash zsh dash ksh mksh fish csh tcsh busybox eval exec "
    "command builtin sudo doas su runuser pkexec time stdbuf watch parallel ionice chroot setsid "
    "unshare nsenter script strace ltrace flock taskset chrt systemd-run caffeinate".split())
_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete"})


def _check_argv(argv: list[str], which, bindings: tuple, credential: bool,
                jump_hosts: frozenset, sends) -> tuple[str, str]:
    head = argv[0]
    if "=" in head:
        raise _Deny("env-assign", f"{head.split('=')[0]}=… sets the environment of the command")
    base = head.rsplit("/", 1)[-1]
    if base in _WRAPPERS and not (base == "sudo" and tuple(argv[1:]) in SUDO_FORMS):
        raise _Deny("wrapper", f"{base} runs another program, which the guard cannot see"
                    + (" (sudo: only `sudo -k true`, `sudo -n true`, `sudo -v`)" if base == "sudo" else ""))
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
    tools = {"kubectl": _kubectl, **CLOUD_TOOLS, "curl": lambda a: _curl(a, bindings, credential, sends),
             "ssh": lambda a: _ssh(a, bindings, credential, jump_hosts)}
    if base not in tools:
        raise _Deny("unknown-tool", f"{base or head!r} is not on the allow-list")
    return tools[base](argv)


def _argv(text: str, what: str, exempt) -> tuple:
    """The words of `text` once the lexer passed it; each unquoted `[ ]` / `~/` it left to the argv
    is denied unless `exempt(argv, word, rule, after '=')` understands it."""
    if not text.strip(" \t"):
        raise _Deny("empty", f"there is no {what}")
    if len(text) > MAX_COMMAND_CHARS:
        raise _Deny("too-long", f"the {what} is longer than {MAX_COMMAND_CHARS} characters")
    deferred = _lex(text)
    try:
        argv = tuple(shlex.split(text, posix=True))
    except ValueError as exc:  # the lexer should have caught it; fail closed anyway
        raise _Deny("unbalanced-quote", f"the command does not parse: {exc}")
    if not argv:
        raise _Deny("empty", "there is no command")
    for word, rule, reason, after_equals in deferred:
        if not exempt(argv, word, rule, after_equals):
            raise _Deny(rule, reason)
    return argv


def _proof_exempt(argv: tuple, word: int, rule: str, after_equals: bool) -> bool:
    base = argv[0].rsplit("/", 1)[-1]
    if rule == "glob":            # tcp is recall's own connect, curl reads [::1] as a host: no shell, no glob
        return (base == "tcp" and word == 1 and bool(re.fullmatch(r"\[[0-9A-Fa-f:.]+\]:[0-9]+", argv[1]))) or (
            base == "curl" and bool(_BRACKETED_HOST.fullmatch(argv[word])))
    # ssh expands ~ in -i KEY itself; recall expands curl's --cacert ~/FILE (run_form) before running
    return (not after_equals and word >= 2 and (base, argv[word - 1]) in (("ssh", "-i"), ("curl", "--cacert"))
            and argv[word].startswith("~/"))


def _setup_exempt(argv: tuple, word: int, rule: str, after_equals: bool) -> bool:
    return rule == "tilde" and word >= 1 and ((argv[0] in ("source", ".") and not after_equals) or (
        argv[0] == "export" and after_equals and argv[word].split("=", 1)[1][:2] == "~/"))


_BRACKETED_HOST = re.compile(r"[A-Za-z]+://\[[0-9A-Fa-f:.]+\](?::[0-9]+)?(?:[/?][^\[\]]*)?")


def verdict_for(command: str, *, credential: bool = False, bindings: tuple = (), jump_hosts=(),
                which=shutil.which, sends: bool | None = None) -> Verdict:
    """Whether `command` may run in a verify sweep; never raises. With a credential, curl and ssh reach only each
    `Binding`'s own host; `jump_hosts` are ssh -J's; `sends=False`: the command carries none (a loopback curl is judged without)."""
    argv: tuple[str, ...] = ()
    try:
        argv = _argv(command if isinstance(command, str) else "", "command", _proof_exempt)
        rule, reason = _check_argv(list(argv), which, tuple(bindings), bool(credential or bindings),
                                   frozenset(h.lower() for h in jump_hosts), sends)
        return Verdict(True, rule, reason, argv)
    except _Deny as deny:            # the reason ends in what is allowed instead, unless it already says so
        form = _INSTEAD.get(deny.rule) or _FORMS.get(deny.rule.split(".")[0], "")
        reason = f"{deny.reason} — allowed: {form}" if form and "allowed: " not in deny.reason else deny.reason
        return Verdict(False, deny.rule, reason, argv)


# ---------------------------------------------------------------- setup steps

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def setup_verdict(step: str, *, home: str = "", context: str = "") -> Verdict:
    """Whether an inventory entry's setup step may run before a proof: only forms that cannot hide
    a command inline (source/. of your own file, export NAME=literal, unset NAME). `context`: the
    kube context every kubectl of the command gets, so `kubectl config use-context` of it is stood
    for (setup.context: allowed, and never run)."""
    argv: tuple[str, ...] = ()
    try:                                  # a newline is a second command: only spaces and tabs are stripped
        argv = _argv(step.strip(" \t") if isinstance(step, str) else "", "step", _setup_exempt)
        if context and argv == ("kubectl", "config", "use-context", context):
            return Verdict(True, "setup.context", f"kubectl gets --context {context} in its place; the step "
                                                  "itself never runs (it would switch every shell)", argv)
        rule, reason = _setup_argv(list(argv), home or os.path.expanduser("~"))
        return Verdict(True, rule, reason, argv)
    except _Deny as deny:
        hint = "" if deny.rule.startswith("setup.") else (
            "; a setup step runs only literal text: put what needs the shell in a file you own and source it")
        reason = deny.reason + hint
        return Verdict(False, deny.rule, reason if "allowed: " in reason else f"{reason} — allowed: {SETUP_FORM}", argv)


_GLOBAL_STATE = {("kubectl", "config", "use-context"), ("kubectl", "config", "set-context"),
                 ("kubectl", "config", "use"), ("az", "account", "set"), ("gcloud", "config", "set"),
                 ("aws", "configure", "set"), ("aws", "eks", "update-kubeconfig"), ("az", "aks", "get-credentials"),
                 ("gcloud", "container", "clusters")}

# Names whose value is where a tool reads its configuration (a kubeconfig exec plugin, an AWS
# credential_process, a .curlrc run commands or reroute): inline, only paths you own.
_CONFIG_PATHS = frozenset({"KUBECONFIG", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "CURL_HOME",
                           "AZURE_CONFIG_DIR", "CLOUDSDK_CONFIG", "GNUPGHOME"})


def _export_value(name: str, value: str, home: str) -> None:
    """PATH and config paths only to what no one else can write; other run-changing names belong in a
    sourced file (https_proxy too: tools read the lower case), but an empty pager or editor starts nothing."""
    from .envnames import run_changing
    if name == "PATH" or name in _CONFIG_PATHS:
        for part in value.split(":") if name in ("PATH", "KUBECONFIG") else [value]:
            path = home + part[1:] if part.startswith("~/") else part
            why = _not_trusted(path, allow_root=name == "PATH")
            if why:
                raise _Deny("setup.export-path", f"{name}: {part or '(empty)'} {why}")
        return
    kind = run_changing(name.upper())
    if kind and not (kind.empty_is_harmless and value == ""):
        raise _Deny("setup.export-name", f"{name} {kind.why}: set it in a file you own and source that")


def _not_trusted(path: str, allow_root: bool = False) -> str:
    """'' when `path` is absolute and owned by you (or root, for PATH) and no one else can write it."""
    if not os.path.isabs(path):
        return "is not an absolute path (or ~/…)"
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if st.st_uid != os.getuid() and not (allow_root and st.st_uid == 0):
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return "is writable by group or others"
    return ""


def _setup_argv(argv: list[str], home: str) -> tuple[str, str]:
    head, args = argv[0], argv[1:]
    if head in ("source", "."):
        if len(args) != 1:
            raise _Deny("setup.args", f"{head} takes exactly one FILE (arguments would be the script's $1 …)")
        path = home + args[0][1:] if args[0].startswith("~/") else args[0]
        if not os.path.isabs(path):
            raise _Deny("setup.source-path", f"{args[0]} is relative and bash would search PATH for it: "
                                             "write an absolute path or ~/…")
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _Deny("setup.source-file", f"{args[0]} cannot be read ({exc.strerror})")
        if not stat.S_ISREG(st.st_mode):
            raise _Deny("setup.source-file", f"{args[0]} is not a regular file")
        if st.st_uid != os.getuid():
            raise _Deny("setup.source-owner", f"{args[0]} belongs to another user (uid {st.st_uid}): "
                                              "source only files you own")
        if st.st_mode & 0o022:
            raise _Deny("setup.source-mode", f"{args[0]} is writable by group or others: chmod go-w {args[0]}")
        return "setup.source", f"sources {args[0]}, a file you own that no one else can write"
    if head == "export":
        if not args:
            raise _Deny("setup.args", "export needs NAME=literal")
        for arg in args:
            name, eq, value = arg.partition("=")
            if not eq or not _NAME.match(name):
                raise _Deny("setup.args", f"export {name[:40]!r}… is not NAME=literal")
            _export_value(name, value, home)
        return "setup.export", "exports literal values"
    if head == "unset":
        if not args or not all(_NAME.match(a) for a in args):
            raise _Deny("setup.args", "unset takes variable names")
        return "setup.unset", "unsets variables"
    if head == "kubectx" or tuple([a for a in argv if not a.startswith("-")][:3]) in _GLOBAL_STATE:
        raise _Deny("setup.global-state", f"{' '.join(argv[:3])} switches state for every shell on this machine, "
                                          "so recall never runs it: drop the step and name the context in each "
                                          "command (kubectl --context X, az … --subscription X, aws … --profile X)"
                                          + ("; it may stay when every kubectl of the command gets --context X"
                                             if argv[:3] == ["kubectl", "config", "use-context"] else ""))
    raise _Deny("setup.command", f"{head!r} is a command, and only source FILE, . FILE, export NAME=literal "
                                 "and unset NAME run before a proof: move it into a file you own and source "
                                 "that, or drop it (use --context/--profile in the proof instead)")
