"""`access exec`: prerequisites, then one clean bash running the setup steps and the command; what
the setup sets is masked unless plainly harmless; linked secrets injected."""
from __future__ import annotations

import os
import re
import selectors
import shlex
import time
from dataclasses import dataclass

from . import inventory
from .errors import RecallError, shell_line
from .vault import audit, keyfile, runner
from .vault import door as setupvars
from .vault import store as vault
from .vault.redact import secret_parts

SETUP_TIMEOUT = 30
_RC_VARIABLES = ("BASH_ENV", "ENV")


@dataclass
class Setup:
    """An entry's setup steps judged for one command line: those that run, each step with its
    verdict, and why they cannot all run as promised ('' when they can; else nothing runs)."""
    run: list
    judged: list          # (step, guard Verdict)
    refusal: str


def judge_setup(entry, line: str, *, by_path: bool = False) -> Setup:
    """The one decision, for verify and access exec alike, whether `entry`'s setup can run as
    promised before `line`: each step is one the guard allows (setup_verdict), or a `kubectl config
    use-context X` that kubectl's --context X stands for (never run). `by_path`: the line's tool
    runs by its absolute path (verify), so no shell function gives it the context."""
    from .guard import setup_verdict
    context = kube_context(entry)
    stands_in = context if _context_stands_in(line, context, by_path) else ""
    judged = [(step, setup_verdict(step, context=stands_in)) for step in entry.access]
    denied = next(((step, v) for step, v in judged if not v.allow), None)
    refusal = (f"setup step not allowed ({denied[1].rule}): {setupvars.show_step(entry.id, denied[0])!r}: "
               f"{denied[1].reason}") if denied else ""
    return Setup([step.strip(" \t") for step, v in judged if v.allow and v.rule != "setup.context"],
                 judged, refusal)


_KUBECTL = re.compile(r"(?<![\w-])kubectl(?![\w-])")
_KEYWORDS = {"{", "!", "then", "do", "else", "time"}      # a command follows these too


def _context_stands_in(line: str, context: str, by_path: bool) -> bool:
    """Does every kubectl in `line` get a context of its own, so none reads the current one? Each must
    be a command of this shell (not in quotes, not run by another program such as xargs or sh -c); a
    bare `kubectl` gets `context` from the shell function, one run by its path only a named one."""
    if not context or not _KUBECTL.search(line):
        return False
    try:
        words = _words(line)
    except ValueError:                 # an unbalanced quote: bash will not run it either
        return False
    named = [w.partition("=")[2] or after for w, after in zip(words, [*words[1:], ""])
             if w.partition("=")[0] == "--context"]
    found = [k for k, w in enumerate(words) if _KUBECTL.search(w)]
    commands = all((words[k] == "kubectl" or words[k].endswith("/kubectl")) and (
        k == 0 or words[k - 1] in _KEYWORDS or set(words[k - 1]) <= set("();|&")) for k in found)
    bare = all(words[k] == "kubectl" for k in found) and not by_path
    return bool(context and found and commands and (bare or named))


_LEXEME = re.compile(r"""(?P<space>\s+)|(?P<punct>[();<>|&]+)|'(?P<single>[^']*)'|"(?P<double>(?:[^"\\]|\\.)*)"|"""
                     r"""\\(?P<escaped>.)|(?P<plain>[^\s'"\\();<>|&]+)|(?P<open>['"\\])""", re.S)


