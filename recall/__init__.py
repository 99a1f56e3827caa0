"""recall: notes search, a vault that never shows values, and how to reach each system."""
import sys

__version__ = "0.1.0"

# The launcher or `python -m recall` run by an older Python: one line, not a traceback from deep inside
# (this file and recall.py parse as far back as Python 2.7, so the line is printed there too).
if sys.version_info < (3, 9):
    sys.stderr.write("recall: recall needs Python 3.9 or newer, and this is Python %s (%s): run it with a newer "
                     "python3\n" % (sys.version.split()[0], sys.executable))
    raise SystemExit(1)
