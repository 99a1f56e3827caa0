"""The YAML subset recall's files use: containers that know their line numbers, errors at file:line:col."""
from __future__ import annotations

import contextlib
import os
import re
import stat

from ..errors import InputError, NotFound
from .scalars import _END, _FLOW, _SEP, Span, _is_marker, _plain_end, _resolve, _rest_ok, _Scalars, replace_spans

__all__ = ["YMap", "YList", "Span", "line_of", "check_keys", "load_entries", "parse", "load", "replace_spans", "MAX_BYTES"]

_UNSUPPORTED = {"&": "anchors ('&name') are not supported", "*": "aliases ('*name') are not supported",
                "!": "tags ('!tag') are not supported", "%": "a plain value cannot start with '%'",
                "@": "a plain value cannot start with '@' (reserved in YAML)",
                "`": "a plain value cannot start with '`' (reserved in YAML)"}
MAX_BYTES = 4 * 2**20              # secrets, inventory and config files: a larger one is refused unread
_QUOTE_HINT = "quote the value if it is meant as text"
MAX_DEPTH = 100                    # nesting levels; deeper is refused at its line, not a RecursionError


class YMap(dict):
    """A mapping that remembers the line it starts on and the line of each key."""

    def __init__(self, line: int = 0):
        super().__init__()
        self.line = line
        self.key_lines: dict = {}
        self.spans: dict = {}          # key -> Span of its value, when the value is a scalar


class YList(list):
    """A sequence that remembers the line it starts on and the line of each item."""

    def __init__(self, line: int = 0):
        super().__init__()
        self.line = line
        self.item_lines: list[int] = []


def line_of(container: object, key_or_index: object, default: int | None = None) -> int | None:
    """The 1-based line of a key in a YMap or an item in a YList; `default` when unknown."""
    with contextlib.suppress(IndexError, TypeError):    # an index out of range, an unhashable key
        if isinstance(container, YMap):
            return container.key_lines.get(key_or_index, default)
        if isinstance(container, YList):
            return container.item_lines[key_or_index]
    return default


def check_keys(mapping: object, allowed, path: str, what: str, default: int | None = None) -> None:
    """An unknown key in a mapping is an InputError at its line, listing the keys allowed."""
    for key in mapping:
        if key not in allowed:
            from difflib import get_close_matches
            near = get_close_matches(str(key), sorted(map(str, allowed)), n=1, cutoff=0.6)
            raise InputError(path, line_of(mapping, key, getattr(mapping, "line", default)),
                             f"unknown field {str(key)!r} in {what}" + (f": did you mean '{near[0]}'?" if near else ""),
                             hint="known fields: " + ", ".join(sorted(map(str, allowed))))


def load_entries(path, what: str, each: bool = False) -> list:
    """A file that is a list of mappings ('- id: …') → [(item, line)]; an absent file, or a
    document that is not a list, is an InputError naming the file. `each`: an entry that does not
    parse (a duplicate key, a quote left open) is returned as its InputError; the others still load."""
    path = str(path)
    if not os.path.exists(path):
        raise InputError(path, None, f"{what} file does not exist", hint=f"fix '{what}:' in the config")
    text = _read(path)
    try:
        doc = parse(text, path)
    except InputError:
        if each and (apart := _entries_apart(text, path)) is not None:
            return apart
        raise
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise InputError(path, getattr(doc, "line", 1), f"{'an' if what[:1] in 'aeiou' else 'a'} {what} file is a list of entries ('- id: …')")
    return [(item, line_of(doc, i)) for i, item in enumerate(doc)]


def _entries_apart(text: str, path: str) -> list | None:
    """Each '- ' item at the margin parsed alone: [(item, or its InputError with the `id` its line
    reads, line)]; None when none fails alone (the file's error is not inside an entry)."""
    whole = _Parser(text, path)
    lines, out = whole.lines, []
    starts = [r for r, line in enumerate(lines) if line[:1] == "-" and line[1:2] in _END]
    if not starts or any(line.strip(" \t")[:1] not in ("", "#") and not _is_marker(line) for line in lines[:starts[0]]):
        return None
    for start in reversed(starts):        # the last first: the lines after an entry are cut, not copied
        p = _Parser("", path)
        p.lines, p.row, p.final_newline = lines, start, start != starts[-1] or whole.final_newline
        try:
            out.append((p.document()[0], start + 1))
        except InputError as exc:
            m = re.search(r"^(- |  )id:[ \t]*(['\"]?)([A-Za-z0-9][\w.-]*)\2[ \t]*(#.*)?$", "\n".join(lines[start:]), re.M)
            exc.id = m and m.group(3)
            out.append((exc, start + 1))
        del lines[start:]
    return out[::-1] if any(isinstance(item, InputError) for item, _ in out) else None


