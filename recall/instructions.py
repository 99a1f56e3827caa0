"""The rules block for an agent's instructions file, and installing it between markers, idempotently."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import RecallError

BEGIN = "<!-- recall:begin — managed by `recall instructions --install`; edit outside these markers -->"
END = "<!-- recall:end -->"
_BEGIN_PREFIX = "<!-- recall:begin"

RULES = """\
## recall: my notes, credentials and systems

recall holds my notes, credentials you can use but never see, and how to reach each cluster, host
and account. Use its MCP tools (without MCP, the same verbs are `recall search|read|secret|access|verify`).

- **Search first, never grep the notes.** Before answering about my systems, incidents, runbooks or
  past decisions, call `recall_search`, then `recall_read` for the section it points to. Do not grep,
  cat or find through my notes folders: search ranks, bounds and masks; grep does none of that.
- **Credentials only through recall:** `recall_secret_find` → `recall_secret_show` (what it is and
  its `use` line) → `recall_secret_command` (it returns one line that injects it) → run that line
  as given, in any shell. Its output comes back masked.
- **Never ask for or print a secret value** — not in chat, commands, files, logs or argv, not even
  partly. Do not open the secrets files or the vault key. `[recall:ID]` in output is a masked value:
  expected, never try to recover it.
- **Reach clusters, hosts and accounts only through recall's access entries:** `recall_access_find`
  → `recall_access_show` → `recall_access_exec` (prerequisites checked, then one bash runs the
  setup and your command line — pipes and `$VARS` work — secrets injected, output masked). Do not
  switch kube contexts, cloud profiles or subscriptions yourself.
- **`prerequisite 'vpn' is down`** (or any prerequisite) means: stop and ask me to connect it, as the
  error says. Do not debug credentials, tokens or configs — they are not the problem.
- **Run `recall_verify`** before a task that spans several systems, and after any authentication
  error (401, 403, expired token, AccessDenied). Act on the reason it gives for each entry (ask me
  to log in, renew or connect) instead of retrying blindly.
"""


def rules_text() -> str:
    """The block as `recall instructions` prints it, markers included."""
    return f"{BEGIN}\n{RULES}{END}\n"


def _split(text: str, path: str):
    """(before, old block, after) or None when the file has no block; malformed markers are an error."""
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.lstrip().startswith(_BEGIN_PREFIX)]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if not begins and not ends:
        return None
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        marks = sorted(begins + ends)
        where = f"line{'s' * (len(marks) > 1)} {', '.join(str(i + 1) for i in marks)}"
        raise RecallError(f"{path}: the recall markers are unbalanced ({where})",
                          f"keep exactly one '{_BEGIN_PREFIX} …' line and one '{END}' line after it, "
                          "or remove both, then run it again")
    b, e = begins[0], ends[0]
    return "".join(lines[:b]), "".join(lines[b:e + 1]), "".join(lines[e + 1:])


def _write_atomically(path: Path, text: str, newline: str) -> None:
    data = text.replace("\n", newline).encode("utf-8")
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def install(path) -> str:
    """Write or update the block in `path` (created if absent); the rest of the file is kept as is.
    Returns one sentence saying what it did."""
    path = Path(os.path.realpath(os.path.expanduser(str(path))))     # a symlinked CLAUDE.md stays a link
    if path.is_dir():
        raise RecallError(f"{path} is a folder", "name the instructions file, e.g. ~/.claude/CLAUDE.md")
    if path.exists() and not path.is_file():      # a FIFO would hang the read, a device be replaced by a file
        raise RecallError(f"{path} is not a regular file", "name the instructions file, e.g. ~/.claude/CLAUDE.md")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)     # ~/.claude before the agent's first run
    except OSError as exc:
        raise RecallError(f"cannot create the folder {path.parent}: {exc.strerror or exc}",
                          "create it, or name another file") from None
    block = rules_text()
    if not path.exists():
        _write_atomically(path, block, "\n")
        return f"created {path} with the recall rules"
    try:
        raw = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise RecallError(f"{path} is not UTF-8 text", "recall edits text files only") from None
    except OSError as exc:
        raise RecallError(f"cannot read {path}: {exc.strerror or exc}") from None
    newline = "\r\n" if "\r\n" in raw else "\n"
    text = raw.replace("\r\n", "\n")
    parts = _split(text, str(path))
    if parts is None:
        sep = "" if not text or text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"
        _write_atomically(path, text + sep + block, newline)
        return f"added the recall rules to {path}"
    before, old, after = parts
    if old == block:
        return f"{path} already has the current recall rules"
    _write_atomically(path, before + block + after, newline)
    return f"updated the recall rules in {path}"
