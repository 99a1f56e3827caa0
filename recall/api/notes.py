"""The notes verbs of the library layer: init, index (and watch), search, read, eval."""
from __future__ import annotations

from ..config import counted, told_as
from ..errors import RecallError
from .answer import Answer, answer, heard, opened, scrub


def init(config: str | None = None, notes: str | None = None) -> Answer:
    """`recall init`: a starter config (refused when one is there), its notes folder, a secrets file
    and an inventory beside it; the next commands to run."""
    import os
    import shlex

    from ..config import default_config_path
    from ..starter import init as start
    recall = f"recall --config {shlex.quote(config)}" if config else "recall"
    started = start(config or os.environ.get("RECALL_CONFIG") or default_config_path(), notes, recall=recall)
    width = max(len(cmd) for cmd, _ in started.next)
    shown = "\n".join([
        f"wrote {started.config}: notes in {started.notes}; credentials in {started.secrets} (0600, "
        f"outside the notes); systems in {started.inventory}",
        "next:", *(f"  {cmd:<{width}}  # {what}" for cmd, what in started.next),
        f"credentials: add them to {started.secrets}, then '{recall} secret sync'"])
    return answer(started.__dict__, shown)


def index(config: str | None = None, *, full: bool = False, source: str | None = None, embed: bool = True,
          prune: bool = False, remote: str | None = None, progress=None, notify=None) -> Answer:
    """`recall index`: the vault's redactor and values wired in; `--full` rebuilds a broken DB;
    `remote`: the index run on that remote, over ssh. `notify(line)` hears each remark as it happens."""
    with opened(config, connect=False) as (cfg, _):
        if remote:
            from ..remote import index_remote
            data = index_remote(cfg, remote, full=full)
            return answer(data, f"indexed on {remote}: {data['new']} new, {data['changed']} changed, "
                                f"{data['removed']} removed, {data['unchanged']} unchanged files; "
                                f"{counted(data['chunks'], 'chunk')} written; {data['seconds']:.2f}s")
        from ..db.repair import index_repairing
        from ..notes.index import run_index
        from ..vault import door, pending, store
        cfg.require_sources()
        embed = embed and cfg.embedding.provider != "none"
        said = heard(notify)

        def run(con):                   # answered on the run's DB, so its vault's values are masked in it
            report = run_index(con, cfg, full=full, only=source, progress=progress, embed=embed, notify=said,
                               redactor=store.redactor, load_values=store.load_values, prune=prune,
                               catch_up=pending.redact_index)
            vectors = (f"; {report.embedded} embedded" + (f" ({report.tokens:,} tokens billed)" if report.tokens
                                                          else "") if embed else "")
            notices = [f"skipped {path}: {why}" for path, why in report.skipped]
            notices += [f"{path}: {what}" for path, what in report.warnings]
            with door.bound(cfg, con):
                return answer(report.__dict__, f"indexed: {report.new} new, {report.changed} changed, "
                                               f"{report.removed} removed, {report.unchanged} unchanged files; "
                                               f"{counted(report.chunks, 'chunk')} written; {len(report.skipped)} "
                                               f"skipped{vectors}; {report.seconds:.2f}s", notices, own=True)
        return index_repairing(cfg.db_path, run, full=full, vectors=embed, notify=said,
                               holds_values=store.holds_values)


_FOLLOWING: list = []          # the watchers this process runs (recall mcp's): searches say when they cannot follow
FIRST_PASS_S = 8.0             # a search waits this long for recall mcp's first index pass (a new index: all of it)


def watcher(cfg=None, report=lambda kind, result: None):
    """The sources followed (notes.watch.Watcher) with the vault's redactor and values, as `index` has
    them; the config (`cfg`'s file; None: RECALL_CONFIG or the default) loaded again when it changes
    or is fixed."""
    from ..config import load_config
    from ..notes.watch import Watcher
    from ..vault import pending, store
    path = None if cfg is None or cfg.path is None else str(cfg.path)
    return Watcher(cfg, reload=lambda: load_config(path), redactor=store.redactor,
                   load_values=store.load_values, report=report, catch_up=pending.redact_index)


def follow() -> None:
    """Follow the sources for as long as this process serves (recall mcp): the watcher started and kept,
    so every search answer says when it cannot follow, and why."""
    from ..config import load_config
    try:
        cfg = load_config()
    except RecallError:               # the watcher loads it again until it is fixed
        cfg = None
    try:
        _FOLLOWING.append(watcher(cfg).start())
    except RecallError:               # a bad RECALL_WATCH: serve the index as it is (doctor says why)
        pass


def stop_following() -> None:
    for w in _FOLLOWING:
        w.stop()
    _FOLLOWING.clear()


