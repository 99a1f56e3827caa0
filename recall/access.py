"""`access exec`: prerequisites, an entry's setup steps in a clean bash, linked secrets, masked run."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass

from . import audit, inventory
from .errors import RecallError

# Steps that switch state for every other shell on the machine: left out, --context/--subscription instead.
GLOBAL_STATE = [re.compile(p) for p in (r"^kubectl\s+config\s+(use-context|set-context|use)\b",
                                        r"^az\s+account\s+set\b", r"^gcloud\s+config\s+set\b",
                                        r"^kubectx\b", r"^aws\s+configure\s+set\b",
                                        r"^aws\s+eks\s+update-kubeconfig\b")]
SETUP = re.compile(r"^(source|\.|export|unset)\s")
SENSITIVE = re.compile(r"(_TOKEN|PASSWORD|PASSWD|_SECRET|SECRET_|_API_KEY|APIKEY|_PRIVATE_KEY|CREDENTIAL)",
                       re.IGNORECASE)
SETUP_TIMEOUT = 30


@dataclass
class Plan:
    run: list          # setup steps that run
    left_out: list     # (step, why)


def plan_steps(entry) -> Plan:
    run, left = [], []
    for step in entry.access:
        s = step.strip()
        if any(p.search(s) for p in GLOBAL_STATE):
            left.append((s, "switches global state; recall passes --context/--subscription instead"))
        elif SETUP.match(s):
            run.append(s)
        else:
            left.append((s, "not a setup step (source, export, unset)"))
    return Plan(run, left)


def setup_env(plan: Plan, base: dict, err=None) -> tuple:
    """Run the setup steps in `bash --noprofile --norc` and return (environment, stderr bytes)."""
    if not plan.run:
        return dict(base), b""
    script = "set -e\n{\n" + "\n".join(plan.run) + "\n} >&2 </dev/null\nenv -0\n"
    try:
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], env=base,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=SETUP_TIMEOUT,
                              cwd=os.path.expanduser("~"))
    except FileNotFoundError:
        raise RecallError("bash is needed to run an entry's setup steps") from None
    except subprocess.TimeoutExpired:
        raise RecallError(f"the setup steps did not finish within {SETUP_TIMEOUT}s") from None
    if proc.returncode != 0:
        return None, proc.stderr
    env = {}
    for item in proc.stdout.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    for k in ("PWD", "OLDPWD", "SHLVL", "_"):
        env.pop(k, None)
        if k in base:
            env[k] = base[k]
    return env, proc.stderr


def sensitive_values(env: dict, base: dict) -> dict:
    """Values of sensitive-looking variables the setup exported (the vault never saw them)."""
    return {k: v for k, v in env.items() if SENSITIVE.search(k) and base.get(k) != v and len(v) >= 6}


def exec_entry(con, cfg, entry_id: str, command=None, *, out=None, err=None, timeout=None, stdin=None):
    """Check prerequisites, set up, inject linked secrets, run `command` (default: verify), mask."""
    from . import vault
    from .mask import Masker
    from .runner import run_masked
    entries = inventory.load_inventory(cfg, con)
    entry = inventory.get_entry(entries, entry_id)
    if isinstance(command, str):
        command = shlex.split(command)
    argv = list(command or []) or (shlex.split(entry.verify) if entry.verify else [])
    if not argv:
        raise RecallError(f"entry '{entry.id}' has no verify command", f"recall access exec {entry.id} -- CMD …")
    inventory.ensure_prerequisites(entries, entry)
    values = vault.load_values(con, cfg) if entry.secrets or _has_vault(con, cfg) else {}
    missing = [s for s in entry.secrets if s not in values]
    if missing:
        raise RecallError(f"linked secret(s) {', '.join(missing)} are not in the vault", "run 'recall secret sync'")
    base = vault.child_env()
    plan = plan_steps(entry)
    env, setup_err = setup_env(plan, base)
    exported = sensitive_values(env or {}, base)
    mask_map = {sid: list(v.values()) for sid, v in values.items()}
    mask_map.update({f"{entry.id}:{k}": [v] for k, v in exported.items()})
    masker = Masker(mask_map)
    if env is None:
        detail = masker.mask(setup_err).decode("utf-8", "replace").strip().splitlines()
        audit.log(con, "access.exec", entry.id, argv=masker.mask(shlex.join(argv).encode()).decode(),
                  verdict="setup failed")
        raise RecallError(f"the setup steps of '{entry.id}' failed: {detail[-1] if detail else 'no message'}",
                          "run 'recall access show " + entry.id + "' and check the steps")
    if setup_err and err is not None:
        err.write(masker.mask(setup_err))
    for sid in entry.secrets:
        row = con.execute("SELECT * FROM secrets WHERE id=?", (sid,)).fetchone()
        extra, _ = vault.injection(row, values[sid], False)
        env.update(extra)
    masked_argv = masker.mask(shlex.join(argv).encode()).decode("utf-8", "replace")
    try:
        result = run_masked(argv, env=env, masker=masker, out=out, err=err, timeout=timeout, stdin=stdin)
    except RecallError:
        audit.log(con, "access.exec", entry.id, argv=masked_argv, verdict="not run")
        raise
    audit.log(con, "access.exec", entry.id, argv=masked_argv, verdict="ran", exit_code=result.code)
    result.left_out = plan.left_out
    return result


def _has_vault(con, cfg) -> bool:
    """Mask every vault value too, when the vault is usable here (defence in depth)."""
    if con.execute("SELECT 1 FROM secrets LIMIT 1").fetchone() is None:
        return False
    try:
        from .keyfile import key_path, require_crypto
        require_crypto()
        return key_path(cfg.home).exists()
    except RecallError:
        return False
