"""`make test-core`: the core tests in a bare venv (pytest and its workers, no extras) for every
Python 3.9–3.13 that pyenv has here — proof that recall/ needs nothing beyond the standard library."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WANTED = ["3.9", "3.10", "3.11", "3.12", "3.13"]
WORKERS = ["-n", "3", "--dist", "loadfile", "--no-loadscope-reorder"]
EXTRAS = ["cryptography", "mcp", "voyageai", "sqlite_vec", "sqlean", "numpy", "sentence_transformers", "yaml"]


def interpreters() -> dict:
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = {}
    for minor in WANTED:
        candidates = sorted(glob.glob(f"{root}/versions/{minor}.*/bin/python{minor}"))
        if candidates:
            found[minor] = candidates[-1]
    if not found:        # no pyenv: at least the running interpreter
        found[f"{sys.version_info[0]}.{sys.version_info[1]}"] = sys.executable
    return found


def main() -> int:
    results = {}
    for minor, python in interpreters().items():
        venv = REPO / ".venv-core" / minor
        bin_ = venv / "bin" / "python"
        if not bin_.exists():
            print(f"test-core: a bare venv for python {minor} at {venv} (pytest and pytest-xdist; kept for next time)", flush=True)
            subprocess.run([python, "-m", "venv", str(venv)], check=True)
        if subprocess.run([str(bin_), "-c", "import pytest, xdist"], capture_output=True).returncode:
            subprocess.run([str(bin_), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "pytest", "pytest-xdist>=3.6"], check=True)
        leaked = subprocess.run([str(bin_), "-c", "import importlib.util as u; print(' '.join(m for m in "
                                 f"{EXTRAS!r} if u.find_spec(m)))"], capture_output=True, text=True).stdout.strip()
        if leaked:
            print(f"python {minor}: the bare venv has extras installed: {leaked}")
            results[minor] = 1
            continue
        print(f"== python {minor} ({python}), no extras", flush=True)
        # bytecode first, as make test does: under PYTHONDONTWRITEBYTECODE every recall a test starts
        # would compile its modules anew
        subprocess.run([str(bin_), "-m", "compileall", "-q", "recall"], cwd=REPO, check=True)
        # make test's workers: one process left the second core waiting on the recalls its tests start
        code = subprocess.run([str(bin_), "-m", "pytest", "-q", "-m", "not e2e and not extras", *WORKERS,
                               "-p", "no:cacheprovider", "tests"], cwd=REPO).returncode
        results[minor] = 0 if code in (0, 5) else code
    print("test-core: " + ", ".join(f"{m} {'ok' if c == 0 else 'FAILED'}" for m, c in results.items()))
    return 0 if all(c == 0 for c in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
