"""`access exec`: prerequisites, an entry's setup steps in a clean bash, linked secrets, masked run."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass

from . import audit, inventory
from .errors import RecallError
from .mask import MIN_SECRET_LEN

# Steps that switch state for every other shell on the machine: left out, --context/--subscription instead.
GLOBAL_STATE = [re.compile(p) for p in (r"^kubectl\s+config\s+(use-context|set-context|use)\b",
                                        r"^az\s+account\s+set\b", r"^gcloud\s+config\s+set\b",
                                        r"^kubectx\b", r"^aws\s+configure\s+set\b",
                                        r"^aws\s+eks\s+update-kubeconfig\b", r"^az\s+aks\s+get-credentials\b",
                                        r"^gcloud\s+container\s+clusters\s+get-credentials\b")]
SETUP = re.compile(r"^(source|\.|export|unset)\s")
SETUP_TIMEOUT = 30
_RC_VARIABLES = ("BASH_ENV", "ENV")


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
    """Run the setup steps in `bash --noprofile --norc` and return (environment, stderr bytes).

    The script goes in on bash's stdin, not as `-c SCRIPT`: an inline `export X_TOKEN=…` would
    otherwise sit in /proc/<pid>/cmdline for every local user to read while the steps run.
    """
    if not plan.run:
        return dict(base), b""
    script = "set -e\n{\n" + "\n".join(plan.run) + "\n} >&2 </dev/null\nenv -0\n"
    # BASH_ENV / ENV would run a file before the script: an rc file by another name.
    shell_env = {k: v for k, v in base.items() if k not in _RC_VARIABLES}
    try:
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-s"], env=shell_env,
                              input=script.encode(), capture_output=True, timeout=SETUP_TIMEOUT,
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
    for k in ("PWD", "OLDPWD", "SHLVL", "_", *_RC_VARIABLES):
        env.pop(k, None)
        if k in base:
            env[k] = base[k]
    return env, proc.stderr


def sensitive_values(env: dict, base: dict) -> dict:
    """Values of sensitive-looking variables the setup exported (the vault never saw them)."""
    return {k: v for k, v in env.items()
            if inventory.sensitive_name(k) and base.get(k) != v and len(v) >= MIN_SECRET_LEN}


def _secret_injection(con, entry, values: dict, stdin) -> tuple:
    """(extra env, stdin bytes or None) for the entry's linked secrets; `inject: stdin` ones are
    written to the command's stdin, in the order the entry lists them."""
    from . import vault
    env, data = {}, b""
    for sid in entry.secrets:
        row = con.execute("SELECT * FROM secrets WHERE id=?", (sid,)).fetchone()
        extra, piece = vault.injection(row, values[sid], False)
        env.update(extra)
        if piece is not None:
            if stdin is not None:
                raise RecallError(f"secret '{sid}' of '{entry.id}' is injected on stdin, and this command "
                                  "already has its own stdin",
                                  "run the command without its own input, or link the secret with inject: env")
            data += piece
    return env, stdin if stdin is not None else (data or None)


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
    extra, stdin = _secret_injection(con, entry, values, stdin)      # refuses before anything runs
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
    env.update(extra)
    masked_argv = masker.mask(shlex.join(argv).encode()).decode("utf-8", "replace")
    try:
        result = run_masked(argv, env=env, masker=masker, out=out, err=err, timeout=timeout, stdin=stdin)
    except RecallError:
        audit.log(con, "access.exec", entry.id, argv=masked_argv, verdict="not run")
        raise
    audit.log(con, "access.exec", entry.id, argv=masked_argv, verdict="ran", exit_code=result.code)
    result.left_out = [(inventory.hide_values(step), why) for step, why in plan.left_out]
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
