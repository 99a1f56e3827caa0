"""argparse: parse → ONE api call → its text or --json → exit code. The parser and main are here;
the verbs, by concern, in notes, secrets and systems; what they print through in output."""
from __future__ import annotations

import argparse
import contextlib
import sys

from . import notes, output, secrets, systems
from .help import EXAMPLES, SEARCH_HELP

EX_USAGE = 2


class _Parser(argparse.ArgumentParser):
    argv: list = []          # main()'s argv, for the hint about words that start with '-'

    def __init__(self, *args, **kwargs):
        # a flag cut short is a typo to name, not one to guess: `sync --prun` pruned, `--instal x` wrote x
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        # a verb's parser says what it does not know itself, so the usage shown is the verb's
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and " " in self.prog:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def _get_formatter(self):
        # argparse makes a formatter for every add_argument; its own width lookup imports shutil
        return self.formatter_class(prog=self.prog, width=_width())

    def _print_message(self, message, file=None):
        # argparse drops a write error: `recall --help > /dev/full` would say nothing and exit 0
        if message:
            (file or sys.stderr).write(message)

    def error(self, message):
        import re
        typed = re.match(r"argument ([^:]+): invalid choice: '([^']*)'", message)
        if typed:                             # a verb or a mode typed wrong: the closest, in one line
            from ..errors import did_you_mean
            where, word = typed.groups()
            known = next((list(a.choices) for a in self._actions if a.choices and
                          (a.metavar == where or where in a.option_strings)), [])
            said = did_you_mean(word, known, f"'{self.prog} --help' lists them")
            what = f"{self.prog} has no verb" if where == "VERB" else f"{where} takes no"
            _usage_error(f"recall: {what} '{word}' — {said}\n")
        if message == "the following arguments are required: VERB":      # `recall secret`: which verbs there are
            verbs = next(list(a.choices) for a in self._actions if a.metavar == "VERB")
            _usage_error(f"recall: {self.prog} needs a verb: {', '.join(verbs)} — "
                         f"'{self.prog} --help' says what each does\n")
        if message.startswith("argument ") and ("is outside" in message or "is not a" in message):
            _usage_error(f"recall: {message} (see '{self.prog} --help')\n")      # a bad number: one line
        if message.startswith("unrecognized arguments"):      # an option typed wrong (--explian): the closest
            from ..errors import closest
            words = _Parser.argv[:_Parser.argv.index("--")] if "--" in _Parser.argv else _Parser.argv
            known = {o[2:]: o[2:] for o in self._option_string_actions if o.startswith("--")}   # '--' matches all
            for word in (w.split("=")[0] for w in words if w.startswith("--") and w.split("=")[0][2:] not in known):
                near = closest(word[2:], known)
                if near:
                    _usage_error(f"recall: {self.prog} has no option '{word}' — did you mean '--{near[0]}'?"
                                 + (" (a word that starts with '-' goes after '--')" * bool(_dashed_words(words, self)))
                                 + "\n")
        text = f"{self.format_usage()}recall: {message}\n"
        dashed = _dashed_words(_Parser.argv, self)
        if dashed and message.startswith(("unrecognized arguments", "the following arguments are required")):
            text += f"recall: words that start with '-' go after '--', as in: {self.prog} -- {dashed[0]}\n"
        _usage_error(text)


def _usage_error(text: str):
    """A usage error on stderr, exit 2; what it echoes of the words typed through the door of the
    config they name (a secret typed as `-n VALUE` is not said back)."""
    from .. import api
    argv, config = _Parser.argv, None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--config" and i + 1 < len(argv):
            config = argv[i + 1]
        elif arg.startswith("--config="):
            config = arg.partition("=")[2]
    sys.stderr.write(api.scrub_typed(text, config))
    sys.exit(EX_USAGE)


def _width() -> int:
    """The help's width as shutil.get_terminal_size gives it (COLUMNS, the terminal, else 80), less 2."""
    import os
    try:
        columns = int(os.environ.get("COLUMNS", 0)) or os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        columns = 0
    return (columns or 80) - 2


def _dashed_words(argv: list, parser) -> list:
    """Words before any `--` that start with '-' and are none of the options of a verb that takes
    words to search for (a query: `search`, `secret find`, `access find`); an id or a path never
    starts with '-' (`secret set ID --service x` is an option it lacks, not a word to move)."""
    if " " not in parser.prog or not any(a.dest == "query" and not a.option_strings for a in parser._actions):
        return []
    known = parser._option_string_actions
    words = argv[:argv.index("--")] if "--" in argv else argv
    return [w for w in words if w.startswith("-") and w != "-" and w.split("=")[0] not in known]


