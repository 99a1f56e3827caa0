"""The `secret` verbs: sync, set, key backup, find, show, command, exec, get, log, restore, rotate-key."""
from __future__ import annotations

import sys

from .. import api
from .output import _command, config_of, emit, say


def cmd_secret_sync(args) -> int:
    return emit(args, api.secret_sync(config_of(args), prune=args.prune, notify=say))


def cmd_secret_restore(args) -> int:
    return emit(args, api.secret_restore(args.id, config_of(args), notify=say))


def cmd_secret_set(args) -> int:
    return emit(args, api.secret_set(args.id, args.field, config_of(args), notify=say))


def cmd_secret_key_backup(args) -> int:
    return emit(args, api.secret_key_backup(args.file, config_of(args)))


def cmd_secret_find(args) -> int:
    return emit(args, api.secret_find(" ".join(args.query), config_of(args)))


def cmd_secret_show(args) -> int:
    return emit(args, api.secret_show(args.id, config_of(args)))


def cmd_secret_command(args) -> int:
    cmd = _command(args)
    return emit(args, api.secret_command(args.id, cmd if len(cmd) != 1 else cmd[0], config_of(args)))


def cmd_secret_exec(args) -> int:
    cmd = _command(args)
    sys.stdout.flush()
    ans = api.secret_exec(args.id, cmd, config_of(args), stdin=args.stdin, out=sys.stdout.buffer,
                          err=sys.stderr.buffer)
    return emit(None, ans)


def cmd_secret_get(args) -> int:
    return emit(args, api.secret_get(args.id, config_of(args), show=args.show))


def cmd_secret_log(args) -> int:
    return emit(args, api.secret_log(args.id, config_of(args), limit=args.n))


def cmd_secret_rotate(args) -> int:
    return emit(args, api.secret_rotate_key(config_of(args), notify=say))
