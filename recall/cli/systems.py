"""The verbs about systems and the agent: access, verify, remote install, mcp, instructions, doctor."""
from __future__ import annotations

import sys

from .. import api
from .output import _command, config_of, emit


def cmd_access_find(args) -> int:
    return emit(args, api.access_find(" ".join(args.query), config_of(args)))


def cmd_access_show(args) -> int:
    return emit(args, api.access_show(args.id, config_of(args)))


def cmd_access_exec(args) -> int:
    cmd = _command(args)
    sys.stdout.flush()
    ans = api.access_exec(args.id, cmd, config_of(args), out=sys.stdout.buffer, err=sys.stderr.buffer)
    return emit(None, ans)


def cmd_verify(args) -> int:
    return emit(args, api.verify(args.ids, config_of(args), dry_run=args.dry_run, timeout=args.timeout))


def cmd_remote_install(args) -> int:
    return emit(args, api.remote_install(args.host, args.path, config_of(args), ssh_config=args.ssh_config))


def cmd_mcp(args) -> int:
    import os

    from ..mcp_server import serve
    if config_of(args):
        os.environ["RECALL_CONFIG"] = args.config
    return serve()


def cmd_instructions(args) -> int:
    return emit(args, api.instructions(args.install, config_of(args)))


def cmd_doctor(args) -> int:
    return emit(args, api.doctor(config_of(args), thorough=args.thorough))
