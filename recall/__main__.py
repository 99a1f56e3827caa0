"""`python -m recall`."""
import sys

from .cli import main

sys.exit(main())
