"""`recall read`: a note's section (or the whole file) with line numbers, bounded, resumable."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..config import counted
from ..errors import NotFound, RecallError

DEFAULT_MAX_CHARS = 8000


@dataclass
class ReadResult:
    source: str
    relpath: str
    path: str
    start_line: int          # first line shown
    end_line: int            # last line shown
    range_end: int           # last line of the section (or file)
    text: str                # numbered lines
    next_offset: int | None  # pass as --offset to continue; None when complete
    total_lines: int = 0     # the file's line count

    def public(self) -> dict:
        return dict(self.__dict__)


def parse_target(target: str):
    """'source:rel/path.md:12' | 'rel/path.md:12' | 'rel/path.md' → (source|None, path, line|None)."""
    line = None
    head, sep, tail = target.rpartition(":")
    if sep and tail.isdigit():
        target, line = head, int(tail)
    source, sep, rest = target.partition(":")
    if sep and "/" not in source and rest:
        return source, rest, line
    return None, target, line


def _locate(con, cfg, source: str | None, path: str):
    """(source, relpath as the index shows it, real path) of a note named by its target."""
    from .walk import shown
    roots = {s.name: Path(s.path).resolve() for s in cfg.sources}
    named = None
    if source is not None and source not in roots:         # a:b.md, or a source or remote mistyped
        named, source, path = source, None, f"{source}:{path}"
    p = Path(os.path.expanduser(path))
    if p.is_absolute():
        real = p.resolve()
        for name, root in roots.items():
            if real == root or root in real.parents:
                return name, shown(real.relative_to(root).as_posix()), real
        raise RecallError(f"{path} is not inside a configured source",
                          "recall reads only the notes it indexes")
    rel = shown(p.as_posix())     # a name typed with bytes that are not UTF-8: as the index shows it
    if source is None:
        rows = con.execute("SELECT source FROM files WHERE relpath=?", (rel,)).fetchall()
        matches = [r[0] for r in rows if r[0] in roots]
        if not matches:
            here = _from_here(p, roots.values())     # a path as the shell completes it, from where recall runs
            if here is not None:
                return _locate(con, cfg, None, str(here))
            if named is not None:
                places = ", ".join(sorted(roots) + [r.name for r in cfg.remotes])
                raise NotFound(f"no source or remote named '{named}', and no indexed note {rel}",
                               f"the sources and remotes: {places}")
            raise NotFound(f"no indexed note {rel}", _closest_paths(con, rel))
        if len(matches) > 1:
            raise RecallError(f"{rel} is in several sources: {', '.join(matches)}",
                              f"name one, e.g. {matches[0]}:{rel}")
        source = matches[0]
    raw = con.execute("SELECT rawpath FROM files WHERE source=? AND relpath=?", (source, rel)).fetchone()
    real = (roots[source] / (os.fsdecode(raw[0]) if raw and raw[0] else rel)).resolve()  # a name not UTF-8
    if not (real == roots[source] or roots[source] in real.parents):
        raise RecallError(f"{rel} is outside source '{source}'")
    return source, rel, real


def _from_here(p: Path, roots) -> Path | None:
    """`p` from the current folder, when that is a file inside a source (`notes/ops/x.md`, typed from ~)."""
    try:
        here = (Path.cwd() / p).resolve()
    except OSError:                  # the current folder is gone
        return None
    return here if here.is_file() and any(root in here.parents for root in roots) else None


def _closest_paths(con, rel: str, source: str | None = None,
                   otherwise: str = "use a path from 'recall search' output") -> str:
    """"did you mean" with the indexed paths nearest to one typed (a typo, a wrong folder; within
    `source` when it was named, shown as search shows them), else `otherwise`."""
    from ..errors import closest
    name = rel.rsplit("/", 1)[-1].lower()
    paths = [r[0] for r in con.execute("SELECT relpath FROM files WHERE ? IS NULL OR source=?", (source, source))]
    near = [p for p in paths if name[:4] in p.lower()] or paths     # same start of name first: fewer to weigh
    close = closest(rel, {p: p for p in near[:5000]})[:3]
    shown = [f"{source}:{p}" if source else p for p in close]
    return f"did you mean: {', '.join(shown)}?" if close else otherwise


def _section(text: str, rel: str, line: int, total: int):
    """The heading section holding `line`: from its heading to the next heading of the same or a
    higher level (the whole file for non-markdown files)."""
    from .chunk import heading_lines, is_markdown
    if not is_markdown(rel):
        return 1, total
    heads = heading_lines(text)
    above = [(at, level) for at, level in heads if at <= line]
    if not above:
        return 1, (heads[0][0] - 1 if heads else total)
    start, level = above[-1]
    end = next((at - 1 for at, lv in heads if at > start and lv <= level), total)
    return start, end


def read_note(con, cfg, target: str, *, redactor, max_chars: int = DEFAULT_MAX_CHARS, offset: int = 0,
              read_remote=None) -> ReadResult:
    """A note (or a section of one) by target, each line redacted by the vault's `redactor(con, cfg)`
    before any cut; `read_remote(cfg, name, target, max_chars=, offset=)` reads a NAME:path on a remote."""
    if max_chars < 200:
        raise RecallError("--max-chars must be at least 200")
    if offset < 0:
        raise RecallError("--offset must be 0 or more")
    if not target.strip():
        raise RecallError("no path given", "use a path from 'recall search' output")
    source, path, line = parse_target(target)
    if source is not None and any(r.name == source for r in cfg.remotes):
        if read_remote is None:
            raise RecallError(f"'{source}' is a remote, and this caller cannot read from remotes",
                              f"run 'recall read {target}'")
        redact = redactor(con, cfg)       # the remote redacts with its vault; this side with ours
        data = read_remote(cfg, source, f"{path}:{line}" if line else path, max_chars=max_chars, offset=offset)
        texts = [k for k, v in data.items() if isinstance(v, str)]
        data.update(zip(texts, redact.many([data[k] for k in texts])))
        data["source"] = source
        return ReadResult(**data)
    if "\0" in target:
        raise RecallError("a path holds no NUL character", "use a path from 'recall search' output")
    cfg.require_sources()
    source, rel, real = _locate(con, cfg, source, path)
    from .walk import file_ids, is_secrets_text, is_state, read_note_file, state_paths
    secret_files = {str(Path(p).resolve()) for p in cfg.secrets}
    if str(real) in secret_files or file_ids([real]) & file_ids(cfg.secrets):   # a symlink, a hard link
        raise RecallError(f"{rel} is a secrets file", "use 'recall secret find' instead")
    state = state_paths(cfg)
    if is_state(real, state) or file_ids([real]) & file_ids(state[1]):
        raise RecallError(f"{rel} is one of recall's own files (its state: {cfg.home}, the vault key); "
                          "recall never reads itself back", "move the state folder out of the "
                          "sources (RECALL_HOME, or home: in the config)")
    if con.execute("SELECT 1 FROM files WHERE source=? AND relpath=?", (source, rel)).fetchone() is None:
        new = "recall reads only the notes it indexes; run 'recall index' if it is new"
        raise NotFound(f"{source}:{rel} is not an indexed note", new if real.exists() else _closest_paths(con, rel, source, new))
    data, why = read_note_file(real, cfg.max_file_bytes)
    if data is None:
        raise RecallError(f"cannot read {real}: {why.removeprefix('unreadable: ')}",
                          "run 'recall index' if it changed since")
    if is_secrets_text(data):            # indexed before it became one, or before recall knew
        raise RecallError(f"{rel} reads as a recall secrets file", "use 'recall secret find' instead")
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    total = len(lines)
    if line is not None and not 1 <= line <= max(total, 1):
        raise RecallError(f"{rel} has {counted(total, 'line')}; line {line} is outside it")
    start, end = _section(text, rel, line, total) if line else (1, total)
    end = min(end, total)
    first = start + offset
    if offset and first > end:
        where = f"{rel} has {counted(total, 'line')}" if not line else \
            f"the section at {rel}:{line} has {counted(end - start + 1, 'line')} ({start}-{end})"
        below = f"use an --offset below {end - start + 1}, or " if end >= start else ""
        raise RecallError(f"{where}; --offset {offset} is past its end",
                          below + "leave it out to start at the top")
    shown, shown_end = _numbered(lines, first, end, max_chars, redactor(con, cfg))
    next_offset = shown_end - start + 1 if shown_end < end else None
    return ReadResult(source=source, relpath=rel, path=str(real), start_line=first,
                      end_line=shown_end, range_end=end, text=shown, next_offset=next_offset,
                      total_lines=total)


def _numbered(lines: list, first: int, end: int, max_chars: int, redact) -> tuple:
    """(numbered text of at most max_chars, last line shown): whole lines while they fit; a first
    line longer than the budget is cut (_cut), so the next --offset always moves on."""
    width = len(str(end))
    out, used, ready = [], 0, []
    for n in range(first, end + 1):
        if not ready:      # the lines that may fit, redacted at once (a label may be the shorter)
            block, size = [], 0
            for line in lines[n - 1:end]:
                block.append(line)
                size += len(line) + 1
                if size > max_chars - used:
                    break
            ready = redact.many(block)[::-1]
        text = f"{n:>{width}}│ {ready.pop()}\n"
        if used + len(text) > max_chars:
            if not out:
                return _cut(text, n, width, max_chars), n
            return "".join(out), n - 1
        out.append(text)
        used += len(text)
    return "".join(out), end if end >= first else first - 1


def _cut(text: str, n: int, width: int, max_chars: int) -> str:
    """One numbered line cut to max_chars, the cut named inside the budget."""
    body = len(text) - width - 3                         # the line's own characters (no "N│ " or newline)
    marker = f"… [line {n} cut: {{}} of {body} characters shown; --max-chars {len(text)} shows it whole]\n"
    keep = max_chars - len(marker.format(body))          # the shown count has at most as many digits
    return text[:keep] + marker.format(keep - width - 2)
