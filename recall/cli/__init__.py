"""argparse: parse → call ONE core function → format text or --json → exit code. The parser and main
are here; the verbs, by concern, in notes, secrets and systems; what they print through in output."""
from __future__ import annotations

import argparse
import sys

from ..errors import RecallError
from .help import EXAMPLES, SEARCH_HELP
from .notes import cmd_eval, cmd_index, cmd_init, cmd_read, cmd_search
from .secrets import (
    cmd_secret_command,
    cmd_secret_exec,
    cmd_secret_find,
    cmd_secret_get,
    cmd_secret_key_backup,
    cmd_secret_log,
    cmd_secret_restore,
    cmd_secret_rotate,
    cmd_secret_set,
    cmd_secret_show,
    cmd_secret_sync,
)
from .systems import (
    cmd_access_exec,
    cmd_access_find,
    cmd_access_show,
    cmd_doctor,
    cmd_instructions,
    cmd_mcp,
    cmd_remote_install,
    cmd_verify,
)

EX_USAGE = 2


class _Parser(argparse.ArgumentParser):
    argv: list = []          # main()'s argv, for the hint about words that start with '-'

    def parse_known_args(self, args=None, namespace=None):
        # a verb's parser says what it does not know itself, so the usage shown is the verb's
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and " " in self.prog:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def _get_formatter(self):
        # argparse makes a formatter for every add_argument; its own width lookup imports shutil
        return self.formatter_class(prog=self.prog, width=_width())

    def error(self, message):
        self.print_usage(sys.stderr)
        sys.stderr.write(f"recall: {message}\n")
        dashed = _dashed_words(_Parser.argv, self)
        if dashed and message.startswith(("unrecognized arguments", "the following arguments are required")):
            sys.stderr.write(f"recall: words that start with '-' go after '--', as in: "
                             f"{self.prog} -- {dashed[0]}\n")
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
    words (a query, an id, a path)."""
    if " " not in parser.prog or not any(not a.option_strings for a in parser._actions):
        return []
    known = parser._option_string_actions
    words = argv[:argv.index("--")] if "--" in argv else argv
    return [w for w in words if w.startswith("-") and w != "-" and w.split("=")[0] not in known]


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


class _OnlyVerb:
    def __init__(self, sub, only):
        self.sub, self.only = sub, only

    def add_parser(self, name, **kwargs):
        return self.sub.add_parser(name, **kwargs) if self.only in (None, name) else _Skipped()


def _modes(parser) -> list:
    """Search's own list of modes; imported only for the search or eval parser this run builds."""
    if isinstance(parser, _Skipped):
        return []
    from ..search import MODES
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
    real_sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    real_sub.required = True
    sub = _OnlyVerb(real_sub, only)

    p = sub.add_parser("init", parents=[common], help="write a starter config, its notes folder, a secrets "
                       "file and an inventory")
    p.add_argument("--notes", metavar="DIR", help="the notes folder the config names (default ~/notes)")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("index", parents=[common], help="index the configured sources (incremental)")
    p.add_argument("--full", action="store_true", help="re-read every file")
    p.add_argument("--no-embed", action="store_true", help="skip embeddings (keyword index only)")
    p.add_argument("--source", metavar="NAME", help="only this source")
    p.add_argument("--remote", metavar="NAME", help="run the indexing on that remote, over ssh")
    p.add_argument("--prune", action="store_true", help="also drop what a missing or empty source folder held")
    p.add_argument("--watch", action="store_true", help="then keep the index fresh in the foreground (Ctrl-C stops)")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", parents=[common], help="search the notes",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=SEARCH_HELP)
    p.add_argument("query", nargs="+", help="words, identifiers, or a question")
    p.add_argument("-n", "--limit", dest="n", type=int, default=10, help="number of hits (default 10)")
    p.add_argument("--mode", default="auto", choices=_modes(p),
                   help="how to match (default auto; see above)")
    p.add_argument("--rerank", action="store_true", help="rerank the top hits (costs one API call)")
    p.add_argument("--explain", action="store_true", help="show ranks, scores and the route")
    p.add_argument("--local", action="store_true", help="this machine's notes only, no remotes")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("read", parents=[common], help="print a note's section with line numbers")
    p.add_argument("target", metavar="PATH[:LINE]")
    p.add_argument("--max-chars", type=int, default=8000)
    p.add_argument("--offset", type=int, default=0, help="lines to skip (from a previous read's hint)")
    p.set_defaults(func=cmd_read)

    _secret_parsers(sub, common)
    _access_parsers(sub, common)

    p = sub.add_parser("verify", parents=[common],
                       help="read-only sweep: which entries and secrets still work, and why not")
    p.add_argument("ids", nargs="*", metavar="ID", help="only these entries or secrets")
    p.add_argument("--dry-run", action="store_true", help="print each command with the guard's verdict; run nothing")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per proof (default 20)")
    p.set_defaults(func=cmd_verify)

    rp = sub.add_parser("remote", parents=[common], help="recall on a remote box, searched from here")
    rverbs = rp.add_subparsers(dest="remote_verb", metavar="VERB", parser_class=_Parser)
    rverbs.required = True
    p = rverbs.add_parser("install", parents=[common], help="copy the zero-dependency core to HOST over ssh")
    p.add_argument("host", help="an inventory host id, or anything ssh accepts")
    p.add_argument("--path", default="~/recall", help="where on the host (default ~/recall)")
    p.add_argument("--ssh-config", default="", metavar="FILE", help="an ssh -F config file")
    p.set_defaults(func=cmd_remote_install)

    p = sub.add_parser("mcp", parents=[common], help="serve MCP on stdio (for the agent)")
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("instructions", parents=[common], help="the rules block for the agent's instructions file")
    p.add_argument("--install", metavar="FILE", help="write or update the block in FILE (idempotent)")
    p.set_defaults(func=cmd_instructions)

    p = sub.add_parser("doctor", parents=[common], help="check this machine and everything the config names")
    p.add_argument("--thorough", action="store_true",
                   help="import every extra, even the slow ones (sentence-transformers takes seconds)")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("eval", parents=[common], help="score search against golden queries")
    p.add_argument("golden", metavar="GOLDEN.jsonl")
    p.add_argument("--mode", action="append",
                   choices=[*_modes(p), "hybrid+rerank"],
                   help="mode(s) to score, side by side (default: keyword, semantic and hybrid when "
                        "a provider is configured, else auto); hybrid+rerank costs Voyage calls")
    p.add_argument("-v", "--verbose", action="store_true", help="list the queries that missed")
    p.set_defaults(func=cmd_eval)
    _describe(parser)
    return parser