def parse(text: str, path: str = "<string>") -> object:
    """Parse one document: YMap, YList, a scalar, or None when there is no content."""
    return _Parser(text, str(path)).document()


def load(path: object) -> object:
    """Read a UTF-8 file and parse it; a missing file is NotFound, anything else InputError."""
    return parse(_read(os.fspath(path)), os.fspath(path))


def _read(name: str) -> str:
    """A UTF-8 file's text; a missing file is NotFound, anything else InputError."""
    try:
        # opened without waiting: a FIFO named as a file would hold every verb until a writer came
        with open(os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, a device, a socket)"
                raise InputError(name, None, f"{what}, so it was not read", hint="name the YAML file itself")
            if st.st_size > MAX_BYTES:     # refused before reading: a 64 MB scalar took 800 MB to parse
                raise InputError(name, None, f"the file is {st.st_size / 2**20:.1f} MB; recall reads YAML files "
                                 f"of at most {MAX_BYTES // 2**20} MB",
                                 hint="check that it is the file you meant, or split it into several")
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise NotFound(f"{name}: no such file", "create it, or fix the path in the config") from None
    except OSError as e:
        raise InputError(name, None, f"cannot read the file: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        raise InputError(name, data.count(b"\n", 0, e.start) + 1, f"not valid UTF-8 (byte 0x{data[e.start]:02x})",
                         col=e.start - line_start + 1, hint="save the file as UTF-8") from None
    return text


