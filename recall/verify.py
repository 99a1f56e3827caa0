"""The read-only sweep: every inventory proof and secret check → ok | stale | unreachable | missing |
skipped | error; prerequisites once, dependants skipped, every command through the guard first."""
from __future__ import annotations

import json
import re
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from . import audit, db, inventory, status
from .classify import classify
from .errors import RecallError
from .guard import verdict_for

DEFAULT_TIMEOUT = 20.0
MAX_WORKERS = 32      # proofs wait on the network, not the CPU: one wave for a typical inventory
_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


@dataclass
class Probe:
    target: str                 # entry:ID | secret:ID
    kind: str                   # entry | secret
    id: str
    command: str
    verdict: str = "allow"
    rule: str = ""
    reason: str = ""
    status: str = ""            # after a run (or skip)
    detail: str = ""
    seconds: float = 0.0
    requires: list = field(default_factory=list)
    variables: dict = field(default_factory=dict)   # variable -> (secret id, field) the command names
    serial: bool = False        # shares global state (az): one at a time
    argv: tuple = ()            # as the guard parsed it (secret variables as placeholders)
    tool: str = ""              # argv[0]'s basename once the guard allowed it: what runs and classifies


@dataclass
class Report:
    dry_run: bool
    probes: list

    def public(self) -> dict:
        entries: dict = {}
        for p in self.probes:
            entries.setdefault(p.target, {"id": p.id, "kind": p.kind, "commands": []})["commands"].append(
                {"command": p.command, "verdict": p.verdict, "rule": p.rule, "reason": p.reason,
                 **({} if self.dry_run else {"status": p.status, "detail": p.detail,
                                              "seconds": round(p.seconds, 3)})})
        return {"dry_run": self.dry_run, "entries": list(entries.values())}


def _host(url: str) -> tuple:
    return (urlsplit(url).hostname,) if url else ()


def _placeholder(command: str, variables: dict) -> str:
    """The command with the secret's variables as opaque text, so the guard judges its shape."""
    return _VAR.sub(lambda m: f"RECALLVAR{m.group(1)}" if m.group(1) in variables else m.group(0), command)


def plan(con, cfg, ids=None) -> list:
    """Every probe the sweep would run, each with the guard's verdict; runs nothing."""
    entries = inventory.load_inventory(cfg, con)
    secrets = con.execute("SELECT id, meta, variables, check_cmd FROM secrets ORDER BY id").fetchall()
    known = {e.id for e in entries} | {s["id"] for s in secrets}
    if ids:                  # an id or an alias, in any case, as every other verb takes them
        from .names import resolve
        table = {i: i for i in sorted(known)}
        for e in entries:
            for n in e.names():
                table.setdefault(n, e.id)
        ids = [resolve(i, table, "inventory entry or secret", "see 'recall access find' and 'recall secret find'")
               for i in ids]
    wanted = set(ids or known)
    secret_vars = {s["id"]: {v: (s["id"], f) for v, f in json.loads(s["variables"]).items()} for s in secrets}
    probes = []
    for e in entries:
        if e.id not in wanted:
            continue
        command = e.verify or e.check
        if not command:
            probes.append(Probe(f"entry:{e.id}", "entry", e.id, "", verdict="deny", rule="no-proof",
                                reason="the entry has no verify or check command", requires=e.requires))
            continue
        variables = {}
        for sid in e.secrets:
            variables.update(secret_vars.get(sid, {}))
        probes.append(_judge(Probe(f"entry:{e.id}", "entry", e.id, command, requires=list(e.requires),
                                   variables=variables), _host(e.url), bool(e.secrets)))
    for s in secrets:
        if s["id"] in wanted and s["check_cmd"]:
            url = json.loads(s["meta"]).get("url", "")
            probes.append(_judge(Probe(f"secret:{s['id']}", "secret", s["id"], s["check_cmd"],
                                       variables=secret_vars[s["id"]]), _host(url), True))
    return probes


def _judge(p: Probe, url_hosts: tuple, credential: bool) -> Probe:
    v = verdict_for(_placeholder(p.command, p.variables), url_hosts=url_hosts, credential=credential)
    p.verdict, p.rule, p.reason, p.argv, p.tool = v.verdict, v.rule, v.reason, v.argv, v.tool
    if v.allow and any(f"RECALLVAR{name}" in a for a in v.argv[1:] for name in p.variables):
        if p.tool != "curl" or not all(_header_only(v.argv, name) for name in p.variables):
            p.verdict, p.rule = "deny", "verify.variable"
            p.reason = "a secret's variable may appear only inside a curl -H header (sent on stdin, not argv)"
    p.serial = p.tool == "az"
    return p


def _header_only(argv: tuple, name: str) -> bool:
    token = f"RECALLVAR{name}"
    return all(argv[i - 1] in ("-H", "--header") for i, a in enumerate(argv) if token in a)


# -- running -------------------------------------------------------------------------------------

def _curl_stdin(argv: list, variables: dict, values: dict) -> tuple:
    """Move headers naming secret variables into a curl config on stdin: the value never hits argv."""
    out, config = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-H", "--header") and i + 1 < len(argv) and "RECALLVAR" in argv[i + 1]:
            header = re.sub(r"RECALLVAR([A-Za-z_][A-Za-z0-9_]*)",
                            lambda m: values[variables[m.group(1)][0]][variables[m.group(1)][1]], argv[i + 1])
            config.append('header = "' + header.replace("\\", "\\\\").replace('"', '\\"') + '"')
            i += 2
            continue
        out.append(a)
        i += 1
    return (_curl_options(out, ["-K", "-"]), ("\n".join(config) + "\n").encode()) if config else (out, None)


