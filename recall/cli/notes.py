"""The notes verbs: init, index (and --watch), search, read, eval."""
from __future__ import annotations

import sys

from .. import api
from .output import Progress, config_of, emit, say


def cmd_init(args) -> int:
    return emit(args, api.init(config_of(args), args.notes))


def cmd_index(args) -> int:
    code = emit(args, api.index(config_of(args), full=args.full, source=args.source, embed=not args.no_embed,
                                prune=args.prune, remote=args.remote, progress=Progress(), notify=say))
    return _watch(args) if args.watch and not args.remote else code


def _watch(args) -> int:
    """`index --watch`: each change indexed as it happens, one line a pass that changed something."""
    def said(ans):
        emit(args, ans)
        sys.stdout.flush()
    try:
        api.watch(config_of(args), said)
    except KeyboardInterrupt:
        say("stopped watching")
    return 0


def cmd_search(args) -> int:
    return emit(args, api.search(" ".join(args.query), config_of(args), n=args.n, mode=args.mode,
                                 rerank=args.rerank, explain=args.explain, local=args.local))


def cmd_read(args) -> int:
    return emit(args, api.read(args.target, config_of(args), max_chars=args.max_chars, offset=args.offset))


def cmd_eval(args) -> int:
    return emit(args, api.evaluate(args.golden, config_of(args), modes=args.mode, verbose=args.verbose))
