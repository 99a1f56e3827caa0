"""The read-only sweep: every inventory proof and secret check → ok | stale | unreachable | missing |
skipped | error; prerequisites once, dependants skipped, every command and setup step through the
guard first, each credential bound to its secret's own host, each tool run by its absolute path."""
from __future__ import annotations

import contextvars
import json
import os
import re
import shlex
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from . import db, inventory
from .access import exec_entry, judge_setup
from .errors import RecallError
from .extras import before_threads
from .guard import binding_for, classify, curl_headers, run_form, verdict_for
from .vault import audit

DEFAULT_TIMEOUT = 20.0
MAX_WORKERS = 32      # proofs wait on the network, not the CPU: one wave for a typical inventory
STATUSES = ("ok", "stale", "unreachable", "missing", "error", "skipped")
FAILED = frozenset({"stale", "unreachable", "missing", "error"})
_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_PLACEHOLDER = re.compile(r"RECALLVAR([A-Za-z_][A-Za-z0-9_]*?)RECALLEND")
_NO_PROOF = ("the entry has no verify or check command — allowed: verify: a read-only proof (kubectl --context C "
             "get nodes, curl -s https://HOST/health, tcp HOST:PORT)")


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
    variables: dict = field(default_factory=dict)   # variable -> (secret id, field) the command names
    argv: tuple = ()            # as the guard parsed it (secret variables as placeholders)
    tool: str = ""              # argv[0]'s basename once the guard allowed it: what runs and classifies
    setup: list = field(default_factory=list)       # the entry's access: steps, each a guard Verdict
    refusal: str = ""           # why its setup cannot run as promised (access.judge_setup), '' when it can
    config: str = ""            # what the result is for (inventory.config_of), stored with it


@dataclass
class Report:
    dry_run: bool
    probes: list

    def public(self) -> dict:
        def entry(p: Probe) -> dict:             # one probe per target: an entry's proof or a secret's check
            ran = {} if self.dry_run else {"status": p.status, "detail": p.detail, "seconds": round(p.seconds, 3)}
            command = {"command": p.command, "verdict": p.verdict, "rule": p.rule, "reason": p.reason, **ran}
            out = {"id": p.id, "kind": p.kind, "commands": [command]}
            if p.setup:
                out["setup"] = [{"step": inventory.show_step(p.id, step), "verdict": v.verdict, "rule": v.rule,
                                 "reason": v.reason} for step, v in p.setup]
            return out
        out = {"dry_run": self.dry_run, "entries": [entry(p) for p in self.probes]}
        if not self.dry_run:
            out["summary"] = self.counts()
        return out

    def counts(self) -> dict:
        """{status: how many}, every status named, in a fixed order."""
        return {s: sum(1 for p in self.probes if p.status == s) for s in STATUSES}

    def summary(self) -> str:
        """'3 ok, 1 stale, 0 unreachable, 0 missing, 0 error, 2 skipped'."""
        return ", ".join(f"{n} {s}" for s, n in self.counts().items())

    def exit_code(self) -> int:
        """1 when any proof is stale, unreachable, missing or error; 0 when all that ran are ok."""
        return 1 if any(p.status in FAILED for p in self.probes) else 0


def _proof_text(text: str) -> str:
    """A proof less the spaces, tabs and newlines around it (a `verify: >` block ends in a newline);
    str.strip() would also drop VT, FF, NBSP, U+3000 … that the guard must see and deny."""
    return text.strip(" \t\n")


def secret_bindings(sid: str, meta: dict, check: str) -> tuple:
    """Where secret `sid` may be sent: its own url:, or else the URLs in its own use:/check: lines."""
    if meta.get("url"):
        b = binding_for(sid, meta["url"], "url")
        return (b,) if b else ()
    found: dict = {}
    for source, text in (("use", meta.get("use") or ""), ("check", check or "")):
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
        for b in (binding_for(sid, w, source) for w in words if "://" in w):
            if b:
                found.setdefault((b.scheme, b.host, b.port), b)
    return tuple(found.values())


def _entry_url_mismatch(e, bindings: dict) -> str:
    """Why the entry's own url: differs from a linked secret's (an entry can never widen it), or ''."""
    own = binding_for(e.id, e.url) if e.url else None
    for sid in e.secrets if own else ():
        binds = bindings.get(sid, ())
        if binds and not any(b.host == own.host and (b.port is None or own.port in (None, b.port)) for b in binds):
            return (f"the entry's url host {own.host} differs from secret {sid}'s own host {binds[0].host}; "
                    f"the credential goes only to {binds[0].host}: fix url: in the inventory or the secrets file "
                    f"— allowed: an entry url: on {binds[0].host}, or none")
    return ""


