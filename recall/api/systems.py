"""The verbs of the library layer about systems and the agent: access find / show / exec, verify,
remote install, instructions, doctor."""
from __future__ import annotations

from ..config import counted
from ..errors import RecallError
from ..vault.door import inline_warnings
from .answer import Answer, answer, looking, opened


def entries(cfg, con) -> list:
    """The inventory's entries (a broken one carries its error); none configured is the error."""
    from .. import inventory
    cfg.require_files("inventory")
    return inventory.load_inventory(cfg, con)


def access_find(query: str = "", config: str | None = None) -> Answer:
    """`recall access find` / recall_access_find: entries by id, name or alias first, then by their words."""
    from .. import inventory
    with opened(config) as (cfg, con):
        every = entries(cfg, con)
        found = inventory.find(every, query)
        shown = [inventory.describe(con, e) for e in found]
        why = "" if every else f"the inventory holds no entries yet: add one to {', '.join(map(str, cfg.inventory))}"
        return answer(shown, "\n\n".join(d["block"] for d in shown) if shown else "no inventory entries match — "
                      + (why or "try an id, alias, kind or tag, or 'recall access find' alone to list them all"),
                      inline_warnings(found), why_none=why, own=not shown)


def access_show(entry_id: str, config: str | None = None) -> Answer:
    """`recall access show` / recall_access_show: one entry's access block."""
    from .. import inventory
    with opened(config) as (cfg, con):
        entry = inventory.get_entry(entries(cfg, con), entry_id)
        d = inventory.describe(con, entry)
        return answer(d, d["block"], inline_warnings([entry]))


def access_exec(entry_id: str, command=None, config: str | None = None, *, out=None, err=None,
                timeout: float | None = None) -> Answer:
    """`recall access exec` / recall_access_exec: prerequisites, the setup steps and `command` (a shell
    line, or argv words; default: the entry's verify) in one bash, linked secrets injected, output
    masked — streamed to `out`/`err`, else captured in the data. The code is the child's."""
    from .. import inventory
    from ..access import exec_entry
    with opened(config) as (cfg, con):
        if isinstance(command, (list, tuple)) and len(command) == 1:
            command = command[0]          # one word: a shell line ('a | b'); more: quoted words
        result = exec_entry(con, cfg, entry_id, command or None, out=out, err=err, timeout=timeout)
        named = inventory.get_entry(entries(cfg, con), entry_id)
        notices = inline_warnings([named])
        if result.context:
            notices.append(f"kubectl gets --context {result.context} (this entry's context)")
        notices += result.notes
        data = {"code": result.code, "timed_out": result.timed_out, "notes": result.notes, "context": result.context,
                "stdout": result.stdout.decode("utf-8", "replace"), "stderr": result.stderr.decode("utf-8", "replace")}
        return answer(data, "", notices, result.code)


def verify(ids=None, config: str | None = None, *, dry_run: bool = False, timeout: float | None = None) -> Answer:
    """`recall verify` / recall_verify: the read-only sweep (or, dry, each command's verdict); the code
    is 1 when anything is stale, down, missing or broken. `extra['kinds']`: each target's real kind."""
    from .. import inventory
    from ..vault import store
    from ..verify import DEFAULT_TIMEOUT, run_verify
    with opened(config) as (cfg, con):
        report = run_verify(con, cfg, ids or None, dry_run=dry_run,
                            timeout=DEFAULT_TIMEOUT if timeout is None else timeout)
        code = 0 if report.dry_run else report.exit_code()
        listed = inventory.load_inventory(cfg, con)
        kinds = {f"entry:{e.id}": e.kind or "entry" for e in listed}
        kinds.update({f"secret:{sid}": "secret" + (f" ({k})" if k else "") for sid, k in store.kinds(con).items()})
        return answer(report.public(), _verify_text(report, code), inline_warnings(listed), code=code,
                      kinds=kinds, own=True)


def _verify_text(report, code: int) -> str:
    from ..inventory import show_step
    if not report.probes:
        return "nothing to verify: no inventory entries and no secrets with a check"
    width = max(len(p.target) for p in report.probes)
    lines = []
    for p in report.probes:
        if report.dry_run:
            for step, v in p.setup:
                lines.append(f"{p.target:<{width}}  {v.verdict:<5}  setup: {show_step(p.id, step)}\n{'':<{width}}  "
                             f"rule {v.rule}: {v.reason}")
            lines.append(f"{p.target:<{width}}  {p.verdict:<5}  {p.command or '(none)'}\n{'':<{width}}  "
                         f"rule {p.rule}: {p.reason}")
        else:
            detail = f"  {p.detail}" if p.detail else ""
            lines.append(f"{p.status:<11} {p.target:<{width}}  {p.seconds:5.1f}s{detail}")
    if not report.dry_run:
        note = ("  (nothing failed; skipped ones did not run: see why above)"
                if report.counts()["skipped"] and code == 0 else "")
        lines.append(f"summary: {report.summary()}{note}")
    return "\n".join(lines)


