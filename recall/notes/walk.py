"""Which files a source holds: include/exclude globs, skipped and unreadable folders, names not UTF-8;
the sources missing, and those changed since the last index run (`behind`)."""
from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

from .. import db
from ..config import spelled
from ..errors import InputError

SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox"}
KEY_NAME = "vault.key"      # the vault key, its .new and .next, and backups named after it
_GLOB = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}


def glob_to_regex(pattern: str) -> re.Pattern:
    """gitignore-like: a pattern without '/' matches the file name at any depth; `**` spans folders."""
    if "/" not in pattern.rstrip("/"):
        pattern = "**/" + pattern
    out = "".join(_GLOB.get(part) or re.escape(part) for part in re.split(r"(\*\*/|\*\*|[*?])", pattern))
    if pattern.endswith("/"):
        out += ".*"
    return re.compile(out + r"\Z")


def _matcher(patterns):
    regexes = [glob_to_regex(p) for p in patterns]
    return lambda rel: any(r.match(rel) for r in regexes)


def state_paths(cfg) -> tuple:
    """(folders, files) that are recall's own, as real paths: the state folder (DB, WAL, key,
    locks, temp files …) and the vault key wherever RECALL_KEY_FILE puts it, with its .new/.next/.backed-up/.lock."""
    from ..config import key_file
    key = os.path.realpath(key_file(cfg.home))
    return (os.path.realpath(cfg.home),), tuple(key + end for end in ("", ".new", ".next", ".backed-up", ".lock"))


def is_state(path, state: tuple) -> bool:
    """Whether `path` is recall's own (`state_paths`), or named as the vault key and its backups are."""
    real = os.path.realpath(path)
    folders, files = state
    return (real in files or os.path.basename(real).startswith(KEY_NAME)
            or any(real == f or real.startswith(f + os.sep) for f in folders))


def own_files(cfg) -> set:
    """The files the config names that are never notes, however a source reaches them: the secrets
    and inventory files (walk_source's `skip_paths`)."""
    return {str(Path(p).resolve()) for p in list(cfg.secrets) + list(cfg.inventory)}


def state_inside(root, state: tuple) -> list:
    """The relpaths ('state/') of recall's state folders inside `root`; ['']: `root` is inside one."""
    real, out = os.path.realpath(root), []
    for folder in state[0]:
        if real == folder or real.startswith(folder + os.sep):
            return [""]
        if folder.startswith(real + os.sep):
            out.append(os.path.relpath(folder, real).replace(os.sep, "/") + "/")
    return out


_SECRETS_ENTRY = re.compile(rb"^-[ \t]+[\"']?id[\"']?[ \t]*:|^-[ \t]*\{.*\bid[\"']?[ \t]*:", re.M)
_SECRETS_VALUE = re.compile(rb"^[ \t]+[\"']?(?:value|fields)[\"']?[ \t]*:|^-[ \t]*\{.*\b(?:value|fields)[\"']?[ \t]*:",
                            re.M)


def read_note_file(path, limit: int) -> tuple:
    """(bytes, None) of a note file, or (None, why not): opened without waiting and checked on the
    descriptor, so a note replaced since it was stat'ed or indexed (a FIFO would hold the index, a
    read or a search forever) is refused, and a file grown past `limit` is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):          # a folder too: open() of its descriptor raises
            return None, "not a regular file"
        if st.st_size > limit:
            return None, f"larger than {limit:,} bytes ({st.st_size:,})"
        with open(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"
    finally:
        os.close(fd)
    if len(data) > limit:                   # grown while it was read
        return None, f"larger than {limit:,} bytes"
    return data, None


_NOT_A_LIST = re.compile(rb"^[^\s#.\-\[]", re.M)    # a line at the margin no YAML list of entries has


def is_secrets_text(data: bytes) -> bool:
    """Whether a file reads as a recall secrets file (entries '- id: …' with a 'value:' or 'fields:',
    and nothing else at the margin), wherever it sits: a copy, a backup, another config's, one being
    written. A sniff, no parse: a file still being edited (not valid YAML yet) holds plain values all
    the same; a note that shows an entry among its prose is no secrets file."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    return (_SECRETS_ENTRY.search(data) is not None and _SECRETS_VALUE.search(data) is not None
            and _NOT_A_LIST.search(data) is None)


