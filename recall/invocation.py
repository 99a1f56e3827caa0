"""How a line recall hands out calls recall again, so it runs where it is handed out: in a plain shell
with none of this process's environment (a bare PATH, another folder)."""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path


def launcher() -> list:
    """The argv start that reaches this very recall from any shell: this checkout's launcher when it started
    this process; else this interpreter's console script; else `python -m recall` if a fresh one imports us."""
    python = os.path.abspath(sys.executable or "python3")
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkout = os.path.join(top, "recall.py")
    started_by = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.isfile(checkout) and os.path.realpath(started_by) == os.path.realpath(checkout):
        return [python, checkout]
    if script := console_script(started_by):
        return [script]
    return [python, checkout] if os.path.isfile(checkout) and not _importable(top) else [python, "-m", "recall"]


def console_script(started_by: str = "") -> str | None:
    """The `recall` script installed for this interpreter (its shebang names this environment's
    Python), by absolute path; None when there is none."""
    import sysconfig
    here = os.path.dirname(os.path.abspath(sys.executable or ""))
    name = "recall.exe" if os.name == "nt" else "recall"
    candidates = [started_by] if os.path.basename(started_by) == name else []
    candidates += [os.path.join(sysconfig.get_path("scripts") or here, name), os.path.join(here, name)]
    for path in candidates:
        interpreter = _shebang(path)
        if interpreter and os.path.dirname(os.path.abspath(interpreter)) == here and os.access(path, os.X_OK):
            return os.path.abspath(path)
    return None


def _shebang(path: str) -> str | None:
    """The interpreter a console script runs: `#!/venv/bin/python`, or pip's `#!/bin/sh` form for a
    long or spaced path (`'''exec' "/venv/bin/python" "$0" "$@"`)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    if head[0].strip() == "#!/bin/sh" and len(head) > 1 and head[1].startswith("'''exec'"):
        words = shlex.split(head[1][len("'''exec'"):])
    else:
        words = head[0][2:].split()
    return words[0] if words else None


def _importable(top: str) -> bool:
    """Whether a fresh interpreter (no PYTHONPATH of ours, another folder) imports recall from `top`."""
    import site
    import sysconfig
    places = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        places.add(site.getusersitepackages())
    real = os.path.realpath(top)
    return any(p and os.path.realpath(p) == real for p in places)


def invocation(cfg=None) -> str:
    """The start of a line that reaches this recall, its vault and config from a shell holding none of this
    process's environment: RECALL_HOME=… unless the default, the launcher, --config FILE unless the default."""
    words = [shlex.quote(w) for w in launcher()]
    if cfg is None:
        return " ".join(words)
    home = Path.home()
    if cfg.path is not None and Path(cfg.path) != (home / ".config/recall/config.yaml").resolve():
        words += ["--config", shlex.quote(str(cfg.path))]
    if Path(cfg.home).expanduser().resolve() != (home / ".local/share/recall").resolve():
        words.insert(0, "RECALL_HOME=" + shlex.quote(str(Path(cfg.home).expanduser().resolve())))
    return " ".join(words)
