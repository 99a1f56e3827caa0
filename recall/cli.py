"""argparse: parse → call ONE core function → format text or --json → exit code."""
from __future__ import annotations

import argparse
import json
import sys

from .errors import RecallError

EX_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        sys.stderr.write(f"recall: {message}\n")
        sys.exit(EX_USAGE)


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--config", default=argparse.SUPPRESS, help="config file (default: RECALL_CONFIG, "
                   "then ~/.config/recall/config.yaml)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    return p


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _Parser(prog="recall", parents=[common],
                     description="Notes search, a vault that never shows values, and how to reach "
                                 "each system — for you and your agent.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("index", parents=[common], help="index the configured sources (incremental)")
    p.add_argument("--full", action="store_true", help="re-read every file")
    p.add_argument("--no-embed", action="store_true", help="skip embeddings (keyword index only)")
    p.add_argument("--source", metavar="NAME", help="only this source")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", parents=[common], help="search the notes")
    p.add_argument("query", nargs="+", help="words, identifiers, or a question")
    p.add_argument("-n", type=int, default=10, help="number of hits (default 10)")
    p.add_argument("--mode", default="auto", choices=["auto", "keyword", "semantic", "hybrid"])
    p.add_argument("--rerank", action="store_true", help="rerank the top hits (costs one API call)")
    p.add_argument("--explain", action="store_true", help="show ranks, scores and the route")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("read", parents=[common], help="print a note's section with line numbers")
    p.add_argument("target", metavar="PATH[:LINE]")
    p.add_argument("--max-chars", type=int, default=8000)
    p.add_argument("--offset", type=int, default=0, help="lines to skip (from a previous read's hint)")
    p.set_defaults(func=cmd_read)

    p = sub.add_parser("doctor", parents=[common], help="what works here")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("eval", parents=[common], help="score search against golden queries")
    p.add_argument("golden", metavar="GOLDEN.jsonl")
    p.add_argument("--mode", action="append", choices=["auto", "keyword", "semantic", "hybrid"],
                   help="mode(s) to score (default: auto)")
    p.add_argument("-v", "--verbose", action="store_true", help="list the queries that missed")
    p.set_defaults(func=cmd_eval)
    return parser


# -- helpers ------------------------------------------------------------------------------------

def _out(text: str = "") -> None:
    sys.stdout.write(text + ("\n" if not text.endswith("\n") else ""))


def _json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


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

def cmd_index(args) -> int:
    from .index import run_index
    cfg = _config(args)
    cfg.require_sources()
    con = _db(cfg)
    report = run_index(con, cfg, full=args.full, only=args.source, progress=_Progress())
    if getattr(args, "json", False):
        _json(report.__dict__)
        return 0
    for path, why in report.skipped:
        sys.stderr.write(f"recall: skipped {path}: {why}\n")
    for path, what in report.warnings:
        sys.stderr.write(f"recall: {path}: {what}\n")
    _out(f"indexed: {report.new} new, {report.changed} changed, {report.removed} removed, "
         f"{report.unchanged} unchanged files; {report.chunks} chunks written; "
         f"{len(report.skipped)} skipped; {report.seconds:.2f}s")
    return 0


def cmd_search(args) -> int:
    from .search import search
    cfg = _config(args)
    cfg.require_sources()
    con = _db(cfg, readonly=True)
    result = search(con, cfg, " ".join(args.query), n=args.n, mode=args.mode, rerank=args.rerank,
                    explain=args.explain)
    if getattr(args, "json", False):
        _json(result.public())
        return 0
    for notice in result.notices:
        sys.stderr.write(f"recall: {notice}\n")
    if not result.hits and not result.access:
        _out(f"no notes match {result.query!r}")
        return 0
    lines = []
    for i, h in enumerate(result.hits, start=1):
        lines.append(f"{i}. {h.relpath}:{h.line}  {h.date}  [{h.source}]")
        lines.append(f"   {h.breadcrumb}")
        lines.append(f"   {h.snippet}")
        if h.explain:
            lines.append("   explain: " + json.dumps(h.explain, sort_keys=True))
    _out("\n".join(lines))
    return 0


def cmd_read(args) -> int:
    from .read import read_note
    cfg = _config(args)
    con = _db(cfg, readonly=True)
    res = read_note(con, cfg, args.target, max_chars=args.max_chars, offset=args.offset)
    if getattr(args, "json", False):
        _json(res.public())
        return 0
    _out(f"{res.source}:{res.relpath} lines {res.start_line}-{res.end_line} of {res.range_end}")
    sys.stdout.write(res.text)
    if res.next_offset is not None:
        _out(f"… more: recall read {args.target} --offset {res.next_offset}")
    return 0


def cmd_doctor(args) -> int:
    from .doctor import run_doctor
    checks = run_doctor(_config(args))
    if getattr(args, "json", False):
        _json([c.__dict__ for c in checks])
    else:
        width = max(len(c.name) for c in checks)
        _out("\n".join(f"{'ok ' if c.ok else 'NO '} {c.name:<{width}}  {c.detail}" for c in checks))
    return 0 if all(c.ok for c in checks if c.name in ("python", "fts5")) else 1


def cmd_eval(args) -> int:
    from .evaluate import evaluate, load_golden
    from .search import search
    cfg = _config(args)
    cfg.require_sources()
    con = _db(cfg, readonly=True)
    golden = load_golden(args.golden)

    def run_query(q, mode):
        return [h.relpath for h in search(con, cfg, q, n=10, mode=mode).hits]

    rows = [r for mode in (args.mode or ["auto"]) for r in evaluate(golden, run_query, mode)]
    if getattr(args, "json", False):
        _json([r.__dict__ for r in rows])
        return 0
    _out(f"{'mode':<9} {'type':<11} {'queries':>7} {'recall@5':>9} {'MRR@10':>7} {'nDCG@10':>8}")
    for r in rows:
        _out(f"{r.mode:<9} {r.qtype:<11} {r.queries:>7} {r.recall5:>9.3f} {r.mrr10:>7.3f} {r.ndcg10:>8.3f}")
        if args.verbose and r.misses:
            _out("   missed: " + "; ".join(r.misses))
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except RecallError as exc:
        sys.stderr.write(f"recall: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("recall: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
