"""argparse: parse → call ONE core function → format text or --json → exit code."""
from __future__ import annotations

import argparse
import sys

from .errors import RecallError

EX_USAGE = 2


class _Parser(argparse.ArgumentParser):
    argv: list = []          # main()'s argv, for the hint about words that start with '-'

    def parse_known_args(self, args=None, namespace=None):
        # a verb's parser says what it does not know itself, so the usage shown is the verb's
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and " " in self.prog:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message):
        self.print_usage(sys.stderr)
        sys.stderr.write(f"recall: {message}\n")
        dashed = _dashed_words(_Parser.argv, self)
        if dashed and message.startswith(("unrecognized arguments", "the following arguments are required")):
            sys.stderr.write(f"recall: words that start with '-' go after '--', as in: "
                             f"{self.prog} -- {dashed[0]}\n")
        sys.exit(EX_USAGE)


def _dashed_words(argv: list, parser) -> list:
    """Words before any `--` that start with '-' and are none of the options of a verb that takes
    words (a query, an id, a path)."""
    if " " not in parser.prog or not any(not a.option_strings for a in parser._actions):
        return []
    known = parser._option_string_actions
    words = argv[:argv.index("--")] if "--" in argv else argv
    return [w for w in words if w.startswith("-") and w != "-" and w.split("=")[0] not in known]


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
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
    from .search import MODES
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
    from . import __version__
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


SEARCH_HELP = """\
Search the notes: identifiers (INC-10963, pg-prod-03) match exactly and rank first; words and
questions are ranked by BM25, and by meaning too when an embedding provider is configured.

modes:
  auto      identifiers by keyword only; other queries hybrid with a provider, else keyword (default)
  keyword   BM25 over the words, plus exact identifiers; no model, no request
  semantic  nearest in meaning only (needs embedding.provider: voyage or local)
  hybrid    keyword and semantic lists fused by reciprocal rank

examples:
  recall search INC-10963
  recall search "how did we fix the expired ingress cert" --mode hybrid --explain
  recall search -- -x              words that start with '-' go after '--'"""


# Each verb's --help ends with these (search has its own, in SEARCH_HELP).
EXAMPLES = {
    "init": ["recall init", "recall --config ~/work/recall.yaml init --notes ~/work/notes"],
    "index": ["recall index", "recall index --full --no-embed", "recall index --source notes", "recall index --watch"],
    "read": ["recall read incidents/2023/INC-10963-db-failover.md:16",
             "recall read notes:runbooks/vpn.md --offset 120"],
    "secret": ["recall secret find jira", "recall secret command jira-api-token"],
    "secret sync": ["recall secret sync", "recall secret sync --prune"],
    "secret find": ["recall secret find \"token for jira\"", "recall secret find"],
    "secret show": ["recall secret show jira-api-token"],
    "secret command": ["recall secret command jira-api-token",
                       "recall secret command db-admin -- psql -U '$DB_ADMIN_USERNAME' -c 'select 1'"],
    "secret exec": ["recall secret exec db-admin -- sh -c 'psql -U \"$DB_ADMIN_USERNAME\" -c \"select 1\"'",
                    "recall secret exec sudo-pass --stdin -- sudo -S true"],
    "secret get": ["recall secret get jira-api-token", "recall secret get jira-api-token --print"],
    "secret set": ["recall secret set jira-api-token", "recall secret set db-admin password",
                   "printf %s \"$NEW\" | recall secret set jira-api-token"],
    "secret key": ["recall secret key backup /media/usb/recall-vault.key"],
    "secret key backup": ["recall secret key backup /media/usb/recall-vault.key"],
    "secret log": ["recall secret log", "recall secret log jira-api-token -n 20"],
    "secret rotate-key": ["recall secret rotate-key"],
    "secret restore": ["recall secret log", "recall secret restore jira-api-token"],
    "access": ["recall access find ops", "recall access exec ops-cluster -- kubectl get pods"],
    "access find": ["recall access find \"platform cluster\"", "recall access find"],
    "access show": ["recall access show ops-cluster"],
    "access exec": ["recall access exec ops-cluster", "recall access exec ops-cluster -- 'kubectl get pods | head'"],
    "verify": ["recall verify", "recall verify ops-cluster jira-api-token", "recall verify --dry-run"],
    "remote": ["recall remote install jump01"],
    "remote install": ["recall remote install jump01 --path ~/recall"],
    "mcp": ["claude mcp add recall -- recall mcp"],
    "instructions": ["recall instructions", "recall instructions --install ~/.claude/CLAUDE.md"],
    "doctor": ["recall doctor", "recall --json doctor", "recall doctor --thorough"],
    "eval": ["recall --config golden/recall.yaml eval golden/queries.jsonl -v"],
}


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