def _first_pass(wait_s: float) -> bool:
    """Wait at most `wait_s` for the first pass of this process's watchers (the one that indexes what
    changed while no server ran, or every note of a new index), then for an index file removed or
    replaced to be made again (Watcher.due); is one of them still running?"""
    import time
    deadline = time.monotonic() + wait_s
    for w in _FOLLOWING:
        w.settled.wait(max(0.0, deadline - time.monotonic()))
    while any(w.due() for w in _FOLLOWING) and time.monotonic() < deadline:
        time.sleep(0.02)
    return any(not w.settled.is_set() or w.due() for w in _FOLLOWING)


def _not_following(cfg, indexing: bool) -> tuple:
    """(stale source names, notices) while a watcher of this process cannot follow the sources, or
    is still in its first pass (`indexing`)."""
    said = [why for why in (w.trouble() for w in _FOLLOWING) if why]
    notices = [f"results may be behind the notes: they are not being followed right now ({why}); "
               "following resumes by itself" for why in said]
    if indexing and not said:
        notices.append(f"the notes are still being indexed ({', '.join(str(s.path) for s in cfg.sources)}): "
                       "these results hold only what is indexed so far; search again in a minute")
    return ([s.name for s in cfg.sources] if said or indexing else []), notices


def watch(config: str | None = None, said=lambda ans: None) -> None:
    """`recall index --watch`: each change indexed as it happens; `said(Answer)` hears the start and
    each pass that changed something. Runs until interrupted."""
    with opened(config, connect=False) as (cfg, _):
        def passed(kind, rep):
            if kind == "index" and (rep.new or rep.changed or rep.removed):
                said(answer(rep.__dict__, f"indexed: {rep.new} new, {rep.changed} changed, {rep.removed} "
                                          f"removed files; {counted(rep.chunks, 'chunk')} written; {rep.seconds:.2f}s"))
            elif kind == "trouble":            # following stopped for now: why; it resumes by itself
                said(answer({}, notices=[f"not following the notes right now: {rep}"]))
            elif kind == "embed" and rep.embedded:
                said(answer(rep.__dict__, f"embedded: {counted(rep.embedded, 'chunk')}"
                                          + (f" ({rep.tokens:,} tokens billed)" if rep.tokens else "")))
        w = watcher(cfg, report=passed)
        if w.how == "off":
            raise RecallError("RECALL_WATCH=off: nothing to watch with", "unset RECALL_WATCH (or set it to auto)")
        said(answer({}, notices=[f"watching {len(cfg.sources)} source(s) with {w.how}; Ctrl-C stops"]))
        w.run()


def search_hooks(cfg, *, local: bool = False):
    """The vault, and (unless `local`) the inventory's pins and the remotes when the config names them."""
    from ..notes.search import SearchHooks
    from ..vault import store
    ask = pins = None
    if cfg.remotes and not local:
        from ..remote import ask_remotes as ask
    if cfg.inventory and not local:
        from ..inventory import pin_access as pins
    return SearchHooks(ask_remotes=ask, pins=pins, require_open=store.require_open, load_values=store.load_values)


def search(query: str, config: str | None = None, *, n: int = 10, mode: str = "auto", rerank: bool = False,
           explain: bool = False, local: bool = False) -> Answer:
    """`recall search` / recall_search: pins, remotes and the notices of sources changed or missing
    since the last index run, wired in here for both faces."""
    from ..db.lock import index_running
    from ..notes.query import parse_query
    from ..notes.search import needs_vectors
    from ..notes.search import search as run
    from ..notes.walk import behind, missing_sources, no_note_yet
    q = parse_query(query)                 # once: the route, both lists, the snippets
    indexing = bool(_FOLLOWING) and _first_pass(FIRST_PASS_S)     # recall mcp just started
    with opened(config, readonly=True, need_sources=True,
                vectors=lambda cfg: needs_vectors(cfg, q, mode)) as (cfg, con):
        typed = scrub(query)            # a vault value typed into a query: to no provider, reranker or remote
        if typed != query:              # (the index holds it as [recall:ID] too)
            q = parse_query(typed)
        result = run(con, cfg, q, n=n, mode=mode, rerank=rerank, explain=explain, remotes=not local,
                     hooks=search_hooks(cfg))
        data = result.public()
        # `recall index` in another shell, asked only when nothing matched (the look takes its lock
        # for an instant, which an index run starting in that instant would wait out)
        running = None if _FOLLOWING or result.hits else index_running(cfg.db_path)
        if not result.hits and not (indexing or running):    # before the route --explain adds last
            at = len(data["notices"]) - explain
            data["notices"][at:at] = no_note_yet(con, cfg)
        if _FOLLOWING:          # a watcher follows the sources: it says when it cannot
            data["stale"], behind_it = _not_following(cfg, indexing)
            data["notices"] += behind_it + missing_sources(cfg.sources)
        else:
            data["stale"] = stale = behind(con, cfg)
            data["notices"] += missing_sources(cfg.sources)
            if running:
                data["notices"].append(f"an index run (pid {running}) is writing the index now: these results "
                                       "hold what it has written so far")
            elif stale:
                data["notices"].append(f"{', '.join(stale)} changed since the last index run: 'recall index' "
                                       "brings the results up to date ('recall index --watch' keeps them so)")
        return answer(data, _search_text(result, config), data["notices"])