def plan(con, cfg, ids=None) -> tuple:
    """(entries, every probe the sweep would run, each with the guard's verdict, setup steps too)."""
    from .vault.store import rows
    entries = inventory.load_inventory(cfg, con)
    secrets = rows(con)
    known = {e.id for e in entries} | {s["id"] for s in secrets}
    if ids:                  # an id or an alias, in any case, as every other verb takes them
        table = inventory.name_table(entries, sorted(known))
        ids = [found for i in ids for found in _resolve_names(i, table)]
    wanted = set(ids or known)
    secret_vars = {s["id"]: {v: (s["id"], f) for v, f in json.loads(s["variables"]).items()} for s in secrets}
    bindings = {s["id"]: secret_bindings(s["id"], json.loads(s["meta"]), s["check_cmd"]) for s in secrets}
    jump_hosts = {n.lower() for e in entries for n in e.names()}      # ssh -J goes through these only
    jump_hosts.update(b.host for b in (binding_for(e.id, e.url) for e in entries if e.url) if b)
    probes = []
    for e in (e for e in entries if e.id in wanted):
        # a broken entry is its own error; the others still run
        command = "" if e.error else _proof_text(e.verify or e.check)
        setup = judge_setup(e, command, by_path=True)         # verify runs the proof's tool by its path
        if not command:
            probes.append(Probe(f"entry:{e.id}", "entry", e.id, "", verdict="deny", config=inventory.config_of(e),
                                setup=[] if e.error else setup.judged, rule="inventory.entry" if e.error else
                                "no-proof", reason=e.error or _NO_PROOF))
            continue
        variables = {v: found for sid in e.secrets for v, found in secret_vars.get(sid, {}).items()}
        p = _judge(Probe(f"entry:{e.id}", "entry", e.id, command, variables=variables, setup=setup.judged,
                         refusal=setup.refusal, config=inventory.config_of(e)),
                   tuple(b for sid in e.secrets for b in bindings.get(sid, ())), bool(e.secrets), jump_hosts)
        mismatch = _entry_url_mismatch(e, bindings)
        if mismatch:                                  # the root cause, whatever else the guard found
            p.verdict, p.rule, p.reason = "deny", "verify.entry-url", mismatch
        probes.append(p)
    for s in secrets:
        if s["id"] in wanted and s["check_cmd"]:
            probes.append(_judge(Probe(f"secret:{s['id']}", "secret", s["id"], _proof_text(s["check_cmd"]),
                                       variables=secret_vars[s["id"]]), bindings[s["id"]], True, jump_hosts))
    return entries, probes


def _resolve_names(name: str, table: dict) -> list:
    """The ids `name` names: the whole of it (an alias may hold spaces: `platform cluster`), else,
    when that names nothing, each of its words (`vpn ops-cluster`); the whole name's error if not."""
    from .errors import resolve
    what, hint = "inventory entry or secret", "see 'recall access find' and 'recall secret find'"
    try:
        return [resolve(name, table, what, hint)]
    except RecallError as whole:
        try:
            if len(name.split()) > 1:
                return [resolve(w, table, what, hint) for w in name.split()]
        except RecallError:
            pass
        raise whole


def _judge(p: Probe, bindings: tuple, credential: bool, jump_hosts) -> Probe:
    text = _VAR.sub(lambda m: f"RECALLVAR{m.group(1)}RECALLEND" if m.group(1) in p.variables else m.group(0),
                    p.command)                # the secret's variables as opaque text: the guard judges the shape
    v = verdict_for(text, bindings=bindings, credential=credential, jump_hosts=jump_hosts,
                    sends=text != p.command)     # a proof naming no secret's variable sends none itself
    p.verdict, p.rule, p.reason, p.tool = v.verdict, v.rule, v.reason, v.tool
    p.argv = run_form(v.argv, os.path.expanduser("~")) if v.allow else v.argv
    if v.allow and any("RECALLVAR" in a for a in v.argv[1:]):
        rest, headers = curl_headers(list(v.argv), lambda h: "RECALLVAR" in h) if p.tool == "curl" else (v.argv, [])
        if any("RECALLVAR" in a for a in rest[1:]) or any("RECALLVAR" in h.split(":", 1)[0] for h in headers):
            p.verdict, p.rule = "deny", "verify.variable"
            p.reason = ("a secret's variable may appear only in a curl -H header's value (sent on stdin, not "
                        "argv) — allowed: -H \"Authorization: Bearer $VAR\"")
    return p