def remote_install(host: str, path: str = "~/recall", config: str | None = None, *, ssh_config: str = "") -> Answer:
    """`recall remote install`: the zero-dependency core copied to HOST over ssh."""
    from ..remote import install
    with opened(config, connect=False, need_config=False) as (cfg, _):
        rep = install(cfg, host, path, ssh_config)
        return answer(rep.__dict__, f"{'updated' if rep.updated else 'installed'} recall on {rep.host} at "
                      f"{rep.path}: {counted(rep.files, 'file')}, Python {rep.python} — add it under 'remotes:' with "
                      f"host: {rep.host}, path: {rep.path}")


def instructions(install: str | None = None, config: str | None = None) -> Answer:
    """`recall instructions`: the agent's rules block and this install's MCP client settings, or
    (`install`) the block written into that file."""
    from ..instructions import install as write
    from ..instructions import rules_text
    if install:
        said = write(install)
        return answer({"text": said}, said)
    server = mcp_server_settings(config)
    import json
    import shlex
    claude = "claude mcp add recall " + "".join(f"-e {k}={shlex.quote(v)} " for k, v in server.get("env", {}).items()) \
        + "-- " + shlex.join([server["command"], *server["args"]])
    text = (rules_text() + "\nThis install's MCP server, for the client's settings (Claude Desktop, Cursor, VS Code …):\n"
            + json.dumps({"mcpServers": {"recall": server}}, indent=2) + f"\nClaude Code: {claude}\n")
    return answer({"text": rules_text(), "mcpServers": {"recall": server}, "claude": claude}, text)


def mcp_server_settings(config: str | None = None) -> dict:
    """How an MCP client starts this very recall from nothing (no PATH, no env of this shell): the
    command by absolute path, and the config, state folder and key when they are not the defaults."""
    from pathlib import Path

    from ..config import find_config, launcher, location_env
    words = launcher()
    server: dict = {"command": words[0], "args": [*words[1:], "mcp"]}
    env = {}
    try:
        path = find_config(config)
    except RecallError:
        path = None
    if path is not None and path != (Path.home() / ".config/recall/config.yaml").resolve():
        env["RECALL_CONFIG"] = str(path)
    env.update(location_env())
    if env:
        server["env"] = env
    return server


def agent_rules() -> str:
    """The rules block without its markers: the MCP server's instructions to its client."""
    from ..instructions import RULES
    return RULES


def as_caller(name: str) -> None:
    """Who every access-log row of this process names as the caller: cli (the default) or mcp (a
    long-lived server: held private from the start, so no child of it can write into its stdout)."""
    from ..vault import audit
    from ..vault.keyfile import hold_privately
    audit.CALLER["name"] = name
    if name == "mcp":
        hold_privately()


def stopping(event):
    """A context in which every child a call runs ends once `event` is set (the MCP client cancelled the
    call, or went away): its process group killed, its access-log row written."""
    from ..vault.runner import stopping as runs_stopping
    return runs_stopping(event)


def stop_runs() -> bool:
    """This process is ending: every child still running is stopped and waited for (bounded), so none
    outlives it. True when none is left."""
    from ..vault.runner import stop_all
    return stop_all()


def doctor(config: str | None = None, *, thorough: bool = False) -> Answer:
    """`recall doctor`: every check of this machine and of what the config names; code 1 on any NO."""
    import sqlite3

    from ..doctor import run_doctor
    checks = run_doctor(config, thorough=thorough)
    width = max(len(c.name) for c in checks)
    mark = {True: "ok ", False: "NO ", None: "-- "}
    shown = "\n".join(f"{mark[c.ok]} {c.name:<{width}}  {c.detail}" for c in checks)
    code = 1 if any(c.ok is False for c in checks) else 0
    try:
        with looking(config):           # a check may quote an inventory line holding a vault value
            return answer([c.__dict__ for c in checks], shown, code=code, own=True)
    except sqlite3.Error:               # a damaged DB: its own check says so; the inline rules still apply
        return answer([c.__dict__ for c in checks], shown, code=code, own=True)
