"""The one reader of what a person types on the terminal (`secret set`'s value, `secret get`'s word)."""
from __future__ import annotations

import os
import select
import time


def ask(fd: int, prompt: str, *, echo: bool = True, timeout: float | None = None) -> bytes | None:
    """The line typed on the terminal `fd` after `prompt`, its line break dropped (what came before an
    end of input, at an end); None when nothing ends a line within `timeout` s. Unechoed, echo goes
    off before the prompt, so what is typed or pasted at once is neither shown nor lost."""
    old = None
    if not echo:
        import termios
        old = termios.tcgetattr(fd)
        quiet = termios.tcgetattr(fd)
        quiet[3] &= ~termios.ECHO
        termios.tcsetattr(fd, termios.TCSADRAIN, quiet)
    try:
        os.write(fd, prompt.encode("utf-8"))
        deadline = None if timeout is None else time.monotonic() + timeout
        data = b""
        while not data.endswith((b"\n", b"\r")):
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    os.write(fd, b"\n")
                    return None
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
        return data.rstrip(b"\r\n")
    finally:
        if old is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, old)
            os.write(fd, b"\n")
