"""The `secret` verbs: sync, set, key backup, find, show, command, exec, get, log, restore, rotate-key."""
from __future__ import annotations

import sys

from ..errors import RecallError
from .output import _command, _json_done, _opened, _out, _said


def _vault(args):
    from ..vault import store as vault
    return (vault, *_opened(args))


def _waiting(line: str) -> None:
    sys.stderr.write(f"recall: {line}\n")


def cmd_secret_sync(args) -> int:
    vault, cfg, con = _vault(args)
    if not cfg.secrets:
        raise RecallError("no secrets files configured", "add 'secrets: [~/notes/secrets.yaml]' to the config")
    rep = vault.sync(con, cfg, prune=args.prune, notify=_waiting)
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
    target, rep = vault.restore(con, cfg, args.id, notify=_waiting)
    return _said(args, {"restored": args.id, "file": target, **rep.__dict__},
                 f"restored {args.id} into {target} (its values sealed); synced {rep.total} secrets")


def cmd_secret_set(args) -> int:
    from ..vault.inplace import read_value, set_value
    vault, cfg, con = _vault(args)
    what = f"{args.id}.{args.field}" if args.field else args.id
    value = read_value(f"New value for {what} (not shown; Enter ends it): ")
    where = set_value(cfg, args.id, args.field, value, notify=_waiting)
    rep = vault.sync(con, cfg, notify=_waiting)
    return _said(args, {"set": where, **rep.__dict__},
                 f"sealed a new value for {where} in its file; synced {rep.total} secrets")


def cmd_secret_key_backup(args) -> int:
    from ..vault.inplace import backup_key
    from ..vault.keyfile import key_path
    cfg, con = _opened(args)
    dest, key = backup_key(con, cfg, args.file), key_path(cfg.home)
    return _said(args, {"backup": str(dest)}, f"wrote a copy of the vault key to {dest} (0600): keep it off "
                 f"this machine; to restore it: cp {dest} {key} && chmod 600 {key}")


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
    from ..inventory import describe_status
    meta = vault.show(con, args.id, describe_status)
    return _said(args, meta, _secret_text(meta))


def cmd_secret_command(args) -> int:
    cmd = _command(args)
    vault, cfg, con = _vault(args)
    line = vault.command_line(con, args.id, cmd if len(cmd) != 1 else cmd[0], cfg)
    return _said(args, {"id": args.id, "command": line}, line)


def cmd_secret_exec(args) -> int:
    cmd = _command(args)
    vault, cfg, con = _vault(args)
    sys.stdout.flush()
    from ..vault.runner import secret_exec
    result = secret_exec(con, cfg, args.id, cmd, stdin=args.stdin, out=sys.stdout.buffer, err=sys.stderr.buffer)
    for note in result.notes:
        sys.stderr.write(f"recall: {note}\n")
    return result.code


def cmd_secret_get(args) -> int:
    from ..vault import reveal
    cfg, con = _opened(args)
    if args.show:
        reveal.reveal(con, cfg, args.id)     # asks and shows on /dev/tty, never on stdout
        return 0
    got = reveal.to_clipboard(con, cfg, args.id)
    return _said(args, got.__dict__, f"copied the value of {got.id} to the clipboard ({got.tool}); a detached "
                 f"`sh -c '{got.clearer}'` empties it in {got.clear_after} s and exits")


def cmd_secret_log(args) -> int:
    from ..vault import audit
    from ..vault.removed import listed
    cfg, con = _opened(args)
    rows = audit.entries(con, args.id, args.n)
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
    n = vault.rotate_key(con, cfg, notify=_waiting)
    _out(f"re-encrypted {n} secrets under a new key")
    return 0
