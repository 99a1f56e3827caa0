"""The entry point of `recall`, `recall.py` and `python -m recall`: every command runs in this process
and leaves nothing running when it ends."""
from .cli import run

if __name__ == "__main__":
    run()
