"""`secret get`: a value handed to a person — by the clipboard (cleared after CLEAR_AFTER s), or on
the controlling terminal after a random word is typed — never to stdout."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass

from ..errors import RecallError
from . import audit, keyfile
from .store import load_values, row_named
from .tty import ask

GET_TIMEOUT = 30.0      # seconds a person has to type the confirmation
CLEAR_AFTER = 45        # seconds the clipboard holds a value
# (tool, argv that copies stdin, shell line that empties the clipboard), in the order tried
CLIPBOARDS = (("wl-copy", ["wl-copy"], "wl-copy --clear"),
              ("xclip", ["xclip", "-selection", "clipboard"], "printf '' | xclip -selection clipboard"),
              ("xsel", ["xsel", "--clipboard", "--input"], "xsel --clipboard --clear"),
              ("pbcopy", ["pbcopy"], "printf '' | pbcopy"))
_CLEARER_ENV = ("PATH", "HOME", "DISPLAY", "XAUTHORITY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR")
WORDS = ("amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
         "kestrel", "lantern", "meadow", "nimbus", "orchid", "pepper", "quartz", "raven", "saffron",
         "tundra", "umber", "violet", "willow", "yarrow", "zephyr", "copper", "falcon", "glacier")


@dataclass
class Copied:
    id: str
    tool: str
    clear_after: int
    clearer: str          # the detached shell line that empties the clipboard, as it runs


def _value(con, cfg, secret_id: str) -> str:
    values = load_values(con, cfg, [secret_id], need=(secret_id,))[secret_id]
    return values[""] if "" in values else "\n".join(f"{k}: {v}" for k, v in values.items())


def to_clipboard(con, cfg, secret_id: str, *, stdin_fd: int = 0) -> Copied:
    """Copy the value to the clipboard and start a detached `sh -c 'sleep N; clear'` that exits by
    itself; refused unless a person is at a terminal (stdin) and a clipboard tool is on PATH."""
    secret_id = row_named(con, secret_id, cfg)["id"]
    keyfile.require_crypto()
    hint = f"use 'recall secret exec {secret_id} -- CMD' to use it in a command"
    if not os.isatty(stdin_fd):
        audit.log(con, "secret.get", secret_id, argv="", verdict="refused: not a terminal")
        raise RecallError("'secret get' hands a value only to a person at a terminal", hint)
    tool = next((c for c in CLIPBOARDS if shutil.which(c[0])), None)
    if tool is None:
        audit.log(con, "secret.get", secret_id, argv="", verdict="refused: no clipboard tool")
        raise RecallError("no clipboard tool on PATH (wl-copy, xclip, xsel or pbcopy); nothing was shown",
                          f"install one, or run 'recall secret get {secret_id} --print' to see it on this terminal")
    name, argv, clear = tool
    value = _value(con, cfg, secret_id)
    try:
        done = subprocess.run(argv, input=value.encode("utf-8"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RecallError(f"{name} did not take the value ({exc.__class__.__name__})", hint) from None
    if done.returncode != 0:
        audit.log(con, "secret.get", secret_id, argv="", verdict=f"refused: {name} exit {done.returncode}")
        raise RecallError(f"{name} exited {done.returncode}; the clipboard may not hold the value",
                          "check that a display is available (DISPLAY / WAYLAND_DISPLAY)")
    clearer = f"sleep {CLEAR_AFTER}; {clear}"
    env = {k: v for k, v in os.environ.items() if k in _CLEARER_ENV}    # not the caller's tokens
    subprocess.Popen(["sh", "-c", clearer], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True, env=env)
    audit.log(con, "secret.get", secret_id, argv="", verdict=f"copied to the clipboard ({name})")
    return Copied(secret_id, name, CLEAR_AFTER, clearer)


def reveal(con, cfg, secret_id: str, *, stdin_fd: int = 0, stdout_fd: int = 1, tty: str = "/dev/tty",
           timeout: float = GET_TIMEOUT) -> None:
    """Show the value on the controlling terminal (never stdout) once a random word is typed there within
    `timeout`; stdin and stdout must be a real terminal, so no pipe or captured stdout ever holds it."""
    secret_id = row_named(con, secret_id, cfg)["id"]          # NotFound before anything else
    keyfile.require_crypto()
    hint = f"use 'recall secret exec {secret_id} -- CMD' to use it in a command"
    if not (os.isatty(stdin_fd) and os.isatty(stdout_fd)):
        audit.log(con, "secret.get", secret_id, argv="", verdict="refused: not a terminal")
        raise RecallError("'secret get --print' prints a value only to a real terminal", hint)
    try:
        fd = os.open(tty, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        audit.log(con, "secret.get", secret_id, argv="", verdict="refused: no controlling terminal")
        raise RecallError("recall secret get needs a controlling terminal (/dev/tty)", hint) from None
    try:
        word = secrets.choice(WORDS) + str(secrets.randbelow(90) + 10)
        answer = ask(fd, f"Type the word '{word}' to show the value of '{secret_id}' on this terminal: ",
                     timeout=timeout)
        if answer is None:
            audit.log(con, "secret.get", secret_id, argv="", verdict="refused: no answer")
            raise RecallError(f"no confirmation typed within {timeout:.0f} s", hint)
        if answer.decode("utf-8", "replace").strip() != word:
            audit.log(con, "secret.get", secret_id, argv="", verdict="refused: wrong confirmation")
            raise RecallError("the word typed did not match the one asked for", hint)
        value = _value(con, cfg, secret_id)
        audit.log(con, "secret.get", secret_id, argv="", verdict="shown on a terminal")
        os.write(fd, value.encode("utf-8") + b"\n")
    finally:
        os.close(fd)
