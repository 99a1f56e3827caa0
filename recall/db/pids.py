"""Whether a process id is still running: what a killed run left behind (a ledger reservation, a
proxy's CA folder) is cleaned up only once its process is gone."""
from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while `pid` runs (another user's process counts: it cannot be signalled, but it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