def _curl_options(argv: list, options: list) -> list:
    """argv with `options` first, after a leading -q/--disable (curl honours it only as argv[1])."""
    at = 2 if argv[1:2] in (["-q"], ["--disable"]) else 1
    return argv[:at] + options + argv[at:]


def _run_probe(cfg, p: Probe, timeout: float) -> None:
    from . import vault
    from .access import exec_entry
    from .runner import run_masked
    started = time.monotonic()
    con = db.connect(cfg.db_path)
    try:
        argv = list(p.argv)
        if p.tool == "tcp":
            up, detail = inventory.tcp_check("tcp " + argv[1], min(timeout, inventory.DEFAULT_TCP_TIMEOUT))
            p.status, p.detail = ("ok", "") if up else ("unreachable", detail)
            return
        data = None
        if p.tool == "curl":      # always: an HTTP error exits 22 naming its code, even with -w and a body
            argv = _curl_options(argv, ["-f", "-S"])
        if p.variables and any("RECALLVAR" in a for a in argv):
            argv, data = _curl_stdin(argv, p.variables, vault.load_values(con, cfg))
        if p.kind == "entry":
            res = exec_entry(con, cfg, p.id, argv, timeout=timeout, stdin=data)
        elif data is not None:
            values = vault.load_values(con, cfg)
            row = con.execute("SELECT * FROM secrets WHERE id=?", (p.id,)).fetchone()
            env = {**vault.child_env(), **vault.injection(row, values[p.id], False)[0]}
            res = run_masked(argv, env=env, masker=vault.masker_for(values), stdin=data, timeout=timeout)
            audit.log(con, "verify", p.id, argv=shlex.join(argv), verdict="ran", exit_code=res.code)
        else:
            row = con.execute("SELECT inject FROM secrets WHERE id=?", (p.id,)).fetchone()
            if p.tool == "sudo" and row["inject"] == "stdin":
                argv = [argv[0], "-S", "-k", "true"]      # the password arrives on stdin
            res = vault.exec_with(con, cfg, p.id, argv, timeout=timeout)
        text = (res.stdout + b"\n" + res.stderr).decode("utf-8", "replace")
        p.status, p.detail = classify(p.tool, res.code, text, timed_out=res.timed_out)
    except RecallError as exc:
        p.status, p.detail = "error", str(exc)
    finally:
        p.seconds = time.monotonic() - started
        status.record(con, p.target, p.status, p.detail, p.command)
        con.close()


def run_verify(con, cfg, ids=None, *, dry_run: bool = False, timeout: float = DEFAULT_TIMEOUT) -> Report:
    """Plan, then (unless dry_run) check prerequisites once, skip their dependants, run the rest."""
    probes = plan(con, cfg, ids)
    if dry_run:
        audit.log(con, "verify", ",".join(ids or []) or "*", argv="--dry-run", verdict=f"{len(probes)} planned")
        return Report(True, probes)
    entries = inventory.load_inventory(cfg, con)
    checked = _check_prerequisites(entries, [p for p in probes if p.kind == "entry"])
    down = {i: why for i, (up, why) in checked.items() if not up}
    runnable = []
    for p in probes:
        blocker = next((d for d in _all_requires(entries, p) if d in down), None) if p.kind == "entry" else None
        own = checked.get(p.id) if p.kind == "entry" else None
        if own is not None and p.command == next(e.check for e in entries if e.id == p.id):
            p.status, p.detail = ("ok", "") if own[0] else ("unreachable", own[1])   # checked once, above
        elif blocker:
            p.status, p.detail = "skipped", f"prerequisite '{blocker}' is down: {down[blocker]}"
        elif p.verdict != "allow":
            p.status, p.detail = "skipped", f"not run: the guard denied it ({p.rule}): {p.reason}"
        else:
            runnable.append(p)
            continue
        status.record(con, p.target, p.status, p.detail, p.command)
    serial = [p for p in runnable if p.serial]       # az: one job, so its waits hold no other slot
    jobs = ([serial] if serial else []) + [[p] for p in runnable if not p.serial]

    def work(batch):
        for p in batch:
            _run_probe(cfg, p, timeout)

    with ThreadPoolExecutor(max_workers=_pool_size(jobs)) as pool:
        list(pool.map(work, jobs))
    return Report(False, probes)


def _pool_size(jobs) -> int:
    """One thread per job, up to MAX_WORKERS: 20 one-second proofs take one second, not two."""
    return max(1, min(MAX_WORKERS, len(jobs)))


def _all_requires(entries: list, p: Probe) -> list:
    e = next((x for x in entries if x.id == p.id), None)
    return [x.id for x in inventory.prerequisites(entries, e)] if e else []


def _check_prerequisites(entries: list, probes: list) -> dict:
    """{id: (up, why)} for every prerequisite of the probes, each checked once, in parallel."""
    needed = {}
    for p in probes:
        e = next((x for x in entries if x.id == p.id), None)
        for r in inventory.prerequisites(entries, e) if e else []:
            needed[r.id] = r
    with ThreadPoolExecutor(max_workers=_pool_size(needed)) as pool:
        results = dict(zip(needed, pool.map(inventory.check_one, needed.values())))
    return {i: (up, detail if up else (needed[i].hint or detail)) for i, (up, detail) in results.items()}