def _text(word: str) -> str:
    """A name or query typed on the command line, as text: bytes that are not UTF-8 (kept by Python as
    surrogates, which no id, note or SQLite text can hold) become U+FFFD, as in a note's name."""
    return word.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _whole(low: int, high: int):
    """An argparse type: a whole number from `low` to `high`, else a usage error saying the range."""
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (from {low:,} to {high:,})") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is outside {low:,}–{high:,}")
        return value
    return whole


def _seconds(low: float, high: float):
    """An argparse type: seconds from `low` to `high` (no nan, no inf), else a usage error."""
    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:          # nan and inf too
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from {low:g} to {high:g}")
        return value
    return seconds


def _common() -> argparse.ArgumentParser:
    p = _Parser(add_help=False)
    p.add_argument("--config", default=argparse.SUPPRESS, help="config file (default: RECALL_CONFIG, "
                   "then ~/.config/recall/config.yaml)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    return p


class _Skipped:
    """Stands in for the parser of a verb this run does not use: building all of them costs more
    than the rest of a `recall search` (argparse looks up translations for every help string)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: self


class _Verbs:
    """The verbs of `parser`, each with the common options, its function, and a --help that starts with
    its line in the verb list (unless it has its own) and ends with examples; `only`: the one built."""

    def __init__(self, parser, dest, common, only=None):
        self.sub = parser.add_subparsers(dest=dest, metavar="VERB", parser_class=_Parser, required=True)
        self.common, self.only = common, only

    def add(self, name, func=None, **kwargs):
        if self.only not in (None, name) or isinstance(self.sub, _Skipped):
            return _Skipped()
        p = self.sub.add_parser(name, parents=[self.common], **kwargs)
        if func:
            p.set_defaults(func=func)
        if not p.description:
            p.description = kwargs["help"][0].upper() + kwargs["help"][1:] + "."
        examples = EXAMPLES.get(p.prog.partition(" ")[2])       # prog: 'recall secret sync'
        if examples:
            p.formatter_class = argparse.RawDescriptionHelpFormatter
            p.epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
        return p


def _modes(parser) -> list:
    """The query parser's list of modes; imported only for the search or eval parser this run builds."""
    if isinstance(parser, _Skipped):
        return []
    from ..api import MODES
    return list(MODES)


VERBS = ("init", "index", "search", "read", "secret", "access", "verify", "remote", "mcp", "instructions",
         "doctor", "eval")


def verb_of(argv: list):
    """The verb argv names (None: unknown, or help asked of the top level)."""
    after_config = False
    for arg in argv:
        if after_config:
            after_config = False
        elif arg == "--config":
            after_config = True
        elif not arg.startswith("-"):
            return arg if arg in VERBS else None
        elif arg in ("-h", "--help"):
            return None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (`only`) the top level plus that one verb."""
    common = _common()
    parser = _Parser(prog="recall", parents=[common],
                     description="Notes search, a vault that never shows values, and how to reach "
                                 "each system — for you and your agent.")
    from .. import __version__
    parser.add_argument("--version", action="version", version=f"recall {__version__}")
    verbs = _Verbs(parser, "verb", common, only)

    p = verbs.add("init", notes.cmd_init,
                  help="write a starter config, its notes folder, a secrets file and an inventory")
    p.add_argument("--notes", metavar="DIR", help="the notes folder the config names (default ~/notes)")

    p = verbs.add("index", notes.cmd_index, help="index the configured sources (incremental)")
    p.add_argument("--full", action="store_true", help="re-read every file")
    p.add_argument("--no-embed", action="store_true", help="skip embeddings (keyword index only)")
    p.add_argument("--source", metavar="NAME", help="only this source")
    p.add_argument("--remote", metavar="NAME", help="run the indexing on that remote, over ssh")
    p.add_argument("--prune", action="store_true", help="also drop what a missing or empty source folder held")
    p.add_argument("--watch", action="store_true", help="then keep the index fresh in the foreground (Ctrl-C stops)")

    p = verbs.add("search", notes.cmd_search, help="search the notes",
                  formatter_class=argparse.RawDescriptionHelpFormatter, description=SEARCH_HELP)
    p.add_argument("query", nargs="+", type=_text, help="words, identifiers, or a question")
    p.add_argument("-n", "--limit", dest="n", type=_whole(1, 1000), default=10, help="number of hits (1–1000, default 10)")
    p.add_argument("--mode", default="auto", choices=_modes(p), help="how to match (default auto; see above)")
    p.add_argument("--rerank", action="store_true", help="rerank the top hits (costs one API call)")
    p.add_argument("--explain", action="store_true", help="show ranks, scores and the route")
    p.add_argument("--local", action="store_true", help="this machine's notes only, no remotes")

    p = verbs.add("read", notes.cmd_read, help="print a note's section with line numbers")
    p.add_argument("target", metavar="PATH[:LINE]")
    p.add_argument("--max-chars", type=_whole(100, 10_000_000), default=8000, help="at most this many characters (default 8000)")
    p.add_argument("--offset", type=_whole(0, 100_000_000), default=0, help="lines to skip (from a previous read's hint)")

    _secret_parsers(verbs.add("secret", help="use credentials without seeing them"), common)
    _access_parsers(verbs.add("access", help="how to reach clusters, hosts and accounts"), common)

    p = verbs.add("verify", systems.cmd_verify,
                  help="read-only sweep: which entries and secrets still work, and why not")
    p.add_argument("ids", nargs="*", metavar="ID", type=_text, help="only these entries or secrets")
    p.add_argument("--dry-run", action="store_true", help="print each command with the guard's verdict; run nothing")
    p.add_argument("--timeout", type=_seconds(0.1, 3600), default=20.0, help="seconds per proof (0.1–3600, default 20)")

    remote = _Verbs(verbs.add("remote", help="recall on a remote box, searched from here"), "remote_verb", common)
    p = remote.add("install", systems.cmd_remote_install, help="copy the zero-dependency core to HOST over ssh")
    p.add_argument("host", type=_text, help="an inventory host id, or anything ssh accepts")
    p.add_argument("--path", default="~/recall", help="where on the host (default ~/recall)")
    p.add_argument("--ssh-config", default="", metavar="FILE", help="an ssh -F config file")

    verbs.add("mcp", systems.cmd_mcp, help="serve MCP on stdio (for the agent)")
    p = verbs.add("instructions", systems.cmd_instructions,
                  help="the rules block for the agent's instructions file, and this install's MCP settings")
    p.add_argument("--install", metavar="FILE", help="write or update the block in FILE (idempotent)")
    p = verbs.add("doctor", systems.cmd_doctor, help="check this machine and everything the config names")
    p.add_argument("--thorough", action="store_true",
                   help="wait for every extra's import, however long it takes (else under a second in all)")

    p = verbs.add("eval", notes.cmd_eval, help="score search against golden queries")
    p.add_argument("golden", metavar="GOLDEN.jsonl")
    p.add_argument("--mode", action="append", choices=[*_modes(p), "hybrid+rerank"],
                   help="mode(s) to score, side by side (default: keyword, semantic and hybrid when "
                        "a provider is configured, else auto); hybrid+rerank costs Voyage calls")
    p.add_argument("-v", "--verbose", action="store_true", help="list the queries that missed")
    return parser


def _secret_parsers(parser, common) -> None:
    verbs = _Verbs(parser, "secret_verb", common)
    p = verbs.add("sync", secrets.cmd_secret_sync, help="encrypt the secrets files into the vault")
    p.add_argument("--prune", action="store_true",
                   help="allow removing more than half the stored secrets, or all of one file's")
    p = verbs.add("set", secrets.cmd_secret_set, help="seal a typed (or piped) value into its file, and sync")
    p.add_argument("id", type=_text)
    p.add_argument("field", nargs="?", type=_text, help="which field, for a secret with fields")
    key = _Verbs(verbs.add("key", help="the vault key: 'key backup FILE' keeps a copy"), "key_verb", common)
    p = key.add("backup", secrets.cmd_secret_key_backup,
                help="copy the vault key to FILE (0600), to keep off this machine")
    p.add_argument("file")
    p = verbs.add("find", secrets.cmd_secret_find, help="find secrets by their metadata (none: list all)")
    p.add_argument("query", nargs="*", type=_text)
    p = verbs.add("show", secrets.cmd_secret_show, help="metadata, use line and variables (never the value)")
    p.add_argument("id", type=_text)
    _id_then_command(verbs.add("command", secrets.cmd_secret_command,
                               help="print the one line that runs CMD with the secret"))
    p = verbs.add("exec", secrets.cmd_secret_exec, help="run CMD with the secret in its env (or stdin)")
    p.add_argument("--stdin", action="store_true", help="write the value and a newline to CMD's stdin")
    _id_then_command(p)
    p = verbs.add("get", secrets.cmd_secret_get, help="copy the value to the clipboard (cleared after 45 s); "
                  "--print shows it on a real terminal after a typed word")
    p.add_argument("id", type=_text)
    p.add_argument("--print", action="store_true", dest="show",
                   help="write it on this terminal (never stdout), after you type the word asked for")
    p = verbs.add("log", secrets.cmd_secret_log, help="the access log")
    p.add_argument("id", nargs="?", type=_text)
    p.add_argument("-n", "--limit", dest="n", type=_whole(1, 100_000), default=50, help="how many rows (default 50)")
    p = verbs.add("restore", secrets.cmd_secret_restore,
                  help="write a secret a sync removed (30 days) back into its file")
    p.add_argument("id", type=_text)
    verbs.add("rotate-key", secrets.cmd_secret_rotate, help="re-encrypt the vault under a new key")


def _access_parsers(parser, common) -> None:
    verbs = _Verbs(parser, "access_verb", common)
    p = verbs.add("find", systems.cmd_access_find, help="find inventory entries (none: list all)")
    p.add_argument("query", nargs="*", type=_text)
    p = verbs.add("show", systems.cmd_access_show, help="the access block of one entry")
    p.add_argument("id", type=_text)
    p = verbs.add("exec", systems.cmd_access_exec,
                  help="check prerequisites, set up, inject secrets, run CMD (default: verify), mask")
    _id_then_command(p)


def _id_then_command(p) -> None:
    """ID, then CMD after `--`; `_command` reads CMD and any of p's options written after the id."""
    p.add_argument("id", type=_text)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD …")
    p.set_defaults(options=p)


def _no_words(argv: list) -> bool:
    """Nothing but the top level's --config FILE and --json: no verb, no help, no version asked."""
    i = 0
    while i < len(argv):
        if argv[i] == "--json" or argv[i].startswith("--config="):
            i += 1
        elif argv[i] == "--config" and i + 1 < len(argv):
            i += 2
        else:
            return False
    return True


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    _Parser.argv = argv
    output.CONFIG["named"] = None
    verb = verb_of(argv)
    try:
        if verb is None and _no_words(argv):      # bare `recall`: the verbs, as `recall --help` shows them
            build_parser().print_help(sys.stdout)
            return 0
        args = build_parser(verb).parse_args(argv)
        output.CONFIG["named"] = output.config_of(args)
        return args.func(args)
    except KeyboardInterrupt as exc:
        with contextlib.suppress(OSError):      # SIGHUP: the terminal may be gone
            sys.stderr.write(f"recall: {'stopped by ' + exc.args[0] if isinstance(exc, Stopped) else 'interrupted'}\n")
        return 128 + exc.args[1] if isinstance(exc, Stopped) else 130
    except BrokenPipeError:        # the reader went away (| head): silently
        return 1
    except Exception as exc:        # ours, or a full disk, a read-only or damaged DB: one line, not a traceback
        from ..api import error_text
        from .output import say
        said = error_text(exc, argv)
        if said is None:
            raise
        err, text = said
        say(text.removeprefix("recall: "))
        return err.exit_code


class Stopped(KeyboardInterrupt):
    """SIGTERM, or SIGHUP (its terminal closed): unwound as Ctrl-C is, so a child recall started (exec,
    verify) is stopped with it, not left running in its own session. args: (name, number)."""


def _stop(signum, frame):
    import signal
    signal.signal(signum, signal.SIG_DFL)     # a second one ends recall at once
    raise Stopped(signal.Signals(signum).name, signum)


def run() -> None:
    """main(), then leave without the interpreter's teardown, which costs a `recall search` several ms.
    Everything is committed or flushed by then; an exception still unwinds (and prints) as usual."""
    import os
    if sys.stderr is None:                  # started with 2>&-: errors go nowhere, as asked
        sys.stderr = open(os.devnull, "w")
    if sys.stdout is None:                  # started with >&-: say so, as grep does, not a traceback
        sys.stderr.write("recall: standard output is closed; send it to a file or a pipe (recall … > out.txt)\n")
        os._exit(2)
    if sys.stdin is None and verb_of(sys.argv[1:]) == "mcp":     # started with <&-: no client to read
        sys.stderr.write("recall: standard input is closed; 'recall mcp' reads its client's requests there "
                         "(an MCP client starts it with a pipe)\n")
        os._exit(2)
    # a path's bytes that are not UTF-8 (an argument, a file name) shown as \udcff, as stderr does,
    # not a traceback under a UTF-8 locale's strict stdout
    sys.stdout.reconfigure(errors="backslashreplace")
    if verb_of(sys.argv[1:]) != "mcp":        # the server's own loop decides how it ends
        import signal
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _stop)
    try:
        code = main()
    except SystemExit as exc:       # --help, --version, a usage error: their output is flushed as any other
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = 1                    # the reader went away (| head): silently, as head users expect
    except OSError as exc:          # a full device: one line, unless main already said it
        if code == 0:
            _say_last(f"could not write the output ({exc.strerror}) — send it where there is room "
                      "(recall … > out.txt, or | less); nothing in the index changed")
        code = 1
    _say_last("")
    os._exit(code)


def _say_last(line: str) -> None:
    """A last line on stderr (if stderr can take it), and stderr flushed."""
    try:
        if line:
            sys.stderr.write(f"recall: {line}\n")
        sys.stderr.flush()
    except OSError:
        pass


__all__ = ["main", "run", "build_parser"]