class _Parser(_Scalars):
    """One pass over the lines; block structure by indentation, flow and quotes by a cursor."""

    def __init__(self, text: str, path: str):
        self.path = path
        text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
        self.final_newline = text.endswith("\n")   # a block scalar's last break depends on it
        self.lines = text.removesuffix("\n").split("\n")
        self.row = 0                   # next line the block parser looks at
        self.fr = self.fc = 0          # the flow cursor (row, col)
        self.fparent = -1              # indentation the current flow collection must stay inside
        self.depth = 0
        self.span: Span | None = None  # where the scalar parsed last was written

    def error(self, row: int, col: int, message: str, hint: str | None = None) -> InputError:
        return InputError(self.path, row + 1, message, col=col + 1, hint=hint)

    # ---- lines and indentation

    def indent_of(self, row: int) -> int:
        line = self.lines[row]
        n = len(line) - len(line.lstrip(" "))
        if line[n:n + 1] == "\t":
            raise self.error(row, n, "tab used for indentation", hint="indent with spaces only")
        return n

    def skip_blank(self) -> int:
        """Move to the next line with content: its indentation, or -1 at the end or at a document marker."""
        while self.row < len(self.lines):
            line = self.lines[self.row]
            body = line.strip(" \t")
            if body and body[0] != "#":
                return -1 if _is_marker(line) else self.indent_of(self.row)
            self.row += 1
        return -1

    def is_item(self, row: int, col: int) -> bool:
        line = self.lines[row]
        return line[col:col + 1] == "-" and line[col + 1:col + 2] in _END

    def is_key_colon(self, row: int, col: int) -> bool:
        rest = self.lines[row][col:].lstrip(" \t")
        return rest[:1] == ":" and rest[1:2] in _END

    # ---- the document

    def document(self) -> object:
        ind = self.skip_blank()
        if ind == 0 and self.lines[self.row].startswith("%"):
            raise self.error(self.row, 0, "directives ('%YAML', '%TAG') are not supported", hint="delete the line")
        value = None
        if ind == -1 and self.row < len(self.lines) and self.lines[self.row].startswith("---"):
            row, line = self.row, self.lines[self.row]
            self.row += 1
            if _rest_ok(line, 3):
                ind = self.skip_blank()
            else:                          # `--- value` on the marker line itself
                value = self.node(row, len(line) - len(line[3:].lstrip(" \t")), -1, compact=False)
        if ind >= 0:
            value = self.node(self.row, ind, -1, compact=True)
        self.finish()
        return value

    def finish(self) -> None:
        """After the top-level value: only blanks, comments and an optional '...' may follow."""
        ind = self.skip_blank()
        if self.row == len(self.lines):
            return
        line = self.lines[self.row]
        if ind == -1 and line.startswith("...") and _rest_ok(line, 3):
            self.row += 1
            self.skip_blank()
            if self.row == len(self.lines):
                return
        if ind == -1 or line.startswith("..."):
            raise self.error(self.row, 0, "only one document per file is supported",
                             hint="remove the second '---' and what follows, or move it to its own file")
        raise self.error(self.row, ind, "unexpected content after the top-level value",
                         hint="check the indentation of this line and the lines above")

    # ---- block structure

    def nested(self, row: int, col: int, parse, *args) -> object:
        """parse(*args) one nesting level deeper; past MAX_DEPTH an error at (row, col)."""
        if self.depth >= MAX_DEPTH:
            raise self.error(row, col, f"nested more than {MAX_DEPTH} levels deep", hint="flatten the document")
        self.depth += 1
        try:
            return parse(*args)
        finally:
            self.depth -= 1

    def node(self, row: int, col: int, parent: int, compact: bool) -> object:
        """The value starting at (row, col); `compact`: a block mapping or list may start here."""
        return self.nested(row, col, self.block_node, row, col, parent, compact)

    def block_node(self, row: int, col: int, parent: int, compact: bool) -> object:
        ch = self.lines[row][col]
        if self.is_item(row, col):
            if not compact:
                raise self.error(row, col, "a '- ' list cannot start on the same line as its key",
                                 hint="put each '- ' item on its own line below the key")
            return self.block_seq(row, col, under_key=False)
        if ch in "[{":
            self.fr, self.fc, self.fparent = row, col, parent
            value = self.flow_node()
            return self.after_token(value, self.fr, self.fc)
        if ch in "|>":
            return self.block_scalar(row, col, parent)
        if ch in "'\"":
            text, r, c = self.quoted(row, col, parent)
            if compact and r == row and self.is_key_colon(r, c):
                return self.block_map(row, col)
            self.span = Span(row, col, r, c, False)
            return self.after_token(text, r, c)
        self.check_plain_start(row, col, flow=False)
        text, r, c, stop = self.plain(row, col, parent, flow=False)
        if stop == ":":
            if not compact:
                raise self.error(r, c, "found ': ' inside a value",
                                 hint="quote the value, or put the nested mapping on its own lines")
            return self.block_map(row, col)
        self.span = Span(row, col, r, len(self.lines[r][:c].rstrip(" \t")), False)
        self.row = r + 1
        return _resolve(text)

    def after_token(self, value: object, r: int, c: int) -> object:
        """A quoted scalar or flow collection ended at (r, c): the rest of its line must be empty."""
        if _rest_ok(self.lines[r], c):
            self.row = r + 1
            return value
        c = len(self.lines[r]) - len(self.lines[r][c:].lstrip(" \t"))
        if self.is_key_colon(r, c):
            raise self.error(r, c, "unexpected ':' after this value",
                             hint="a key is plain or quoted text on one line, and a nested mapping "
                                  "starts on its own line")
        raise self.error(r, c, "unexpected text after the value",
                         hint="quote the whole value, and put a space before a '#' comment")

    def block_map(self, row: int, col: int) -> YMap:
        """A block mapping whose first key is at (row, col); the others sit at the same column."""
        m = YMap(row + 1)
        while True:
            key, c = self.key(row, col)
            self.check_new(m, key, row, col)
            self.span = None
            self.put(m, key, self.value_after(row, c, col, seq_at_parent=True), row)
            ind = self.skip_blank()
            if ind < col:
                return m
            if ind > col:
                raise self.bad_indent(ind)
            row = self.row

    def block_seq(self, row: int, col: int, under_key: bool) -> YList:
        """A block list whose first '- ' is at (row, col); `under_key`: it may end at a sibling key."""
        s = YList(row + 1)
        while True:
            s.item_lines.append(row + 1)
            s.append(self.value_after(row, col + 1, col, seq_at_parent=False))
            ind = self.skip_blank()
            if ind < col:
                return s
            if ind > col:
                raise self.bad_indent(ind)
            row = self.row
            if not self.is_item(row, col):
                if under_key:
                    return s
                raise self.error(row, col, "expected a '- ' item at this indentation",
                                 hint="a list and a mapping cannot share an indentation level")

    def bad_indent(self, ind: int) -> InputError:
        return self.error(self.row, ind, "unexpected indentation",
                          hint="align this line with its siblings; a value that spans lines must be quoted")

    def key(self, row: int, col: int) -> tuple[object, int]:
        """The key at (row, col) and the column after its ':'."""
        line = self.lines[row]
        ch = line[col]
        if ch in "'\"":
            text, r, c = self.quoted(row, col, col)
            if r != row or not self.is_key_colon(row, c):
                raise self.error(row, col, "expected 'key: value'",
                                 hint="a quoted key must be on one line and be followed by ': '")
            return text, line.index(":", c) + 1
        if ch in "[{":
            raise self.error(row, col, "a [...] or {...} cannot be used as a key")
        if self.is_item(row, col):
            raise self.error(row, col, "expected 'key: value', found a '- ' item",
                             hint="a list and a mapping cannot share an indentation level")
        self.check_plain_start(row, col, flow=False)
        end, stop = _plain_end(line, col, False)
        text = line[col:end].rstrip(" \t")
        if stop != ":":
            hint = "put a space after ':'" if ":" in text else "write 'key: value'"
            raise self.error(row, col + len(text), f"expected ':' after the key {text!r}", hint=hint)
        return _resolve(text), end + 1

    def value_after(self, row: int, c: int, indent: int, seq_at_parent: bool) -> object:
        """The value after a key's ':' or an item's '-' at column c: on this line, below it, or null."""
        line = self.lines[row]
        while c < len(line) and line[c] in _SEP:
            c += 1
        if c < len(line) and line[c] != "#":
            return self.node(row, c, indent, compact=not seq_at_parent)
        self.row = row + 1
        ind = self.skip_blank()
        if ind > indent:
            return self.node(self.row, ind, indent, compact=True)
        # `key:` followed by `- item` at the key's own indentation is a common, valid layout
        if ind == indent and seq_at_parent and self.is_item(self.row, ind):
            return self.block_seq(self.row, ind, under_key=True)
        return None

    # ---- scalars

    def check_plain_start(self, row: int, col: int, flow: bool) -> None:
        """Refuse what cannot start a plain scalar, naming the YAML feature it would be."""
        line = self.lines[row]
        ch, nxt = line[col], line[col + 1:col + 2]
        ends = nxt in _END or (flow and nxt in _FLOW)
        if ch in _UNSUPPORTED:
            raise self.error(row, col, _UNSUPPORTED[ch], hint=_QUOTE_HINT)
        if ch == "?" and ends:
            raise self.error(row, col, "complex keys ('? ') are not supported", hint="write 'key: value'")
        if ch == ":" and ends:
            raise self.error(row, col, "missing key or value before ':'")
        if ch in ",]}#":
            raise self.error(row, col, f"unexpected {ch!r}", hint=_QUOTE_HINT)
        if flow and ch == "-" and ends:
            raise self.error(row, col, "a '- ' item cannot appear inside [...] or {...}")
        if flow and ch in "|>":
            raise self.error(row, col, "a '|' or '>' block scalar cannot appear inside [...] or {...}",
                             hint=_QUOTE_HINT)

    def plain(self, row: int, col: int, parent: int, flow: bool) -> tuple[str, int, int, str]:
        """A plain scalar from (row, col), folded over more-indented lines: text, end row/col, stop reason."""
        line = self.lines[row]
        end, stop = _plain_end(line, col, flow)
        text = line[col:end].rstrip(" \t")
        if stop:
            return text, row, end, stop
        r, c, empties, nxt = row, end, 0, row + 1
        while nxt < len(self.lines):
            cur = self.lines[nxt]
            body = cur.lstrip(" \t")
            if not body:
                empties, nxt = empties + 1, nxt + 1
                continue
            if body[0] == "#" or _is_marker(cur):
                break
            ind = len(cur) - len(body) if flow else self.indent_of(nxt)
            if ind <= parent:
                break
            e, why = _plain_end(cur, ind, flow)
            if e == ind:                   # inside [...]: the line starts with ',', ']', ...
                break
            if why == ":" and not flow:
                raise self.error(nxt, e, "found ': ' in a value continued from the line above",
                                 hint="quote the value, or fix the indentation of this line")
            text += ("\n" * empties or " ") + cur[ind:e].rstrip(" \t")
            r, c, empties, nxt, stop = nxt, e, 0, nxt + 1, why
            if why:
                break
        return text, r, c, stop

    # ---- flow collections

    def flow_collection(self) -> object:
        """A [...] or {...} at the flow cursor, possibly over several lines; the cursor ends after it."""
        r0, c0 = self.fr, self.fc
        is_seq = self.lines[r0][c0] == "["
        close = "]" if is_seq else "}"
        coll: object = YList(r0 + 1) if is_seq else YMap(r0 + 1)
        self.fc += 1
        while True:
            ch = self.flow_skip(r0, c0)
            if ch == close:
                self.fc += 1
                return coll
            if is_seq:
                coll.item_lines.append(self.fr + 1)
                coll.append(self.flow_node())
                if self.flow_skip(r0, c0) == ":":
                    raise self.error(self.fr, self.fc, "'key: value' inside [...] is not supported",
                                     hint="use {key: value} for a mapping")
            else:
                self.flow_pair(coll, r0, c0)
            ch = self.flow_skip(r0, c0)
            if ch == ",":
                self.fc += 1
            elif ch != close:
                raise self.error(self.fr, self.fc, f"expected ',' or {close!r}, found {ch!r}",
                                 hint=_QUOTE_HINT if ch not in "[{" else "separate items with ','")

    def flow_pair(self, m: YMap, r0: int, c0: int) -> None:
        row, col = self.fr, self.fc
        if self.lines[row][col] in "[{":
            raise self.error(row, col, "a [...] or {...} cannot be used as a key")
        key = self.flow_node()
        if self.flow_skip(r0, c0) != ":":
            colon = isinstance(key, str) and ":" in key
            raise self.error(self.fr, self.fc, f"expected ':' after the key {str(key)!r}",
                             hint="put a space after ':'" if colon else "write {key: value, ...}")
        self.fc += 1
        self.span = None
        value = None if self.flow_skip(r0, c0) in ",}" else self.flow_node()
        self.check_new(m, key, row, col)
        self.put(m, key, value, row)

    def check_new(self, m: YMap, key: object, row: int, col: int) -> None:
        if key in m:
            raise self.error(row, col, f"duplicate key {str(key)!r} (first on line {m.key_lines[key]})",
                             hint="each key may appear once in a mapping")

    def put(self, m: YMap, key: object, value: object, row: int) -> None:
        """m[key] = value, with the key's line and the span of a scalar value."""
        m.key_lines[key] = row + 1
        m[key] = value
        if self.span is not None and not isinstance(value, (YMap, YList)):
            m.spans[key] = self.span

    def flow_node(self) -> object:
        row, col = self.fr, self.fc
        if self.lines[row][col] in "[{":
            return self.nested(row, col, self.flow_collection)
        if self.lines[row][col] in "'\"":
            text, self.fr, self.fc = self.quoted(row, col, self.fparent)
            self.span = Span(row, col, self.fr, self.fc, True)
            return text
        self.check_plain_start(row, col, flow=True)
        text, self.fr, self.fc, _ = self.plain(row, col, self.fparent, flow=True)
        self.span = Span(row, col, self.fr, len(self.lines[self.fr][:self.fc].rstrip(" \t")), True)
        return _resolve(text)

    def flow_skip(self, r0: int, c0: int) -> str:
        """Skip blanks, line ends and comments inside the collection opened at (r0, c0); the next character."""
        while True:
            line = self.lines[self.fr]
            while self.fc < len(line) and line[self.fc] in _SEP:
                self.fc += 1
            if self.fc < len(line):
                comment = line[self.fc] == "#" and (self.fc == 0 or line[self.fc - 1] in _SEP)
                if not comment:
                    return line[self.fc]
            self.fr, self.fc = self.fr + 1, 0
            opener = self.lines[r0][c0]
            message = f"{opener!r} is never closed with {']' if opener == '[' else '}'!r}"
            if self.fr == len(self.lines):
                raise self.error(r0, c0, message, hint="close it")
            cur = self.lines[self.fr]
            body = cur.lstrip(" \t")
            # a continuation must be indented under its key; only the closing bracket may sit lower
            inside = len(cur) - len(body) > self.fparent or body[:1] in ("]", "}")
            if body and body[0] != "#" and (_is_marker(cur) or not inside):
                raise self.error(r0, c0, message,
                                 hint=f"close it before line {self.fr + 1}, or indent its continuation lines")
