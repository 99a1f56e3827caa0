"""`python -m recall`."""
from .cli import run

run()