def _search_text(result, config: str | None) -> str:
    from ..notes.query import NO_PROVIDER
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
                     f"meaning — see '{told_as(config)} doctor')")
    return "\n".join(lines)


def read_header(data: dict) -> str:
    """The first line of a read, the same for both faces: where, and which lines of how many."""
    return (f"{data['source']}:{data['relpath']} lines {data['start_line']}-{data['end_line']} of "
            f"{data['total_lines'] or data['range_end']}")


def read(target: str, config: str | None = None, *, max_chars: int = 8000, offset: int = 0) -> Answer:
    """`recall read` / recall_read: a note or section, redacted by the vault's values; NAME:path reads
    a remote's. The text is the header and the numbered lines, and how to continue when cut."""
    from ..notes.read import read_note
    from ..vault.store import redactor

    def read_remote(cfg, name, target, **kw):
        from ..remote import read_remote  # loaded only for a NAME:path on a configured remote
        return read_remote(cfg, name, target, **kw)
    if _FOLLOWING:                    # recall mcp just started: its first pass makes the index
        _first_pass(FIRST_PASS_S)
    with opened(config, readonly=True) as (cfg, con):
        res = read_note(con, cfg, target, redactor=redactor, max_chars=max_chars, offset=offset,
                        read_remote=read_remote)
        data = res.public()
        more = "" if res.next_offset is None else f"… more: {told_as(config)} read {target} --offset {res.next_offset}\n"
        body = res.text if res.text.endswith("\n") or not res.text else res.text + "\n"
        return answer(data, read_header(data) + "\n" + body + more)


def evaluate(golden: str, config: str | None = None, *, modes=None, verbose: bool = False) -> Answer:
    """`recall eval`: recall@5, MRR@10 and nDCG@10 per query type and mode over judged queries."""
    from ..notes.evaluate import evaluate as score
    from ..notes.evaluate import judged_not_indexed, load_golden
    from ..notes.search import search as run

    def provider(cfg) -> bool:
        return cfg.embedding.provider != "none"
    with opened(config, readonly=True, need_sources=True, vectors=provider) as (cfg, con):
        items = load_golden(golden)
        missing, judged = judged_not_indexed(con, items)
        if missing and len(missing) == judged:
            raise RecallError(f"none of the {counted(judged, 'file')} judged in {golden} is in the index of {cfg.path}",
                              "index the notes it was judged on and name their config; for the sample set: "
                              "recall --config golden/recall.yaml index, then eval with the same --config")
        notices = [f"warning: {len(missing)} of {judged} judged files are not in the index (e.g. {missing[0]}); "
                   "queries that need them score lower"] if missing else []
        hooks = search_hooks(cfg, local=True)          # the vault only: no pins, no remotes

        def run_query(q, mode, n):
            plain = mode.replace("+rerank", "")
            return [h.relpath for h in run(con, cfg, q, n=n, mode=plain, rerank=plain != mode, remotes=False,
                                           hooks=hooks, snippets=False).hits]

        modes = modes or (["keyword", "semantic", "hybrid"] if provider(cfg) else ["auto"])
        rows = [r for mode in modes for r in score(items, run_query, mode)]
        cells = {(r.qtype, r.mode): r for r in rows}
        width = max(9, *(len(m) for m in modes))
        lines = [f"{'type':<11} {'queries':>7} {'metric':<9} " + " ".join(f"{m:>{width}}" for m in modes)]
        for qtype in dict.fromkeys(r.qtype for r in rows):
            count = cells[(qtype, modes[0])].queries
            for metric, attr in (("recall@5", "recall5"), ("MRR@10", "mrr10"), ("nDCG@10", "ndcg10")):
                lines.append(f"{qtype:<11} {count:>7} {metric:<9} "
                             + " ".join(f"{getattr(cells[(qtype, m)], attr):>{width}.3f}" for m in modes))
        if verbose:
            lines += [f"missed ({r.mode}, {r.qtype}): " + "; ".join(r.misses) for r in rows if r.misses]
        return answer([r.__dict__ for r in rows], "\n".join(lines), notices)