def _words(line: str) -> list:
    """The line's words as bash splits them (quotes removed; a `#` starting a word comments out the
    rest of its line), each run of ( ) ; < > | & a word of its own — in one pass: shlex takes
    quadratic time over one long word (a 3 MB command held an MCP call for minutes), and takes a `#`
    inside a word for a comment, as bash does not. ValueError on an unbalanced quote."""
    words: list = []
    word: list = []
    started, at = False, 0
    while at < len(line):
        m = _LEXEME.match(line, at)
        kind, text = m.lastgroup, m.group(m.lastgroup)
        at = m.end()
        if kind == "open":
            raise ValueError("no closing quotation")
        if kind == "plain" and not started and text.startswith("#"):
            end = line.find("\n", m.start())
            at = len(line) if end < 0 else end          # a comment, to the end of its line
        elif kind in ("space", "punct"):
            if started:
                words.append("".join(word))
            word, started = [], False
            if kind == "punct":
                words.append(text)
        else:
            word.append(re.sub(r'\\(["\\])', r"\1", text) if kind == "double" else text)
            started = True
    if started:
        words.append("".join(word))
    return words


# -- what the setup steps set, and which of it is masked -------------------------------------------

# Variables bash changes by itself, and the script's own.
_SHELL_VARS = {"_", "PWD", "OLDPWD", "SHLVL", "PIPESTATUS", "LINENO", "SECONDS", "RANDOM", "SRANDOM",
               "EPOCHSECONDS", "EPOCHREALTIME", "BASHPID", "FUNCNAME", "HISTCMD", "OPTIND", "OPTARG",
               "OPTERR", "COLUMNS", "LINES", "GROUPS", "DIRSTACK", *_RC_VARIABLES}
_END = b"\x01end"
# Every shell variable as NAME=VALUE records, an array's (indexed or associative) one per element:
# `${!v}` reads only element 0. IFS is its own and no read trips `set -u`: a sourced file's would cut it short.
_REPORT = r"""__recall_vars() { local IFS=$'\n' __recall_v __recall_r __recall_e __recall_a
  __recall_a=$'\n'"$(compgen -A arrayvar)"$'\n'
  for __recall_v in $(compgen -v); do case $__recall_a in
    *$'\n'"$__recall_v"$'\n'*) __recall_r="$__recall_v[@]"
      for __recall_e in ${!__recall_r+"${!__recall_r}"}; do printf '%s=%s\0' "$__recall_v" "$__recall_e"; done;;
    *) printf '%s=%s\0' "$__recall_v" "${!__recall_v-}";;
  esac; done; }
"""


def masked_exports(before: dict, after: dict) -> dict:
    """What the setup steps added or changed that is masked in every output ({name: [values]}, an
    array's every element): all of it but the plainly harmless values (setupvars.secret_setting, the
    rule the display paths apply too)."""
    return {k: kept for k, values in after.items() if k not in _SHELL_VARS and not k.startswith(("BASH", "__recall"))
            and before.get(k) != values and (kept := [v for v in values if setupvars.secret_setting(k, v)])}


def kube_context(entry) -> str:
    """The kube context an entry names (`kubectl config use-context X`, `kubectx X`, `--context X`)."""
    pattern = re.compile(r"(?:--context[= ]\s*|kubectl\s+config\s+use-context\s+|^kubectx\s+)"
                         r"""(['"]?)([\w.:@/-]+)\1""")
    return next((m.group(2) for text in [*entry.access, entry.verify, entry.check]
                 if (m := pattern.search(text.strip()))), "")


# -- one bash: setup steps, then the command --------------------------------------------------------