# -- running -------------------------------------------------------------------------------------

_UNSAFE_IN_CONFIG = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _config_value(text: str, sid: str) -> str:
    """`text` as the inside of a double-quoted curl config value; a control character is refused."""
    m = _UNSAFE_IN_CONFIG.search(text)
    if m:
        what = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL"}.get(m.group(0), "a control character")
        raise RecallError(f"secret '{sid}' holds {what}, which an HTTP header cannot carry: not sent",
                          "fix the value in the secrets file and run 'recall secret sync'")
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _curl_stdin(argv: list, variables: dict, values: dict) -> tuple:
    """Move headers naming secret variables into a curl config on stdin: the value never hits argv."""
    out, headers = curl_headers(argv, lambda h: "RECALLVAR" in h)
    if not headers:
        return argv, None

    def value(m):
        sid, key = variables[m.group(1)]
        return _config_value(values[sid][key], sid)
    config = "".join(f'header = "{_PLACEHOLDER.sub(value, _config_value(h, "(header)"))}"\n' for h in headers)
    return _curl_options(out, ["-K", "-"]), config.encode()


def _curl_options(argv: list, options: list) -> list:
    """argv with -q first (never a .curlrc: options the guard did not see, from CURL_HOME or HOME; curl
    honours -q/--disable only as argv[1]), then `options`."""
    at = 2 if argv[1:2] in (["-q"], ["--disable"]) else 1
    return [argv[0], *(argv[1:2] if at == 2 else ["-q"]), *options, *argv[at:]]


def _run_probe(cfg, p: Probe, timeout: float, path: str) -> None:
    from .vault import store as vault
    from .vault.runner import secret_exec, stopped
    started = time.monotonic()
    con = db.connect(cfg.db_path)
    try:
        argv = list(p.argv)
        if p.tool == "tcp":
            up, detail = inventory.tcp_check("tcp " + argv[1], min(timeout, inventory.DEFAULT_TCP_TIMEOUT))
            p.status, p.detail = ("ok", "") if up else ("unreachable", detail)
            return
        if "/" not in argv[0]:      # else the guard already required it to be the tool on this PATH
            found = shutil.which(argv[0], path=path)      # recall's own PATH: a setup step cannot swap it
            if not found or not os.path.isabs(found):
                p.status, p.detail = "missing", f"{argv[0]} is not installed here (not on PATH)"
                return
            argv[0] = found
        data = placeholders = None
        if p.tool == "curl":      # always: an HTTP error exits 22 naming its code, even with -w and a body
            argv = _curl_options(argv, ["-S"] if "--fail-with-body" in argv else ["-f", "-S"])
        if p.variables and any("RECALLVAR" in a for a in argv):
            from .hostbound import placeholders_for
            from .vault.redact import public_fields
            values = vault.load_values(con, cfg)
            rows = [vault.stored_row(con, sid) for sid in sorted({sid for sid, _ in p.variables.values()})]
            placeholders = placeholders_for([r for r in rows if r is not None], public_fields)
            if placeholders:     # a host-bound secret's value is swapped in only by recall's proxy, loopback or not:
                # no `--noproxy HOSTS` (run_form's for a loopback target, or the proof's own)
                argv = [a for k, a in enumerate(argv) if not (k and "--noproxy" in (a, argv[k - 1]))]
            argv, data = _curl_stdin(argv, p.variables, {**values, **{
                sid: {**values.get(sid, {}), **ph} for sid, ph in placeholders.items()}})
        if p.kind == "entry":
            res = exec_entry(con, cfg, p.id, argv, timeout=timeout, stdin=data, placeholders=placeholders)
        elif data is not None:
            res = _run_secret_curl(con, vault.stored_row(con, p.id), values, placeholders, argv, data, timeout)
        else:
            if p.tool == "sudo" and vault.stored_row(con, p.id)["inject"] == "stdin":
                argv = [argv[0], "-S", *argv[1:]]      # the password arrives on stdin
            res = secret_exec(con, cfg, p.id, argv, timeout=timeout)
        text = (res.stdout + b"\n" + res.stderr).decode("utf-8", "replace")
        p.status, p.detail = classify(p.tool, res.code, text, timed_out=res.timed_out)
    except RecallError as exc:
        p.status, p.detail = "error", str(exc)
    finally:
        p.seconds = time.monotonic() - started
        if not stopped():      # a proof stopped midway (Ctrl-C, a cancelled call) says nothing of the entry
            inventory.record_status(con, p.target, p.status, p.detail, p.command, p.config)
        con.close()


