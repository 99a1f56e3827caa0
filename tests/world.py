"""The one builder of what a test's recall reads: a notes tree, a secrets file (0600), an inventory and
a config naming them, all under the test's own folder (conftest's `make_world` builds one over the
`notes` fixture and makes its config recall's)."""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class World:
    """Where a built world lives; `config` is the file to pass as --config (or RECALL_CONFIG)."""
    root: Path
    notes: Path
    config: Path
    secrets: Path | None = None
    inventory: Path | None = None
    extra: dict = field(default_factory=dict)


def write_tree(root: Path, files: dict) -> Path:
    """Each {relative path: text} written under `root` (the text dedented)."""
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def build(root: Path, *, notes: dict | Path | None = None, secrets: str | None = None,
          inventory: str | None = None, config: str = "", source: str = "notes",
          include: list | None = None, secrets_in_notes: bool = False) -> World:
    """A world under `root`: `notes` ({path: text}, or an existing folder), `secrets` and `inventory`
    (YAML text, dedented; the secrets file 0600 in a folder outside the notes, or with
    `secrets_in_notes` inside the notes tree, as people keep it), `config` (more config lines),
    `include` (the source's include globs). Returns where each one is."""
    root.mkdir(parents=True, exist_ok=True)
    notes_dir = notes if isinstance(notes, Path) else write_tree(root / "notes", notes or {})
    notes_dir.mkdir(parents=True, exist_ok=True)
    etc = root / "etc"
    etc.mkdir(mode=0o700, exist_ok=True)
    lines = [f"sources:\n  - name: {source}\n    path: {notes_dir}\n"]
    if include is not None:
        lines.append(f"    include: {include!r}\n")
    world = World(root=root, notes=notes_dir, config=etc / "config.yaml")
    if secrets is not None:
        world.secrets = (notes_dir if secrets_in_notes else etc) / "secrets.yaml"
        world.secrets.write_text(textwrap.dedent(secrets), encoding="utf-8")
        world.secrets.chmod(0o600)
        lines.append(f"secrets: [{world.secrets}]\n")
    if inventory is not None:
        world.inventory = etc / "inventory.yaml"
        world.inventory.write_text(textwrap.dedent(inventory), encoding="utf-8")
        lines.append(f"inventory: [{world.inventory}]\n")
    world.config.write_text("".join(lines) + textwrap.dedent(config), encoding="utf-8")
    return world
