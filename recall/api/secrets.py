"""The vault's verbs of the library layer: sync, set, key backup, find, show, command, exec, get, log,
restore, rotate-key. None returns a value."""
from __future__ import annotations

from ..config import counted, told_as
from ..errors import RecallError
from .answer import Answer, answer, heard, opened


def secret_sync(config: str | None = None, *, prune: bool = False, notify=None) -> Answer:
    """`recall secret sync`: every secrets file read, its plain values sealed, the vault replaced;
    `notify(line)` hears that it waits for another writer of the vault."""
    from ..vault import store
    with opened(config, strict=False) as (cfg, con):
        cfg.require_files("secrets")
        rep = store.sync(con, cfg, prune=prune, notify=heard(notify))
        changes = f"{rep.added} added, {rep.updated} updated, {rep.removed} removed"
        lines = [f"synced {counted(rep.total, 'secret')}: {changes if rep.added or rep.updated or rep.removed else 'unchanged'}"
                 + (f"; {counted(rep.sealed, 'value')} sealed in {'its file' if rep.sealed == 1 else 'their files'} (ENC[...])"
                    if rep.sealed else "")
                 + (f"; {rep.embedded} metadata texts embedded" if rep.embedded else "")]
        if rep.removed_ids:
            lines.append(f"removed: {', '.join(rep.removed_ids)} — kept 30 days: 'recall secret restore ID' "
                         "writes one back into its file ('recall secret log' lists them)")
        return answer(rep.__dict__, "\n".join(lines), [f"warning: {w}" for w in rep.warnings], own=True)


def secret_restore(secret_id: str, config: str | None = None, *, notify=None) -> Answer:
    """`recall secret restore`: a secret a sync removed (30 days) written back into its file, sealed."""
    from ..vault import store
    with opened(config, strict=False) as (cfg, con):
        target, rep = store.restore(con, cfg, secret_id, notify=heard(notify))
        return answer({"restored": secret_id, "file": target, **rep.__dict__},
                      f"restored {secret_id} into {target} (its values sealed); synced {counted(rep.total, 'secret')}",
                      [f"warning: {w}" for w in rep.warnings])


def secret_set(secret_id: str, field: str | None = None, config: str | None = None, *, notify=None) -> Answer:
    """`recall secret set`: a value typed at the terminal (never echoed) or piped in, sealed into its
    file, then synced."""
    from ..vault import store
    from ..vault.inplace import read_value, set_value, still_written
    with opened(config, strict=False) as (cfg, con):
        what = f"{secret_id}.{field}" if field else secret_id
        value = read_value(f"New value for {what} (not shown; Enter ends it): ")
        written = set_value(con, cfg, secret_id, field, value, notify=heard(notify))
        del value
        where = written.what
        try:
            rep = store.sync(con, cfg, notify=heard(notify))
        except Exception as exc:     # the file holds the new value now: say so, not only what failed
            from ..db import explain
            fault = explain(exc)
            if fault is None:
                raise
            if not still_written(con, cfg, written):    # changed or unopenable since: never say it is kept
                raise RecallError(f"the new value for {where} was sealed in its file, but it is no longer there "
                                  f"as sealed or does not open with the vault key now: {fault.message}",
                                  "once that is fixed, set it again: 'recall secret set "
                                  f"{written.id}{' ' + written.field if written.field else ''}'") from None
            raise RecallError(f"the new value for {where} is sealed in its file, but the vault still has the old "
                              f"one: {fault.message}", "once that is fixed, run 'recall secret sync' (no need "
                              "to type the value again)") from None
        return answer({"set": where, **rep.__dict__},
                      f"sealed a new value for {where} in its file; synced {counted(rep.total, 'secret')}",
                      [f"warning: {w}" for w in rep.warnings])


def secret_key_backup(file: str, config: str | None = None) -> Answer:
    """`recall secret key backup FILE`: a 0600 copy of the vault key, to keep off this machine."""
    import shlex

    from ..vault.inplace import backup_key
    from ..vault.keyfile import key_path
    with opened(config, strict=False) as (cfg, con):
        dest, key = backup_key(con, cfg, file), key_path(cfg.home)
        src, to = shlex.quote(str(dest)), shlex.quote(str(key))
        return answer({"backup": str(dest)}, f"wrote a copy of the vault key to {dest} (0600): keep it off "
                      f"this machine; to restore it: cp {src} {to} && chmod 600 {to}")


def secret_text(meta: dict) -> str:
    """One secret's metadata as the CLI prints it."""
    kinds = ", ".join(x for x in (meta.get("kind"), meta.get("service"), meta.get("environment")) if x)
    lines = [f"{meta['id']}  ({kinds})"]
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


def secret_find(query: str = "", config: str | None = None, *, limit: int | None = None) -> Answer:
    """`recall secret find` / recall_secret_find: secrets ranked by their metadata (an empty query
    lists them, bounded); `data` is the list, `code` stays 0; the total rides in the text."""
    from ..vault import store
    with opened(config, strict=False) as (cfg, con):     # metadata holds no value (sync refuses one)
        cfg.require_files("secrets")
        query = query.strip()
        found = store.find(con, query, cfg=cfg, limit=limit or (10 if query else 50))
        total = store.count(con) if not query else len(found)
        why = "" if found else _why_none(con, cfg)
        shown = "\n".join(secret_text(m) for m in found) if found else "no secrets match — " + (why or (
            "try service, kind or environment words, or 'recall secret find' alone to list them all"))
        if found and not query:            # the whole list, bounded: say how many there are
            shown += f"\n({len(found)} of {counted(total, 'secret')}" + (": name words to narrow it)" if total > len(found)
                                                             else ")")
        return answer(found, shown, total=total, why_none=why, own=not found)