def walk_source(source, *, skip_paths=frozenset(), unreadable=None, state=((), ())):
    """Yield (relpath, abspath) of files in `source` that its include/exclude globs select, never
    recall's own (`state_paths`); a folder that cannot be listed is appended to `unreadable` as
    (relpath + '/', reason)."""
    root = Path(source.path)
    if not root.is_dir():
        raise InputError(source.config_path, source.line or None,
                         f"source '{source.name}': {spelled(str(root))} is not a folder",
                         hint="fix the path or remove the source; nothing was changed")
    included, excluded = _matcher(source.include), _matcher(source.exclude)
    own = state_inside(root, state)
    if own == [""]:
        return
    skip_paths = set(skip_paths) | set(state[1])
    skip_ids = file_ids(skip_paths)      # secrets files, the key: however reached (symlink, hard link, linked source)

    def cannot_list(exc):
        if unreadable is not None:
            rel = os.path.relpath(exc.filename or str(root), root).replace(os.sep, "/")
            unreadable.append(("" if rel == "." else rel + "/", exc.strerror or str(exc)))
    for dirpath, dirnames, filenames in walk_tree(str(root), cannot_list):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                             and not excluded(rel_dir + d + "/") and rel_dir + d + "/" not in own)
        for name in sorted(filenames):
            rel = rel_dir + name
            full = os.path.join(dirpath, name)
            if included(rel) and not excluded(rel) and full not in skip_paths and not name.startswith(KEY_NAME) \
                    and not (skip_ids and file_ids([full]) & skip_ids):
                yield rel, full


def would_index(cfg, path) -> str | None:
    """The name of the source an index run would take the file at `path` into (as walk_source chooses:
    its globs, no hidden or skipped folder, never recall's own files), else None."""
    real = os.path.realpath(path)
    if os.path.basename(real).startswith(KEY_NAME) or is_state(real, state_paths(cfg)):
        return None
    for source in cfg.sources:
        root = os.path.realpath(source.path)
        if not real.startswith(root + os.sep):
            continue
        parts = os.path.relpath(real, root).split(os.sep)
        excluded = _matcher(source.exclude)
        folders = ["/".join(parts[:i]) + "/" for i in range(1, len(parts))]
        if any(p in SKIP_DIRS or p.startswith(".") for p in parts[:-1]) or any(excluded(f) for f in folders):
            return None
        rel = "/".join(parts)
        return source.name if _matcher(source.include)(rel) and not excluded(rel) else None
    return None


def walk_tree(top: str, onerror):
    """os.walk(top, onerror=…) without following links, on a stack: os.walk recurses before Python 3.12,
    and a tree 1,000+ folders deep is walked too. `dirnames` may be pruned in place; a linked folder
    is listed, not entered."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError as exc:
            onerror(exc)
            continue
        dirnames, filenames, links = [], [], set()
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirnames if is_dir else filenames).append(entry.name)
            if is_dir and entry.is_symlink():
                links.add(entry.name)
        yield folder, dirnames, filenames
        stack.extend(os.path.join(folder, d) for d in reversed(dirnames) if d not in links)


def file_ids(paths) -> set:
    """(device, inode) of each existing path: a symlink or hard link to it is the same file."""
    ids = set()
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        ids.add((st.st_dev, st.st_ino))
    return ids


def shown(path: str) -> str:
    """A path as text: bytes of a name that is not UTF-8 (kept by os as surrogates) become U+FFFD."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def raw_name(rel: str):
    """The bytes of a relpath that is not UTF-8 (stored beside its shown form), else None."""
    return None if shown(rel) == rel else rel.encode("utf-8", "surrogateescape")


def no_note_yet(con, cfg) -> list:
    """The notice of an index that holds no file at all, where to put notes and what to run."""
    if con.execute("SELECT 1 FROM files LIMIT 1").fetchone():
        return []
    return [f"the index holds no note yet: add markdown or text files to "
            f"{', '.join(str(s.path) for s in cfg.sources)}, then run 'recall index'"]


def missing_sources(sources) -> list:
    """One line per configured source whose folder is not there (for `search` to warn with)."""
    return [f"source '{s.name}': {s.path} is not there (missing, or a disk not mounted): "
            "its notes are searched as last indexed" for s in sources if not os.path.isdir(s.path)]


def behind(con, cfg, budget_s: float = 0.005, always: int = 64) -> list:
    """Names of the sources with a folder the last index run saw (no walk) changed since: a note
    created, removed or renamed there. Past the first `always` folders (a small tree is never left
    half-checked because a busy machine paused this process), a source not fully stat'ed within
    `budget_s` is not named."""
    indexed, known = db.get_meta(con, "indexed_at"), db.get_meta(con, "folders")
    if not indexed:
        return []
    since, deadline, stale, statted = float(indexed), time.monotonic() + budget_s, [], 0
    folders: dict = {}
    for line in (known or "").split("\n"):       # a source that held no note: its folder alone
        source, _, rel = line.partition("\t")
        folders.setdefault(source, []).append(rel)
    for source in cfg.sources:
        if not os.path.isdir(source.path):  # missing or unmounted: search says so in its own line
            continue
        for rel in folders.get(source.name, [""]):
            try:
                changed = os.stat(os.path.join(str(source.path), rel)).st_mtime > since
            except OSError:                 # a folder gone: its notes were removed or moved
                changed = True
            if changed:
                stale.append(source.name)
                break
            statted += 1
            if statted >= always and time.monotonic() > deadline:
                return stale
    return stale