def _run_secret_curl(con, row, values, placeholders, argv, data, timeout):
    """A secret's own curl check: the header on stdin; a host-bound secret's through its proxy."""
    from .vault.redact import secret_parts
    from .vault.runner import Child, child_env, injection, run
    bound = row["inject"] == "proxy"
    env = child_env() if bound else {**child_env(), **injection(row, values[row["id"]], False)[0]}
    return run(con, Child("verify", row["id"], shlex.join(argv), env, secret_parts(values, values.public),
                          given=() if bound else (row["id"],), argv=list(argv), stdin=data,
                          host_bound=[row] if bound else [], values=values, placeholders=placeholders,
                          timeout=timeout))


def run_verify(con, cfg, ids=None, *, dry_run: bool = False, timeout: float = DEFAULT_TIMEOUT) -> Report:
    """Plan, then (unless dry_run) check prerequisites once, skip their dependants, run the rest."""
    entries, probes = plan(con, cfg, ids)
    if dry_run:
        audit.log(con, "verify", ",".join(ids or []) or "*", argv="--dry-run", verdict=f"{len(probes)} planned")
        return Report(True, probes)
    before_threads()
    by_id = {e.id: e for e in entries}
    needs = {p.target: inventory.prerequisites(entries, by_id[p.id]) for p in probes if p.kind == "entry"}
    checked = _check_prerequisites({r.id: r for rs in needs.values() for r in rs})
    down = {i: why for i, (up, why) in checked.items() if not up}
    runnable = []
    for p in probes:
        blocker = next((r.id for r in needs.get(p.target, ()) if r.id in down), None)
        own = checked.get(p.id) if p.kind == "entry" else None
        if p.rule == "inventory.entry":
            p.status, p.detail = "error", p.reason
        elif own is not None and p.verdict == "allow" and p.command == _proof_text(by_id[p.id].check):
            p.status, p.detail = ("ok", "") if own[0] else ("unreachable", own[1])   # checked once, above
        elif blocker:
            p.status, p.detail = "skipped", inventory.blocked_by(by_id[blocker], down[blocker])
        elif p.verdict != "allow":
            p.status, p.detail = "skipped", f"not run: the guard denied it ({p.rule}): {p.reason}"
        elif p.refusal:
            p.status, p.detail = "skipped", p.refusal
        else:
            runnable.append(p)
            continue
        inventory.record_status(con, p.target, p.status, p.detail, p.command, p.config)
    serial = [p for p in runnable if p.tool == "az"]     # az shares global state: one job, holding no other slot
    jobs = ([serial] if serial else []) + [[p] for p in runnable if p.tool != "az"]
    path = os.environ.get("PATH", os.defpath)       # the PATH recall started with, not a setup step's

    def work(batch):
        for p in batch:
            _run_probe(cfg, p, timeout, path)

    _in_parallel(work, jobs)
    return Report(False, probes)


def _in_parallel(fn, items) -> list:
    """fn over items, one thread each up to MAX_WORKERS (20 one-second proofs take one second, not two),
    each in the caller's context (an MCP call's stop). Ctrl-C or SIGTERM while they run stops every run
    (its child's group killed, a queued one never started), then is raised: no proof outlives recall."""
    from .vault.runner import stopping
    stop = threading.Event()
    with stopping(stop):
        contexts = [contextvars.copy_context() for _ in items]
    pool = ThreadPoolExecutor(max_workers=max(1, min(MAX_WORKERS, len(items))))
    try:
        return list(pool.map(lambda item, ctx: ctx.run(fn, item), items, contexts))
    except BaseException:        # Ctrl-C and SIGTERM land in this waiting thread: the runs, in theirs, are told
        stop.set()
        pool.shutdown(cancel_futures=True)
        raise
    finally:
        pool.shutdown()


def _check_prerequisites(needed: dict) -> dict:
    """{id: (up, why)} for every prerequisite in `needed`, each checked once, in parallel."""
    denied = {i: v for i, v in ((i, verdict_for(_proof_text(r.check))) for i, r in needed.items()
                                if r.check and not r.error)
              if not v.allow}        # a check the guard denies is not run: the prerequisite counts as down
    run = {i: r for i, r in needed.items() if i not in denied}
    results = dict(zip(run, _in_parallel(inventory.check_one, list(run.values()))))
    out = {i: (up, detail if up else (needed[i].hint or detail)) for i, (up, detail) in results.items()}
    out.update({i: (False, f"its check is denied by the guard ({v.rule}): {v.reason}") for i, v in denied.items()})
    return out
