"""The YAML subset's scalars: resolving plain text, quoted and `|` / `>` readers, and where each sits."""
from __future__ import annotations

import re
from dataclasses import dataclass

_FLOW = (",", "[", "]", "{", "}")
_SEP = (" ", "\t")             # separation whitespace inside a line
_END = ("", " ", "\t")         # what may follow an indicator such as ':' or '-'
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v",
            "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\",
            "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_HEX_LEN = {"x": 2, "u": 4, "U": 8}


# YAML 1.2 core schema (not 1.1: yes/no/on/off, 012 octal, 1_000 and 12:30 are not special here)
_CONSTANTS = {"": None, "~": None, "null": None, "Null": None, "NULL": None, "true": True,
              "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
# compiled on first use (re's cache), and only for a text that starts like a number (_NUMBER_STARTS)
_NUMBERS = [
    (r"[-+]?[0-9]+\Z", int),
    (r"0o[0-7]+\Z", lambda t: int(t[2:], 8)),
    (r"0x[0-9a-fA-F]+\Z", lambda t: int(t[2:], 16)),
    (r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z", float),
    (r"[-+]?\.(inf|Inf|INF)\Z|\.(nan|NaN|NAN)\Z", lambda t: float(t.replace(".", ""))),
]
_NUMBER_STARTS = "0123456789+-."
_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass
class Span:
    """Where a scalar is written (0-based rows and columns, end exclusive); `flow`: inside [...] or {...}."""
    row: int
    col: int
    end_row: int
    end_col: int
    flow: bool


def replace_spans(text: str, edits: list) -> str:
    """`text` with each (Span, new text) of `edits` replaced, every other character kept as it was."""
    bom = text[:1] if text.startswith("\ufeff") else ""
    body = text[len(bom):]
    starts = [0] + [m.end() for m in _BREAK.finditer(body)]      # where each row the parser counts starts
    for span, new in sorted(edits, key=lambda e: (e[0].row, e[0].col), reverse=True):
        a, b = starts[span.row] + span.col, starts[span.end_row] + span.end_col
        body = body[:a] + new + body[b:]
    return bom + body


def _is_marker(line: str) -> bool:
    """A '---' or '...' document marker, which is only one at column 1."""
    return line[:3] in ("---", "...") and line[3:4] in _END


def _rest_ok(line: str, i: int) -> bool:
    """Nothing but blanks or a comment after a finished token; '#' needs a blank before it."""
    rest = line[i:]
    return not rest.strip(" \t") or (rest[0] in _SEP and rest.lstrip(" \t")[0] == "#")


def _resolve(text: str) -> object:
    """Turn an unquoted scalar into null, bool, int, float or str (YAML 1.2 core schema)."""
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if text[0] not in _NUMBER_STARTS:
        return text
    for pattern, convert in _NUMBERS:
        if re.match(pattern, text):
            try:
                return convert(text)
            except ValueError:         # more digits than int() accepts (Python 3.11+): keep the text
                return text
    return text


def _plain_end(line: str, i: int, flow: bool) -> tuple[int, str]:
    """Where a plain scalar from i stops on this line, and why: ':' (a key), '#', a flow indicator or ''."""
    start = i
    while i < len(line):
        ch, nxt = line[i], line[i + 1:i + 2]
        if ch == ":" and (nxt in _END or (flow and nxt in _FLOW)):
            return i, ":"
        if ch == "#" and i > start and line[i - 1] in _SEP:
            return i, "#"
        if flow and ch in _FLOW:
            return i, ch
        i += 1
    return i, ""


class _Scalars:
    """The parser's scalar readers; `_Parser` supplies lines, final_newline and error."""

    def quoted(self, row: int, col: int, parent: int) -> tuple[str, int, int]:
        """A quoted scalar from (row, col), folded over lines: text and the (row, col) after the quote."""
        q = self.lines[row][col]
        parts: list[str] = []
        r, i = row, col + 1
        while True:
            line = self.lines[r]
            buf: list[str] = []
            kept = 0                       # escapes and '' are never trimmed as trailing blanks
            escaped_break = False
            while i < len(line):
                ch = line[i]
                if ch == q and q == "'" and line[i + 1:i + 2] == "'":
                    buf.append("'")
                    i += 2
                    kept = len(buf)
                elif ch == q:
                    parts.append("".join(buf))
                    return "".join(parts), r, i + 1
                elif ch == "\\" and q == '"' and i + 1 == len(line):
                    escaped_break = True
                    break
                elif ch == "\\" and q == '"':
                    text, i = self.escape(r, i)
                    buf.append(text)
                    kept = len(buf)
                else:
                    buf.append(ch)
                    i += 1
            while not escaped_break and len(buf) > kept and buf[-1] in _SEP:
                buf.pop()
            parts.append("".join(buf))
            r, empties = self.next_quoted_line(r, row, col, parent)
            parts.append("\n" * empties or ("" if escaped_break else " "))
            i = len(self.lines[r]) - len(self.lines[r].lstrip(" \t"))

    def next_quoted_line(self, r: int, row: int, col: int, parent: int) -> tuple[int, int]:
        """The next non-blank line of a quoted scalar opened at (row, col), and the blank lines skipped."""
        q = self.lines[row][col]
        r, empties = r + 1, 0
        while r < len(self.lines) and not self.lines[r].strip(" \t"):
            r, empties = r + 1, empties + 1
        end = r == len(self.lines)
        if end or _is_marker(self.lines[r]) or len(self.lines[r]) - len(self.lines[r].lstrip(" \t")) <= parent:
            kind = "single" if q == "'" else "double"
            where = "" if end else f" before line {r + 1}, or indent its continuation lines"
            raise self.error(row, col, f"unterminated {kind}-quoted string", hint=f"close it with {q}{where}")
        return r, empties

    def escape(self, r: int, i: int) -> tuple[str, int]:
        """The character a backslash escape at (r, i) stands for, and the column after it."""
        line = self.lines[r]
        code = line[i + 1]
        if code in _ESCAPES:
            return _ESCAPES[code], i + 2
        if code in _HEX_LEN:
            n = _HEX_LEN[code]
            digits = line[i + 2:i + 2 + n]
            if re.fullmatch("[0-9a-fA-F]{%d}" % n, digits) and int(digits, 16) <= 0x10FFFF:
                return chr(int(digits, 16)), i + 2 + n
            raise self.error(r, i, f"bad escape '\\{code}{digits}': expected {n} hex digits",
                             hint="use single quotes for text with backslashes")
        raise self.error(r, i, f"unknown escape '\\{code}'",
                         hint="write '\\\\' for a backslash, or use single quotes")

    def block_scalar(self, row: int, col: int, parent: int) -> str:
        """A '|' or '>' scalar whose header is at (row, col); its text is on the lines below."""
        line = self.lines[row]
        chomp, step, i = "", 0, col + 1
        while i < len(line) and line[i] not in _SEP:
            if line[i] in "+-" and not chomp:
                chomp = line[i]
            elif line[i] in "123456789" and not step:
                step = int(line[i])
            else:
                raise self.error(row, i, f"unexpected {line[i]!r} after {line[col]!r}",
                                 hint="only '+' or '-' and one digit 1-9 may follow '|' or '>'")
            i += 1
        if not _rest_ok(line, i):
            raise self.error(row, i, f"unexpected text after {line[col]!r}",
                             hint="the text of a block scalar goes on the lines below, indented")
        indent = max(parent, 0) + step if step else self.detect_indent(row + 1, parent)
        content: list[str | None] = []    # None marks an empty line
        r, end = row + 1, (row, i)
        while r < len(self.lines):
            cur = self.lines[r]
            if len(cur) - len(cur.lstrip(" ")) >= indent and len(cur) > indent:
                content.append(cur[indent:])
                end = (r, len(cur))
            elif not cur.strip(" "):
                content.append(None)
            else:
                break
            r += 1
        self.row = r
        self.span = Span(row, col, end[0], end[1], False)
        return self.join_block(content, row + 1, line[col] == ">", chomp)

    def detect_indent(self, start: int, parent: int) -> int:
        """The indentation of a block scalar's first non-empty line (YAML's auto-detection)."""
        widest, widest_row = 0, start
        for r in range(start, len(self.lines)):
            cur = self.lines[r]
            if cur.strip(" "):
                indent = len(cur) - len(cur.lstrip(" "))
                if indent <= parent or indent == 0:
                    break                  # not indented under the header: the scalar is empty
                if widest > indent:
                    raise self.error(widest_row, 0, "a leading blank line has more spaces than the first text line",
                                     hint="remove the spaces, or add an indentation digit after '|' or '>'")
                return indent
            if len(cur) > widest:
                widest, widest_row = len(cur), r
        # an empty scalar: every blank line below the header is an empty line, whatever its spaces
        return max(parent + 1, 1, widest + 1)

    def has_break(self, r: int) -> bool:
        """Whether line r ends with a line break (the file's last line may not)."""
        return r < len(self.lines) - 1 or self.final_newline

    def join_block(self, content: list[str | None], start: int, folded: bool, chomp: str) -> str:
        """Join block scalar lines: '|' keeps breaks, '>' folds them between unindented lines."""
        out: list[str] = []
        prev = None
        for k, text in enumerate(content):
            if text is None:
                continue
            if prev is None:
                out.append("\n" * k)       # leading empty lines are kept
            else:
                gap = k - prev - 1
                if folded and content[prev][0] not in _SEP and text[0] not in _SEP:
                    out.append("\n" * gap or " ")
                else:
                    out.append("\n" * (gap + 1))
            out.append(text)
            prev = k
        if chomp == "-":
            return "".join(out)
        last = start - 1 if prev is None else start + prev    # the last text line (or the header)
        if prev is not None and self.has_break(last):
            out.append("\n")
        if chomp == "+":                   # keep the trailing empty lines too
            out += ["\n" for r in range(last + 1, start + len(content)) if self.has_break(r)]
        return "".join(out)