def _why_none(con, cfg) -> str:
    """Why find lists nothing, when the words are not the reason: a secret written but not synced, or none yet."""
    from ..vault import store
    waiting = store.unsynced(con, cfg)
    if waiting:
        return (f"{', '.join(waiting)} {'is' if len(waiting) == 1 else 'are'} written in a secrets file but not "
                "synced yet: run 'recall secret sync'")
    if not store.count(con):
        return f"the vault holds no secrets yet: add one to {cfg.secrets[0]}, then run 'recall secret sync'"
    return ""


def secret_show(secret_id: str, config: str | None = None) -> Answer:
    """`recall secret show` / recall_secret_show: metadata, use line, variables, last verified."""
    from ..inventory import describe_status
    from ..vault import store
    with opened(config, strict=False) as (cfg, con):     # metadata: readable without the crypto extra
        meta = store.show(con, secret_id, describe_status, cfg)
        return answer(meta, secret_text(meta))


def secret_command(secret_id: str, command=None, config: str | None = None) -> Answer:
    """`recall secret command` / recall_secret_command: the one shell line that runs `command` (argv or
    a shell line; empty: the secret's `use`) with the secret injected and its output masked."""
    from ..vault import store
    with opened(config, strict=False) as (cfg, con):     # a line naming the secret, never its value
        line = store.command_line(con, secret_id, command or None, cfg)
        return answer({"id": secret_id, "command": line}, line, _names_unset(con, cfg, secret_id, command))


def secret_exec(secret_id: str, argv: list, config: str | None = None, *, stdin: bool = False,
                out=None, err=None) -> Answer:
    """`recall secret exec`: argv run with the secret injected, its output masked as it streams to
    `out`/`err`; the Answer's code is the child's, its notices what the person should know."""
    from ..vault.runner import secret_exec as run
    with opened(config) as (cfg, con):
        result = run(con, cfg, secret_id, argv, stdin=stdin, out=out, err=err)
        return answer({"code": result.code}, "", result.notes + _names_unset(con, cfg, secret_id, argv), result.code)


def _names_unset(con, cfg, secret_id: str, command) -> list:
    """The notice for a command that names variables and none of those the secret sets (`$TOKEN` for
    JIRA_API_TOKEN, a typo): its child gets an empty one, and the agent a puzzle."""
    import json
    import re

    from ..vault import store
    text = command if isinstance(command, str) else " ".join(command or ())
    named = sorted(set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text)))
    row = store.row_named(con, secret_id, cfg) if named else None
    sets = sorted(json.loads(row["variables"])) if row is not None else []
    if not sets or set(named) & set(sets):
        return []
    return [f"the command names ${', $'.join(named)}, and secret '{row['id']}' sets {', '.join(sets)}: "
            f"a variable it does not set is empty in the child"]


def secret_get(secret_id: str, config: str | None = None, *, show: bool = False) -> Answer:
    """`recall secret get`: the value to the clipboard (cleared after 45 s), or with `show` on the
    controlling terminal after a typed word — for a person only, never on stdout."""
    from ..vault import reveal
    with opened(config) as (cfg, con):
        if show:
            reveal.reveal(con, cfg, secret_id)     # asks and shows on /dev/tty, never on stdout
            return answer({}, "")
        got = reveal.to_clipboard(con, cfg, secret_id)
        return answer(got.__dict__, f"copied the value of {got.id} to the clipboard ({got.tool}); a detached "
                      f"`sh -c '{got.clearer}'` empties it in {got.clear_after} s and exits")


def secret_log(secret_id: str | None = None, config: str | None = None, *, limit: int = 50) -> Answer:
    """`recall secret log`: the access log (newest last), and the secrets a sync removed (restorable)."""
    from ..vault import audit
    from ..vault.removed import listed
    with opened(config, strict=False) as (cfg, con):
        rows = audit.entries(con, secret_id, limit)
        gone = [g for g in listed(con) if not secret_id or g.id == secret_id]
        lines = []
        for r in rows:
            code = "" if r["exit_code"] is None else f" exit {r['exit_code']}"
            lines.append(f"{r['time']}  {r['caller']}({r['parent']})  {r['verb']:<15} {r['target']}  "
                         f"{r['verdict']}{code}  {r['argv']}".rstrip())
        if gone:
            lines.append(f"removed by a sync, restorable with '{told_as(config)} secret restore ID':")
            lines += [f"  {g.id}  from {g.file}:{g.line}  until {g.until}" for g in gone]
        return answer(rows, "\n".join(lines))


def secret_rotate_key(config: str | None = None, *, notify=None) -> Answer:
    """`recall secret rotate-key`: every row and every sealed value re-encrypted under a new key."""
    from ..vault import store
    from ..vault.inplace import backup_state
    with opened(config, strict=False) as (cfg, con):
        n = store.rotate_key(con, cfg, notify=heard(notify))
        kept, why = backup_state(con, cfg.home)        # a copy made before opens none of it now
        return answer({"reencrypted": n}, f"re-encrypted {counted(n, 'secret')} under a new key",
                      [] if kept or not n else [why])
