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
    texts deflated (recall/db/texts.py), so the text of every deflated blob in any page of the
    file (a WAL's old page images, a page not yet reused, included) is added, and the chunks'
    texts as recall reads them (a blob too long for its page is whole only there)."""
    data = path.read_bytes()
    if data.startswith(b"SQLite format 3\0"):
        size = int.from_bytes(data[16:18], "big")
        size = 65536 if size == 1 else size or 4096                    # 1: how the header writes 64 KiB
        pages = [(data[at:at + size], 100 if at == 0 else 0) for at in range(0, len(data), size)]
    elif data[:4] in (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83"):      # a WAL: frames after its header
        size = int.from_bytes(data[8:12], "big")
        pages = [(data[at + 24:at + 24 + size], 0) for at in range(32, len(data), 24 + size)]
    else:
        return data
    found = [_inflated(page, start, size) for page, start in pages]
    if data.startswith(b"SQLite format 3\0"):
        found.append(_chunk_texts(path))
    return data + b"\n".join(found)


def _chunk_texts(path: Path) -> bytes:
    from recall.db import texts
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    texts.register(con)
    try:
        rows = con.execute("SELECT breadcrumb, body, path, idents FROM chunks").fetchall()
    except sqlite3.OperationalError:        # not recall's DB, or one with no chunks view
        rows = []
    finally:
        con.close()
    return "\n".join(t for row in rows for t in row).encode()


def _varint(buf: bytes, at: int) -> tuple:
    value = 0
    for i in range(9):
        if at + i >= len(buf):
            return value, len(buf)
        byte = buf[at + i]
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return value, at + 9


def _inflated(page: bytes, start: int, size: int) -> bytes:
    """The inflated text of each blob in the cells a table leaf page holds (its local part)."""
    import zlib
    if len(page) < start + 8 or page[start] != 0x0D:
        return b""
    out, most = [], size - 35
    for n in range(int.from_bytes(page[start + 3:start + 5], "big")):
        cell = int.from_bytes(page[start + 8 + 2 * n:start + 10 + 2 * n], "big")
        payload, at = _varint(page, cell)
        _, at = _varint(page, at)                                   # the rowid
        least = (size - 12) * 32 // 255 - 23
        local = payload if payload <= most else (least + (payload - least) % (size - 4)
                                                 if least + (payload - least) % (size - 4) <= most else least)
        record = page[at:at + local]
        head, pos = _varint(record, 0)
        body, kinds = head, []
        while pos < min(head, len(record)):                         # a cut or noisy record ends it
            kind, pos = _varint(record, pos)
            kinds.append(kind)
        for kind in kinds:
            width = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8, 8: 0, 9: 0}.get(kind, (kind - 12) // 2)
            if kind >= 12 and kind % 2 == 0:
                try:
                    out.append(zlib.decompressobj(-15).decompress(record[body:body + width]))
                except zlib.error:
                    pass
            body += width
    return b"\n".join(out)