def _script(steps: list, command: str, base: dict, context: str, script_fd: int, vars_fd: int) -> str:
    """Setup steps (output on stderr, no stdin, `set -e`), every shell variable before and after them
    on `vars_fd` (after a failure too), then the command in the same shell."""
    restore = "".join(f"export {k}={shlex.quote(base[k])}\n" for k in _RC_VARIABLES if k in base)
    kubectl = ("kubectl() { case \" $* \" in *' --context '*|*' --context='*) command kubectl \"$@\";; "
               f"*) command kubectl --context {shlex.quote(context)} \"$@\";; esac; }}\n") if context else ""
    # bash says "/dev/fd/N: line L: aws: command not found", a line of this script: the name is enough
    missing = "command_not_found_handle() { printf '%s: command not found\\n' \"$1\" >&2; return 127; }\n"
    return (
        f"exec {script_fd}<&-\n" + missing + _REPORT +
        f"__recall_cwd=$PWD; builtin cd -- ~ 2>/dev/null\n"
        f"printf '\\1before\\0' >&{vars_fd}; __recall_vars >&{vars_fd}\n"
        f"trap 'printf \"\\1failed\\0\" >&{vars_fd}; __recall_vars >&{vars_fd}; printf \"\\1end\\0\" >&{vars_fd}' EXIT\n"
        + "".join(_step(step) for step in steps) + "set +e\ntrap - EXIT\n"
        f"printf '\\1ok\\0' >&{vars_fd}; __recall_vars >&{vars_fd}; printf '\\1end\\0' >&{vars_fd}\n"
        f"exec {vars_fd}>&-\nunset -f __recall_vars; unset __recall_v __recall_rc\n"
        "builtin cd -- \"$__recall_cwd\"; unset __recall_cwd\n" + restore + kubectl + command + "\n")


def _step(step: str) -> str:
    """One setup step under `set -e`, set again before each (a sourced file may turn it off), and
    its own exit status checked after it: a step that failed stops the script, whatever it set."""
    return (f"set -e\n{{\n{step}\n}} </dev/null >&2\n"
            "__recall_rc=$?; [ \"$__recall_rc\" = 0 ] || exit \"$__recall_rc\"\n")


def _parse_vars(data: bytes) -> tuple:
    """(before, after, status) from the records the script wrote, each {name: [values]} (an array's
    every element); status ok | failed | '' (cut off)."""
    sections: dict = {}
    current = None
    for item in data.split(b"\0"):
        if item.startswith(b"\x01"):
            current = item[1:].decode()
            sections.setdefault(current, {})
        elif current and b"=" in item:
            k, _, v = item.partition(b"=")
            sections[current].setdefault(k.decode("utf-8", "replace"), []).append(v.decode("utf-8", "replace"))
    status = ("ok" if "ok" in sections else "failed") if "end" in sections else ""    # no end: cut short
    return sections.get("before", {}), sections.get("ok", sections.get("failed", {})), status


def _wait_setup(proc, vars_r: int, deadline: float) -> tuple:
    """Read the variables pipe to its end record while keeping stderr drained (the setup's output,
    held unmasked in memory until the masker knows what the setup set). (records, stderr, timed out)"""
    bufs = {vars_r: bytearray(), proc.stderr.fileno(): bytearray()}
    late, exited = False, None
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            sel.register(fd, selectors.EVENT_READ)
        while _END + b"\0" not in bufs[vars_r]:
            now = time.monotonic()
            if now >= deadline or runner.stopped():      # hung, or its caller went away
                late = True
                break
            if proc.poll() is not None:
                exited = exited or now
                if now - exited > 1.0 or not sel.get_map():
                    break
            for key, _ in sel.select(min(0.1, deadline - now)):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    bufs[key.fd] += chunk
                else:
                    sel.unregister(key.fd)
    return bytes(bufs[vars_r]), bytes(bufs[proc.stderr.fileno()]), late


def _secret_injection(con, entry, values: dict, stdin) -> tuple:
    """(extra env, stdin bytes or None, host-bound rows) for the entry's linked secrets; `inject: stdin`
    ones are written to the command's stdin, in the order the entry lists them."""
    env, data, host_bound = {}, b"", []
    for sid in entry.secrets:
        row = vault.stored_row(con, sid)
        if row is None:                      # removed by a sync since the values were read
            raise RecallError(f"linked secret {sid} is not in the vault", "run 'recall secret sync'")
        if row["inject"] == "proxy":         # a placeholder, and the proxy (hostbound.Session)
            host_bound.append(row)
            continue
        extra, piece = runner.injection(row, values[sid], False)
        env.update(extra)
        if piece is not None:
            if stdin is not None:
                raise RecallError(f"secret '{sid}' of '{entry.id}' is injected on stdin, and this command "
                                  "already has its own stdin",
                                  "run the command without its own input, or link the secret with inject: env")
            data += piece
    return env, stdin if stdin is not None else (data or None), host_bound


