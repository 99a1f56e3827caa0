"""The verbs about systems and the agent: access, verify, remote install, mcp, instructions, doctor."""
from __future__ import annotations

import sys

from .output import _command, _config, _json_done, _opened, _out, _said


def _inventory(args):
    from .. import api, inventory
    cfg, con = _opened(args)
    return inventory, cfg, con, api.entries(cfg, con)


def cmd_access_find(args) -> int:
    inventory, cfg, con, entries = _inventory(args)
    found = [inventory.describe(con, e) for e in inventory.find(entries, " ".join(args.query))]
    return _said(args, found, "\n\n".join(d["block"] for d in found) if found else "no inventory entries match")


def cmd_access_show(args) -> int:
    inventory, cfg, con, entries = _inventory(args)
    d = inventory.describe(con, inventory.get_entry(entries, args.id))
    return _said(args, d, d["block"])


def cmd_access_exec(args) -> int:
    from ..access import exec_entry
    cmd = _command(args)
    cfg, con = _opened(args)
    sys.stdout.flush()
    line = cmd[0] if len(cmd) == 1 else cmd       # one word: a shell line ('a | b'); more: quoted words
    result = exec_entry(con, cfg, args.id, line, out=sys.stdout.buffer, err=sys.stderr.buffer)
    if result.context:
        sys.stderr.write(f"recall: kubectl gets --context {result.context} (this entry's context)\n")
    for note in result.notes:
        sys.stderr.write(f"recall: {note}\n")
    return result.code


def cmd_verify(args) -> int:
    from .. import api
    from ..inventory import show_step
    cfg, con = _opened(args)
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
        note = ("  (nothing failed; skipped ones did not run: see why above)"
                if report.counts()["skipped"] and code == 0 else "")
        _out(f"summary: {report.summary()}{note}")
    return code


def cmd_remote_install(args) -> int:
    from ..remote import install
    rep = install(args.host, args.path, ssh_config=args.ssh_config, cfg=_config(args))
    return _said(args, rep.__dict__, f"{'updated' if rep.updated else 'installed'} recall on {rep.host} at "
                 f"{rep.path}: {rep.files} files, Python {rep.python} — add it under 'remotes:' with "
                 f"host: {rep.host}, path: {rep.path}")


def cmd_mcp(args) -> int:
    import os

    from ..mcp_server import serve
    if getattr(args, "config", None):
        os.environ["RECALL_CONFIG"] = args.config
    return serve()


def cmd_instructions(args) -> int:
    from ..instructions import install, rules_text
    _out(install(args.install) if args.install else rules_text())
    return 0


def cmd_doctor(args) -> int:
    from ..doctor import run_doctor
    checks = run_doctor(getattr(args, "config", None), thorough=args.thorough)
    if not _json_done(args, [c.__dict__ for c in checks]):
        width = max(len(c.name) for c in checks)
        mark = {True: "ok ", False: "NO ", None: "-- "}
        _out("\n".join(f"{mark[c.ok]} {c.name:<{width}}  {c.detail}" for c in checks))
    return 1 if any(c.ok is False for c in checks) else 0