def _describe(parser, words=()) -> None:
    """A verb's --help starts with what its line in the verb list says, unless it has its own, and
    ends with examples."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                sub = action.choices[choice.dest]
                if not sub.description and choice.help:
                    sub.description = choice.help[0].upper() + choice.help[1:] + "."
                examples = EXAMPLES.get(" ".join((*words, choice.dest)))
                if examples and not sub.epilog:
                    sub.formatter_class = argparse.RawDescriptionHelpFormatter
                    sub.epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
                _describe(sub, (*words, choice.dest))


def _secret_parsers(sub, common) -> None:
    sp = sub.add_parser("secret", parents=[common], help="use credentials without seeing them")
    verbs = sp.add_subparsers(dest="secret_verb", metavar="VERB", parser_class=_Parser)
    verbs.required = True
    p = verbs.add_parser("sync", parents=[common], help="encrypt the secrets files into the vault")
    p.add_argument("--prune", action="store_true",
                   help="allow removing more than half the stored secrets, or all of one file's")
    p.set_defaults(func=cmd_secret_sync)
    p = verbs.add_parser("set", parents=[common], help="seal a typed (or piped) value into its file, and sync")
    p.add_argument("id")
    p.add_argument("field", nargs="?", help="which field, for a secret with fields")
    p.set_defaults(func=cmd_secret_set)
    p = verbs.add_parser("key", parents=[common], help="the vault key: 'key backup FILE' keeps a copy")
    kv = p.add_subparsers(dest="key_verb", metavar="VERB", parser_class=_Parser)
    kv.required = True
    p = kv.add_parser("backup", parents=[common], help="copy the vault key to FILE (0600), to keep off this machine")
    p.add_argument("file")
    p.set_defaults(func=cmd_secret_key_backup)
    p = verbs.add_parser("find", parents=[common], help="find secrets by their metadata (none: list all)")
    p.add_argument("query", nargs="*")
    p.set_defaults(func=cmd_secret_find)
    p = verbs.add_parser("show", parents=[common], help="metadata, use line and variables (never the value)")
    p.add_argument("id")
    p.set_defaults(func=cmd_secret_show)
    p = verbs.add_parser("command", parents=[common], help="print the one line that runs CMD with the secret")
    _id_then_command(p, cmd_secret_command)
    p = verbs.add_parser("exec", parents=[common], help="run CMD with the secret in its env (or stdin)")
    p.add_argument("--stdin", action="store_true", help="write the value and a newline to CMD's stdin")
    _id_then_command(p, cmd_secret_exec)
    p = verbs.add_parser("get", parents=[common], help="copy the value to the clipboard (cleared after 45 s); "
                         "--print shows it on a real terminal after a typed word")
    p.add_argument("id")
    p.add_argument("--print", action="store_true", dest="show",
                   help="write it on this terminal (never stdout), after you type the word asked for")
    p.set_defaults(func=cmd_secret_get)
    p = verbs.add_parser("log", parents=[common], help="the access log")
    p.add_argument("id", nargs="?")
    p.add_argument("-n", "--limit", dest="n", type=int, default=50, help="how many rows (default 50)")
    p.set_defaults(func=cmd_secret_log)
    p = verbs.add_parser("restore", parents=[common], help="write a secret a sync removed (30 days) back into its file")
    p.add_argument("id")
    p.set_defaults(func=cmd_secret_restore)
    p = verbs.add_parser("rotate-key", parents=[common], help="re-encrypt the vault under a new key")
    p.set_defaults(func=cmd_secret_rotate)


def _access_parsers(sub, common) -> None:
    ap = sub.add_parser("access", parents=[common], help="how to reach clusters, hosts and accounts")
    verbs = ap.add_subparsers(dest="access_verb", metavar="VERB", parser_class=_Parser)
    verbs.required = True
    p = verbs.add_parser("find", parents=[common], help="find inventory entries (none: list all)")
    p.add_argument("query", nargs="*")
    p.set_defaults(func=cmd_access_find)
    p = verbs.add_parser("show", parents=[common], help="the access block of one entry")
    p.add_argument("id")
    p.set_defaults(func=cmd_access_show)
    p = verbs.add_parser("exec", parents=[common],
                         help="check prerequisites, set up, inject secrets, run CMD (default: verify), mask")
    _id_then_command(p, cmd_access_exec)


def _id_then_command(p, func) -> None:
    """ID, then CMD after `--`; `_command` reads CMD and any of p's options written after the id."""
    p.add_argument("id")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD …")
    p.set_defaults(func=func, options=p)


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
    verb = verb_of(argv)
    if verb is None and _no_words(argv):      # bare `recall`: the verbs, as `recall --help` shows them
        build_parser().print_help(sys.stdout)
        return 0
    args = build_parser(verb).parse_args(argv)
    try:
        return args.func(args)
    except RecallError as exc:
        from ..api import bound_echoes
        text = bound_echoes(str(exc), argv)
        sys.stderr.write(f"recall: {text[len('recall: '):] if text.startswith('recall: ') else text}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("recall: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:        # a full disk, a read-only or damaged DB: one line, not a traceback
        from ..repair import explain
        err = explain(exc)
        if err is None:
            raise
        from ..api import bound_echoes
        sys.stderr.write(f"recall: {bound_echoes(str(err), argv)}\n")
        return err.exit_code


def run() -> None:
    """main(), then leave without the interpreter's teardown, which costs a `recall search` several ms.
    Everything is committed or flushed by then; an exception still unwinds (and prints) as usual."""
    import os
    if sys.stderr is None:                  # started with 2>&-: errors go nowhere, as asked
        sys.stderr = open(os.devnull, "w")
    if sys.stdout is None:                  # started with >&-: say so, as grep does, not a traceback
        sys.stderr.write("recall: standard output is closed; send it to a file or a pipe (recall … > out.txt)\n")
        os._exit(2)
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    os._exit(code)
