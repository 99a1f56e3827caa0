"""`make bench`: run every benchmark script (or the ones named) and update docs/BENCHMARKS.md."""
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALL = ["search", "scale", "vault", "vault_size", "hybrid", "doctor", "faults", "embed", "size", "proxy", "watch", "signs"]

names = sys.argv[1:] or ALL
failed = [n for n in names if subprocess.run([sys.executable, str(HERE / f"bench_{n}.py")], cwd=HERE).returncode]
sys.exit(1 if failed else 0)