def _command(args) -> list:
    """CMD after the id. argparse's REMAINDER also swallows this verb's own options written after
    the id (`exec ID --stdin -- CMD`), so those leading options are parsed here; `--` ends them."""
    cmd, head = list(args.cmd), []
    known = args.options._option_string_actions
    while cmd and cmd[0] in known:
        word = cmd.pop(0)
        head.append(word)
        if known[word].nargs != 0 and cmd:
            head.append(cmd.pop(0))
    if head:
        args.options.parse_args([*head, args.id], namespace=args)
    return cmd[1:] if cmd[:1] == ["--"] else cmd


# -- helpers ------------------------------------------------------------------------------------

def _out(text: str = "") -> None:
    sys.stdout.write(text + ("\n" if not text.endswith("\n") else ""))


def _json(obj) -> None:
    import json
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def _json_done(args, data) -> bool:
    """A verb's `--json` output: `data` as JSON, and True (the verb prints nothing else); False
    without --json, when the verb prints its text view."""
    if not getattr(args, "json", False):
        return False
    _json(data)
    return True


def _config(args):
    from .config import load_config
    return load_config(getattr(args, "config", None))


def _db(cfg, readonly=False):
    from . import db
    return db.connect(cfg.db_path, readonly=readonly)


class _Progress:
    """A one-line progress bar on a terminal's stderr; silent on a pipe."""

    def __init__(self):
        self.on = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, done, total, label):
        import time
        now = time.monotonic()
        if not self.on or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        width = 30
        filled = int(width * done / max(total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{' ' * (width - filled)}] {done}/{total} {label[-40:]:<40}")
        if done >= total:
            sys.stderr.write("\r" + " " * (width + 90) + "\r")
        sys.stderr.flush()


# -- verbs --------------------------------------------------------------------------------------

def cmd_init(args) -> int:
    import os
    import shlex

    from .config import default_config_path
    from .starter import init
    named = getattr(args, "config", None)
    recall = f"recall --config {shlex.quote(named)}" if named else "recall"
    started = init(named or os.environ.get("RECALL_CONFIG") or default_config_path(), args.notes, recall=recall)
    if _json_done(args, started.__dict__):
        return 0
    _out(f"wrote {started.config}: notes in {started.notes}; credentials in {started.secrets} (0600, "
         f"outside the notes); systems in {started.inventory}")
    width = max(len(cmd) for cmd, _ in started.next)
    _out("next:\n" + "\n".join(f"  {cmd:<{width}}  # {what}" for cmd, what in started.next))
    _out(f"credentials: add them to {started.secrets}, then 'recall secret sync'")
    return 0


def cmd_index(args) -> int:
    cfg = _config(args)
    if args.remote:
        from .remote import index_remote
        data = index_remote(cfg, args.remote, full=args.full)
        if not _json_done(args, data):
            _out(f"indexed on {args.remote}: {data['new']} new, {data['changed']} changed, {data['removed']} "
                 f"removed, {data['unchanged']} unchanged files; {data['chunks']} chunks written; "
                 f"{data['seconds']:.2f}s")
        return 0
    from . import api
    embed = not args.no_embed and cfg.embedding.provider != "none"
    report = api.index(cfg, full=args.full, only=args.source, embed=embed, prune=args.prune, progress=_Progress(),
                       notify=lambda line: sys.stderr.write(f"recall: {line}\n"))
    if _json_done(args, report.__dict__):
        return 0
    for path, why in report.skipped:
        sys.stderr.write(f"recall: skipped {path}: {why}\n")
    for path, what in report.warnings:
        sys.stderr.write(f"recall: {path}: {what}\n")
    vectors = (f"; {report.embedded} embedded" + (f" ({report.tokens:,} tokens billed)" if report.tokens else "")
               if embed else "")
    _out(f"indexed: {report.new} new, {report.changed} changed, {report.removed} removed, "
         f"{report.unchanged} unchanged files; {report.chunks} chunks written; "
         f"{len(report.skipped)} skipped{vectors}; {report.seconds:.2f}s")
    return _watch(cfg) if args.watch else 0


def _watch(cfg) -> int:
    """`index --watch`: each change indexed as it happens, one line a pass that changed something."""
    from . import api, watch
    if watch.method() == "off":
        raise RecallError("RECALL_WATCH=off: nothing to watch with", "unset RECALL_WATCH (or set it to auto)")

    def said(kind, rep):
        if kind == "index" and (rep.new or rep.changed or rep.removed):
            _out(f"indexed: {rep.new} new, {rep.changed} changed, {rep.removed} removed files; "
                 f"{rep.chunks} chunks written; {rep.seconds:.2f}s")
        elif kind == "embed" and rep.embedded:
            _out(f"embedded: {rep.embedded} chunks" + (f" ({rep.tokens:,} tokens billed)" if rep.tokens else ""))
        sys.stdout.flush()
    w = api.watcher(cfg, report=said)
    sys.stderr.write(f"recall: watching {len(cfg.sources)} source(s) with {w.how}; Ctrl-C stops\n")
    try:
        w.run()
    except KeyboardInterrupt:
        sys.stderr.write("recall: stopped watching\n")
    return 0


def _behind(con, cfg) -> tuple:
    """(sources changed since the last index run, the lines that say so and name missing folders)."""
    from .walk import missing_sources
    from .watch import behind
    stale = behind(con, cfg)
    lines = missing_sources(cfg.sources)
    if stale:
        lines.append(f"{', '.join(stale)} changed since the last index run: 'recall index' brings the "
                     "results up to date ('recall index --watch' keeps them so)")
    return stale, lines


def cmd_search(args) -> int:
    from . import api, db
    from .search import NO_PROVIDER, needs_vectors, search
    cfg = _config(args)
    cfg.require_sources()
    query = " ".join(args.query)
    con = db.connect(cfg.db_path, readonly=True, vectors=needs_vectors(cfg, query, args.mode))
    result = search(con, cfg, query, n=args.n, mode=args.mode, rerank=args.rerank,
                    explain=args.explain, remotes=not args.local, hooks=api.search_hooks(cfg))
    stale, behind = _behind(con, cfg)
    data = result.public()
    data["stale"], data["notices"] = stale, [*data.get("notices", []), *behind]
    if _json_done(args, data):
        return 0
    for notice in data["notices"]:
        sys.stderr.write(f"recall: {notice}\n")
    lines = [a["block"] + "\n" for a in result.access]
    if not result.hits:
        lines.append(f"no notes match {result.query!r}")
    for i, h in enumerate(result.hits, start=1):
        lines.append(f"{i}. {h.relpath}:{h.line}  {h.date}  [{h.source}]")
        lines.append(f"   {h.breadcrumb}")
        lines.append(f"   {h.marked()}")
        if h.explain:
            import json
            lines.append("   explain: " + json.dumps(h.explain, sort_keys=True))
    if result.route.reason == NO_PROVIDER:
        lines.append("(keyword search: no embedding provider is configured, so nothing is matched by "
                     "meaning — see 'recall doctor')")
    _out("\n".join(lines))
    return 0


def cmd_read(args) -> int:
    from . import api
    with api.opened(getattr(args, "config", None), readonly=True) as (cfg, con):
        res = api.read(con, cfg, args.target, max_chars=args.max_chars, offset=args.offset)
    if _json_done(args, res.public()):
        return 0
    _out(f"{res.source}:{res.relpath} lines {res.start_line}-{res.end_line} of {res.total_lines or res.range_end}")
    sys.stdout.write(res.text)
    if res.next_offset is not None:
        _out(f"… more: recall read {args.target} --offset {res.next_offset}")
    return 0


def _vault(args):
    from . import vault
    cfg = _config(args)
    return vault, cfg, _db(cfg)


def cmd_secret_sync(args) -> int:
    vault, cfg, con = _vault(args)
    if not cfg.secrets:
        raise RecallError("no secrets files configured", "add 'secrets: [~/notes/secrets.yaml]' to the config")
    rep = vault.sync(con, cfg, prune=args.prune)
    for w in rep.warnings:
        sys.stderr.write(f"recall: warning: {w}\n")
    if not _json_done(args, rep.__dict__):
        changes = f"{rep.added} added, {rep.updated} updated, {rep.removed} removed"
        _out(f"synced {rep.total} secrets: {changes if rep.added or rep.updated or rep.removed else 'unchanged'}"
             + (f"; {rep.sealed} values sealed in their files (ENC[...])" if rep.sealed else "")
             + (f"; {rep.embedded} metadata texts embedded" if rep.embedded else ""))
        if rep.removed_ids:
            _out(f"removed: {', '.join(rep.removed_ids)} — kept 30 days: 'recall secret restore ID' writes "
                 "one back into its file ('recall secret log' lists them)")
    return 0


def cmd_secret_restore(args) -> int:
    vault, cfg, con = _vault(args)
    target, rep = vault.restore(con, cfg, args.id)
    if not _json_done(args, {"restored": args.id, "file": target, **rep.__dict__}):
        _out(f"restored {args.id} into {target} (its values sealed); synced {rep.total} secrets")
    return 0


def cmd_secret_set(args) -> int:
    from .inplace import read_value, set_value
    vault, cfg, con = _vault(args)
    what = f"{args.id}.{args.field}" if args.field else args.id
    value = read_value(f"New value for {what} (not shown; Enter ends it): ")
    where = set_value(cfg, args.id, args.field, value)
    rep = vault.sync(con, cfg)
    if not _json_done(args, {"set": where, **rep.__dict__}):
        _out(f"sealed a new value for {where} in its file; synced {rep.total} secrets")
    return 0


def cmd_secret_key_backup(args) -> int:
    from .inplace import backup_key
    from .keyfile import key_path
    _, cfg, con = _vault(args)
    dest, key = backup_key(con, cfg, args.file), key_path(cfg.home)
    if not _json_done(args, {"backup": str(dest)}):
        _out(f"wrote a copy of the vault key to {dest} (0600): keep it off this machine; to restore it: "
             f"cp {dest} {key} && chmod 600 {key}")
    return 0


def _secret_text(meta: dict) -> str:
    lines = [f"{meta['id']}  ({', '.join(x for x in (meta.get('kind'), meta.get('service'), meta.get('environment')) if x)})"]
    for key in ("username", "url", "notes", "use", "check"):
        if meta.get(key):
            lines.append(f"  {key}: {' '.join(str(meta[key]).split())}")
    if meta.get("tags"):
        lines.append(f"  tags: {', '.join(meta['tags'])}")
    if meta["inject"] == "stdin":
        lines.append("  inject: stdin — the value, then a newline, on the command's stdin"
                     + (f"; variables: {', '.join(meta['variables'])}" if meta["variables"] else ""))
    else:
        lines.append(f"  variables: {', '.join(meta['variables'])}  (inject: {meta['inject']})")
    if meta.get("host_bound"):
        lines.append(f"  host-bound: {meta['host_bound']}")
    if "last_verified" in meta:
        lines.append(f"  last verified: {meta['last_verified']}")
    return "\n".join(lines)


def cmd_secret_find(args) -> int:
    vault, cfg, con = _vault(args)
    query = " ".join(args.query)
    found = vault.find(con, query, cfg=cfg, limit=10 if query.strip() else 50)
    if _json_done(args, found):
        return 0
    if not found:
        _out("no secrets match")
    else:
        _out("\n".join(_secret_text(m) for m in found))
        if not query.strip():          # the whole list, bounded: say how many there are
            total = vault.count(con)
            _out(f"({len(found)} of {total} secrets" + (": name words to narrow it)" if total > len(found) else ")"))
    return 0


def cmd_secret_show(args) -> int:
    vault, cfg, con = _vault(args)
    meta = vault.show(con, args.id)
    if not _json_done(args, meta):
        _out(_secret_text(meta))
    return 0


def cmd_secret_command(args) -> int:
    cmd = _command(args)
    vault, cfg, con = _vault(args)
    line = vault.command_line(con, args.id, cmd if len(cmd) != 1 else cmd[0], cfg)
    if not _json_done(args, {"id": args.id, "command": line}):
        _out(line)
    return 0


def cmd_secret_exec(args) -> int:
    cmd = _command(args)
    vault, cfg, con = _vault(args)
    sys.stdout.flush()
    from .runner import secret_exec
    result = secret_exec(con, cfg, args.id, cmd, stdin=args.stdin, out=sys.stdout.buffer, err=sys.stderr.buffer)
    for note in result.notes:
        sys.stderr.write(f"recall: {note}\n")
    return result.code


def cmd_secret_get(args) -> int:
    from . import reveal
    _, cfg, con = _vault(args)
    if args.show:
        reveal.reveal(con, cfg, args.id)     # asks and shows on /dev/tty, never on stdout
        return 0
    got = reveal.to_clipboard(con, cfg, args.id)
    if not _json_done(args, got.__dict__):
        _out(f"copied the value of {got.id} to the clipboard ({got.tool}); a detached "
             f"`sh -c '{got.clearer}'` empties it in {got.clear_after} s and exits")
    return 0


def cmd_secret_log(args) -> int:
    vault, cfg, con = _vault(args)
    rows = vault.access_log(con, args.id, args.n)
    from .removed import listed
    gone = [g for g in listed(con) if not args.id or g.id == args.id]
    if not _json_done(args, rows):
        for r in rows:
            code = "" if r["exit_code"] is None else f" exit {r['exit_code']}"
            _out(f"{r['time']}  {r['caller']}({r['parent']})  {r['verb']:<15} {r['target']}  "
                 f"{r['verdict']}{code}  {r['argv']}".rstrip())
        if gone:
            _out("removed by a sync, restorable with 'recall secret restore ID':")
            for g in gone:
                _out(f"  {g.id}  from {g.file}:{g.line}  until {g.until}")
    return 0


def cmd_secret_rotate(args) -> int:
    vault, cfg, con = _vault(args)
    n = vault.rotate_key(con, cfg)
    _out(f"re-encrypted {n} secrets under a new key")
    return 0


def _inventory(args):
    from . import api, inventory
    cfg = _config(args)
    con = _db(cfg)
    return inventory, cfg, con, api.entries(cfg, con)


def cmd_access_find(args) -> int:
    inventory, cfg, con, entries = _inventory(args)
    found = [inventory.describe(con, e) for e in inventory.find(entries, " ".join(args.query))]
    if not _json_done(args, found):
        _out("\n\n".join(d["block"] for d in found) if found else "no inventory entries match")
    return 0


def cmd_access_show(args) -> int:
    inventory, cfg, con, entries = _inventory(args)
    d = inventory.describe(con, inventory.get_entry(entries, args.id))
    if not _json_done(args, d):
        _out(d["block"])
    return 0


def cmd_access_exec(args) -> int:
    from .access import exec_entry
    cmd = _command(args)
    cfg = _config(args)
    con = _db(cfg)
    sys.stdout.flush()
    line = cmd[0] if len(cmd) == 1 else cmd       # one word: a shell line ('a | b'); more: quoted words
    result = exec_entry(con, cfg, args.id, line, out=sys.stdout.buffer, err=sys.stderr.buffer)
    for step, why in result.left_out:
        sys.stderr.write(f"recall: left out '{step}': {why}\n")
    for note in result.notes:
        sys.stderr.write(f"recall: {note}\n")
    return result.code


def cmd_verify(args) -> int:
    from . import api
    from .inventory import show_step
    cfg = _config(args)
    con = _db(cfg)
    report = api.verify(con, cfg, args.ids, dry_run=args.dry_run, timeout=args.timeout)
    code = 0 if report.dry_run else report.exit_code()      # 1 when anything is stale, down, missing or broken
    if _json_done(args, report.public()):
        return code
    if not report.probes:
        _out("nothing to verify: no inventory entries and no secrets with a check")
        return 0
    width = max(len(p.target) for p in report.probes)
    for p in report.probes:
        if report.dry_run:
            for step, v in p.setup:
                _out(f"{p.target:<{width}}  {v.verdict:<5}  setup: {show_step(p.id, step)}\n{'':<{width}}  "
                     f"rule {v.rule}: {v.reason}")
            _out(f"{p.target:<{width}}  {p.verdict:<5}  {p.command or '(none)'}\n{'':<{width}}  "
                 f"rule {p.rule}: {p.reason}")
        else:
            detail = f"  {p.detail}" if p.detail else ""
            _out(f"{p.status:<11} {p.target:<{width}}  {p.seconds:5.1f}s{detail}")
    if not report.dry_run:
        counts = report.counts()
        note = ("  (nothing failed; skipped ones did not run: see why above)"
                if counts["skipped"] and code == 0 else "")
        _out(f"summary: {report.summary()}{note}")
    return code


def cmd_remote_install(args) -> int:
    from .remote import install
    rep = install(args.host, args.path, ssh_config=args.ssh_config, cfg=_config(args))
    if not _json_done(args, rep.__dict__):
        _out(f"{'updated' if rep.updated else 'installed'} recall on {rep.host} at {rep.path}: "
             f"{rep.files} files, Python {rep.python} — add it under 'remotes:' with "
             f"host: {rep.host}, path: {rep.path}")
    return 0


def cmd_mcp(args) -> int:
    import os

    from .mcp_server import serve
    if getattr(args, "config", None):
        os.environ["RECALL_CONFIG"] = args.config
    return serve()


def cmd_instructions(args) -> int:
    from .instructions import install, rules_text
    if args.install:
        _out(install(args.install))
    else:
        _out(rules_text())
    return 0


def cmd_doctor(args) -> int:
    from .doctor import run_doctor
    checks = run_doctor(getattr(args, "config", None), thorough=args.thorough)
    if not _json_done(args, [c.__dict__ for c in checks]):
        width = max(len(c.name) for c in checks)
        mark = {True: "ok ", False: "NO ", None: "-- "}
        _out("\n".join(f"{mark[c.ok]} {c.name:<{width}}  {c.detail}" for c in checks))
    return 1 if any(c.ok is False for c in checks) else 0


def cmd_eval(args) -> int:
    from . import db, vault
    from .evaluate import evaluate, judged_not_indexed, load_golden
    from .search import SearchHooks, search
    cfg = _config(args)
    cfg.require_sources()
    provider = cfg.embedding.provider != "none"
    con = db.connect(cfg.db_path, readonly=True, vectors=provider)
    golden = load_golden(args.golden)
    missing, judged = judged_not_indexed(con, golden)
    if missing and len(missing) == judged:
        raise RecallError(f"none of the {judged} files judged in {args.golden} is in the index of {cfg.path}",
                          "index the notes it was judged on and name their config; for the sample set: "
                          "recall --config golden/recall.yaml index, then eval with the same --config")
    if missing:
        sys.stderr.write(f"recall: warning: {len(missing)} of {judged} judged files are not in the index "
                         f"(e.g. {missing[0]}); queries that need them score lower\n")

    hooks = SearchHooks(require_open=vault.require_open, load_values=vault.load_values)

    def run_query(q, mode, n):
        plain = mode.replace("+rerank", "")
        return [h.relpath for h in search(con, cfg, q, n=n, mode=plain, rerank=plain != mode, remotes=False,
                                          hooks=hooks).hits]

    modes = args.mode or (["keyword", "semantic", "hybrid"] if provider else ["auto"])
    rows = [r for mode in modes for r in evaluate(golden, run_query, mode)]
    if _json_done(args, [r.__dict__ for r in rows]):
        return 0
    cells = {(r.qtype, r.mode): r for r in rows}
    width = max(9, *(len(m) for m in modes))
    _out(f"{'type':<11} {'queries':>7} {'metric':<9} " + " ".join(f"{m:>{width}}" for m in modes))
    for qtype in dict.fromkeys(r.qtype for r in rows):
        count = cells[(qtype, modes[0])].queries
        for metric, attr in (("recall@5", "recall5"), ("MRR@10", "mrr10"), ("nDCG@10", "ndcg10")):
            _out(f"{qtype:<11} {count:>7} {metric:<9} "
                 + " ".join(f"{getattr(cells[(qtype, m)], attr):>{width}.3f}" for m in modes))
    if args.verbose:
        for r in rows:
            if r.misses:
                _out(f"missed ({r.mode}, {r.qtype}): " + "; ".join(r.misses))
    return 0


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
        from .api import bound_echoes
        text = bound_echoes(str(exc), argv)
        sys.stderr.write(f"recall: {text[len('recall: '):] if text.startswith('recall: ') else text}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("recall: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:        # a full disk, a read-only or damaged DB: one line, not a traceback
        from .repair import explain
        err = explain(exc)
        if err is None:
            raise
        from .api import bound_echoes
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
