"""`python -m recall`."""
from .launch import run

run()
