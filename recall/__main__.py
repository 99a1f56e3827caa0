"""The entry point of `recall`, `recall.py` and `python -m recall`: a search goes to the warm helper
when one answers (launch.py); everything else, and a search none answered, runs here."""
import os
import sys

from . import launch


def run() -> None:
    argv = sys.argv[1:]
    if launch.verb_of(argv) == "search":
        code = launch.by_helper(argv)
        if code is not None:
            os._exit(code)
    from .cli import run as run_here
    run_here(then=lambda: launch.start(*launch.TO_START) if launch.TO_START else None)


if __name__ == "__main__":
    run()
