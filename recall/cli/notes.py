"""The notes verbs: init, index (and --watch), search, read, eval."""
from __future__ import annotations

import sys

from ..errors import RecallError
from .output import _config, _json_done, _out, _Progress


def cmd_init(args) -> int:
    import os
    import shlex

    from ..config import default_config_path, init
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
        from ..remote import index_remote
        data = index_remote(cfg, args.remote, full=args.full)
        if not _json_done(args, data):
            _out(f"indexed on {args.remote}: {data['new']} new, {data['changed']} changed, {data['removed']} "
                 f"removed, {data['unchanged']} unchanged files; {data['chunks']} chunks written; "
                 f"{data['seconds']:.2f}s")
        return 0
    from .. import api
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
    from .. import api

    def said(kind, rep):
        if kind == "index" and (rep.new or rep.changed or rep.removed):
            _out(f"indexed: {rep.new} new, {rep.changed} changed, {rep.removed} removed files; "
                 f"{rep.chunks} chunks written; {rep.seconds:.2f}s")
        elif kind == "embed" and rep.embedded:
            _out(f"embedded: {rep.embedded} chunks" + (f" ({rep.tokens:,} tokens billed)" if rep.tokens else ""))
        sys.stdout.flush()
    w = api.watcher(cfg, report=said)
    if w.how == "off":
        raise RecallError("RECALL_WATCH=off: nothing to watch with", "unset RECALL_WATCH (or set it to auto)")
    sys.stderr.write(f"recall: watching {len(cfg.sources)} source(s) with {w.how}; Ctrl-C stops\n")
    try:
        w.run()
    except KeyboardInterrupt:
        sys.stderr.write("recall: stopped watching\n")
    return 0


def cmd_search(args) -> int:
    from .. import api, db
    from ..notes.query import NO_PROVIDER, parse_query
    from ..notes.search import needs_vectors, search
    from ..notes.walk import behind, missing_sources
    cfg = _config(args)
    cfg.require_sources()
    query = parse_query(" ".join(args.query))                 # once: the route, both lists, the snippets
    con = db.connect(cfg.db_path, readonly=True, vectors=needs_vectors(cfg, query, args.mode))
    result = search(con, cfg, query, n=args.n, mode=args.mode, rerank=args.rerank,
                    explain=args.explain, remotes=not args.local, hooks=api.search_hooks(cfg))
    data = result.public()
    data["stale"] = stale = behind(con, cfg)
    data["notices"] += missing_sources(cfg.sources)
    if stale:
        data["notices"].append(f"{', '.join(stale)} changed since the last index run: 'recall index' brings the "
                               "results up to date ('recall index --watch' keeps them so)")
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
    from .. import api
    with api.opened(getattr(args, "config", None), readonly=True) as (cfg, con):
        res = api.read(con, cfg, args.target, max_chars=args.max_chars, offset=args.offset)
    if _json_done(args, res.public()):
        return 0
    _out(f"{res.source}:{res.relpath} lines {res.start_line}-{res.end_line} of {res.total_lines or res.range_end}")
    sys.stdout.write(res.text)
    if res.next_offset is not None:
        _out(f"… more: recall read {args.target} --offset {res.next_offset}")
    return 0


def cmd_eval(args) -> int:
    from .. import api, db
    from ..notes.evaluate import evaluate, judged_not_indexed, load_golden
    from ..notes.search import search
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

    hooks = api.search_hooks(cfg, local=True)          # the vault only: no pins, no remotes

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
