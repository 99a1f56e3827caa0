"""`recall init`: a starter config, the notes folder it names, and a secrets file (0600) and an inventory
beside it, outside the notes tree."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .config import shown
from .errors import RecallError

CONFIG = """\
# recall's config: every field is listed in the README, "File formats".
sources:
  - name: notes
    path: {notes}
secrets: [{secrets}]   # outside the notes tree; after 'recall secret sync' it holds no plain value
inventory: [{inventory}]
embedding:
  provider: none              # voyage | local | none (keyword search only)
"""

SECRETS = """\
# Your credentials, one entry each; 'recall secret sync' encrypts each value in this file in place.
# Every field: README, "File formats". To add one, copy the example without the '# ':
# - id: jira-api-token
#   service: jira
#   kind: token
#   url: https://jira.example.com
#   use: 'curl -s -H "Authorization: Bearer $JIRA_API_TOKEN" https://jira.example.com/rest/api/2/myself'
#   value: <paste the token>
"""

INVENTORY = """\
# How to reach each host, cluster, account or VPN, one entry each. Every field: README, "File formats".
# To add one, copy the example without the '# ':
# - id: jump01
#   kind: host
#   verify: ssh jump01.example.com true
"""


@dataclass
class Started:
    config: str
    notes: str
    secrets: str
    inventory: str
    created: list = field(default_factory=list)        # every file and folder this run made
    next: list = field(default_factory=list)           # (command, what it does)


def _write_new(path: Path, text: str, created: list) -> None:
    """Write a file that must not exist yet (0600, never through a link); an existing one stays."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    created.append(str(path))


def _folder(path: Path, mode: int, created: list) -> None:
    if path.is_dir():
        return
    if path.exists() or path.is_symlink():
        raise RecallError(f"{path} exists and is not a folder; nothing written", "move it away, or name "
                          "another place (--notes DIR, --config FILE)")
    missing = [p for p in [path, *path.parents] if not p.exists()]
    path.mkdir(mode=mode, parents=True)
    created.extend(str(p) for p in reversed(missing))


def init(config_path: Path, notes: Path | None = None, recall: str = "recall") -> Started:
    """A starter config at `config_path` (refused when anything is there), its notes folder, and a
    secrets file (0600) and an inventory beside it, outside the notes; existing files are kept.
    `recall` is how the next commands start."""
    config_path = Path(config_path).expanduser().absolute()
    if config_path.exists() or config_path.is_symlink():
        what = "a folder" if config_path.is_dir() else "a config"
        raise RecallError(f"{config_path} is already {what}; nothing written",
                          "edit it by hand ('recall doctor' checks it), or name a new file with --config FILE")
    notes = Path(notes or "~/notes").expanduser().absolute()
    folder = config_path.parent
    secrets, inventory = folder / "secrets.yaml", folder / "inventory.yaml"
    if folder == notes or notes in folder.parents:
        raise RecallError(f"the config's folder {folder} is inside the notes folder {notes}; nothing written",
                          "keep the config (and the secrets file beside it) outside the notes, e.g. "
                          "--config ~/.config/recall/config.yaml")
    created: list = []
    _folder(folder, 0o700, created)
    _folder(notes, 0o755, created)
    _write_new(secrets, SECRETS, created)
    _write_new(inventory, INVENTORY, created)
    # the config last: until it exists, nothing names the files above
    _write_new(config_path, CONFIG.format(notes=shown(notes), secrets=shown(secrets),
                                          inventory=shown(inventory)), created)
    return Started(config=str(config_path), notes=str(notes), secrets=str(secrets), inventory=str(inventory),
                   created=created,
                   next=[(f"{recall} index", f"index the notes in {shown(notes)} (markdown and text files)"),
                         (f'{recall} search "some words"', "search them"),
                         (f"{recall} doctor", "check everything the config names")])
