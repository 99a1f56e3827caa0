"""The one builder of what a test's recall reads: a notes tree, a secrets file (0600), an inventory and
a config naming them, all under the test's own folder (conftest's `make_world` builds one over the
`notes` fixture and makes its config recall's)."""
from __future__ import annotations

import sqlite3
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


def config_path(root: Path) -> Path:
    """Where build(root, …) writes the world's config."""
    return root / "etc" / "config.yaml"


def build(root: Path, *, notes: dict | Path | None = None, secrets: str | Path | None = None,
          inventory: str | Path | None = None, config: str = "", source: str = "notes",
          include: list | None = None, exclude: list | None = None, sources: dict | None = None,
          secrets_in_notes: bool = False) -> World:
    """A world under `root`: `notes` ({path: text}, or an existing folder), `secrets` and `inventory`
    (YAML text, dedented, or an existing file named as it is; the secrets file written 0600 in a folder
    outside the notes, or with `secrets_in_notes` inside the notes tree, as people keep it), `config`
    (more config lines), `include` / `exclude` (the source's globs), `sources` ({name: folder}: more
    sources after it). Returns where each one is."""
    root.mkdir(parents=True, exist_ok=True)
    notes_dir = notes if isinstance(notes, Path) else write_tree(root / "notes", notes or {})
    notes_dir.mkdir(parents=True, exist_ok=True)
    etc = root / "etc"
    etc.mkdir(mode=0o700, exist_ok=True)
    lines = [f"sources:\n  - name: {source}\n    path: {notes_dir}\n"]
    lines += [f"    {key}: {globs!r}\n" for key, globs in (("include", include), ("exclude", exclude))
              if globs is not None]
    lines += [f"  - name: {name}\n    path: {path}\n" for name, path in (sources or {}).items()]
    world = World(root=root, notes=notes_dir, config=config_path(root))
    if secrets is not None:
        world.secrets = _file(secrets, (notes_dir if secrets_in_notes else etc) / "secrets.yaml", 0o600)
        lines.append(f"secrets: [{world.secrets}]\n")
    if inventory is not None:
        world.inventory = _file(inventory, etc / "inventory.yaml")
        lines.append(f"inventory: [{world.inventory}]\n")
    world.config.write_text("".join(lines) + textwrap.dedent(config), encoding="utf-8")
    return world


def _file(given: str | Path, path: Path, mode: int | None = None) -> Path:
    """An existing file as it is (its mode too), or the text (dedented) written at `path`."""
    if isinstance(given, Path):
        return given
    path.write_text(textwrap.dedent(given), encoding="utf-8")
    if mode is not None:
        path.chmod(mode)
    return path


def stored_bytes(path: Path) -> bytes:
    """A state file's bytes as a scan for a value must see them: a recall DB keeps its chunks'
    texts deflated (recall/db/texts.py), so their text, read back as recall reads it, is added."""
    data = path.read_bytes()
    if not data.startswith(b"SQLite format 3\0"):
        return data
    from recall.db import texts
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    texts.register(con)
    try:
        rows = con.execute("SELECT breadcrumb, body, path, idents FROM chunks").fetchall()
    except sqlite3.OperationalError:        # not recall's DB, or one with no chunks view
        rows = []
    finally:
        con.close()
    return data + "\n".join(t for row in rows for t in row).encode()
