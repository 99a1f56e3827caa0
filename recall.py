#!/usr/bin/env python3
"""Launcher: `python3 path/to/recall.py ...` works from any folder, with nothing installed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from recall.cli import run  # noqa: E402

if __name__ == "__main__":
    run()
