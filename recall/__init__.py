"""recall: notes search, a vault that never shows values, and how to reach each system."""
__version__ = "0.1.0"