def exec_entry(con, cfg, entry_id: str, command=None, *, out=None, err=None, timeout=None, stdin=None,
               placeholders=None):
    """Check prerequisites, then in one bash: the setup steps, then `command` (a shell line, or an
    argv list joined with shell quoting; default: the entry's verify command), its output masked.
    Host-bound secrets reach it as placeholders (given, or fresh) through a proxy for this run."""
    entries = inventory.load_inventory(cfg, con)
    entry = inventory.get_entry(entries, entry_id)
    if isinstance(command, (list, tuple)):
        command = shlex.join(command)
    line = shell_line((command or "").strip() or entry.verify.strip())
    if not line:
        raise RecallError(f"entry '{entry.id}' has no verify command", f"recall access exec {entry.id} -- CMD …")
    inventory.ensure_prerequisites(entries, entry)
    setup = judge_setup(entry, line)
    if setup.refusal:                  # nothing runs without the environment the entry promises
        audit.log(con, "access.exec", entry.id, argv="", verdict="setup refused")
        raise RecallError(setup.refusal, f"nothing ran: fix the entry at {entry.file}:{entry.line}")
    values = vault.load_values(con, cfg) if entry.secrets or _has_vault(con, cfg) else {}
    missing = [s for s in entry.secrets if s not in values]
    if missing:
        raise RecallError(f"linked secret(s) {', '.join(missing)} are not in the vault", "run 'recall secret sync'")
    extra, stdin, host_bound = _secret_injection(con, entry, values, stdin)   # refuses before anything runs
    base = runner.child_env()
    context = kube_context(entry)
    env = {k: v for k, v in {**base, **extra}.items() if k not in _RC_VARIABLES}
    child = runner.Child("access.exec", entry.id, line, env, secret_parts(values, values.public) if values else {},
                         given=tuple(s for s in entry.secrets if s not in {r["id"] for r in host_bound}),
                         script=lambda s_fd, v_fd: _script(setup.run, line, base, context, s_fd, v_fd),
                         prelude=lambda proc, report: _prelude(entry, proc, report), stdin=stdin,
                         host_bound=host_bound, values=values, placeholders=placeholders, timeout=timeout)
    result = runner.run(con, child, out, err)
    if result.code == 127 and not result.timed_out:      # bash's "command not found"
        result.notes.append(f"exit 127: a command was not found — {runner.not_on_path(base['PATH'])}")
    # the command's kubectl runs with the entry's context when it names none of its own
    result.context = context if context and _KUBECTL.search(line) and "--context" not in line else ""
    return result


def _prelude(entry, proc, report: int):
    """The setup steps' end: what they set (masked unless plainly harmless), their output, and the
    error when they failed or hung."""
    data, setup_err, late = _wait_setup(proc, report, time.monotonic() + SETUP_TIMEOUT)
    before, after, status = _parse_vars(data)
    masks = {f"{entry.id}:{k}": values for k, values in masked_exports(before, after).items()}
    if not late and status == "ok":
        return runner.Prelude(masks, setup_err)

    def error(last: str) -> RecallError:
        if late:
            why = f"did not finish within {SETUP_TIMEOUT}s"
        elif status:
            why = f"failed: {last or 'no message'}"
        else:           # what they set is unknown, so their output cannot be masked: none of it is shown
            why = "ended before saying what they set (a step removed recall's EXIT trap?): their output is not shown"
        return RecallError(f"the setup steps of '{entry.id}' {why}", f"run 'recall access show {entry.id}' and check the steps")
    return runner.Prelude(masks, setup_err, error)


def _has_vault(con, cfg) -> bool:
    """Mask every vault value too, when the vault is usable here (defence in depth)."""
    if not vault.holds_values(con):
        return False
    try:
        keyfile.require_crypto()
        return keyfile.key_path(cfg.home).exists()
    except RecallError:
        return False
