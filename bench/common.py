"""Shared bits for benchmarks: timing, percentiles, and writing a section of docs/BENCHMARKS.md."""
from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
DOC = REPO / "docs" / "BENCHMARKS.md"
sys.path.insert(0, str(REPO))


def pct(samples: list, p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def timed(fn, repeat: int) -> list:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def bare_python(home: Path, *extras: str):
    """A venv of this interpreter without pip (made once), as an installed recall's own venv (pipx) is:
    its start-up reads no machine-wide site-packages `.pth` files (the dev venv's editable finder
    costs ~10 ms of every start). `extras` (top-level names, e.g. cryptography) are linked in from
    this interpreter's site-packages, with what they import."""
    import sysconfig
    venv = home / "bare-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        done = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True)
        if done.returncode != 0:
            return None
    here = Path(sysconfig.get_paths()["purelib"])
    site = next((venv / "lib").glob("python*/site-packages"))
    for name in extras:
        for found in here.glob(f"{name}*"):
            if not (site / found.name).exists():
                (site / found.name).symlink_to(found)
    return str(python)


def warm_env() -> dict:
    """The environment a user has: bytecode caches written and used (this sandbox disables them)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "recall")], env=env,
                   stdout=subprocess.DEVNULL, check=False)
    return env


def run_ms(argv: list, repeat: int, env=None, warm: bool = True) -> list:
    """Whole-process wall times of argv, after two untimed runs (unless not `warm`): the page cache
    warm, and a search's bytecode caches written by the first."""
    env = env or warm_env()

    def once():
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    if warm:
        once()
        once()
    return timed(once, repeat)


def ms(samples: list) -> str:
    return f"{statistics.median(samples):.1f} / {pct(samples, 95):.1f}"


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"SQLite {__import__('sqlite3').sqlite_version}, {time.strftime('%Y-%m-%d')}")


def write_section(name: str, markdown: str) -> None:
    """Replace (or append) the section between <!-- bench:NAME --> markers."""
    DOC.parent.mkdir(exist_ok=True)
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n\nWritten by `make bench`; each section by its own script in `bench/`.\n"
    block = f"<!-- bench:{name} -->\n{markdown.strip()}\n<!-- /bench:{name} -->"
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(text)


GEN = REPO.parent / "shared" / "bench" / "gen_tree.py"


def scale_tree(tree: Path, home: Path, who: str) -> bool:
    """The 10,000-file gen_tree.py tree (made once) and a config naming it in `home`, set as this
    process's RECALL_HOME / RECALL_CONFIG, with this checkout importable; False (said) without
    gen_tree.py."""
    if not GEN.exists():
        print(f"{who}: no {GEN}; skipped")
        return False
    if not tree.exists():
        subprocess.run([sys.executable, str(GEN), str(tree), "10000"], check=True)
    home.mkdir(parents=True, exist_ok=True)
    (home / "scale.yaml").write_text(f"sources:\n  - name: t\n    path: {tree}\n")
    os.environ.update(RECALL_HOME=str(home), RECALL_CONFIG=str(home / "scale.yaml"))
    sys.path.insert(0, str(REPO))
    return True
