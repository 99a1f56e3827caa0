"""Markdown and plain text → bounded chunks with breadcrumbs and exact line ranges."""
from __future__ import annotations

import datetime
import itertools
import re
from dataclasses import dataclass, field

SEPARATOR = " › "

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*))?$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_CONTAINER = re.compile(r"^ {0,3}(?:[-*+](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>)")
# ERB (Middleman, Rails) and Liquid/Jinja (Jekyll, Hugo) tags: not words of a heading
_TEMPLATE_TAG = re.compile(r"<%.*?%>|\{\{.*?\}\}|\{%.*?%\}")
# front matter and dates: compiled on first use (re's cache), as a search imports this for sections_in
_YAML_KEY = r"^([A-Za-z_][\w.-]*)[ \t]*:(.*)$"
_YAML_ITEM = r"^-(?:[ \t]+(.*))?$"
_FLOW_ITEM = r"""\s*("[^"]*"|'[^']*'|[^,]*)\s*(?:,|$)"""
_DATE = r"^(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?![\d/.-]?\d)"
# a `Date:` line near the top of a note (`**Date:** 2024-03-04`, `Date: 28/03/2018`, `date - 5 May 2021`)
_DATE_LINE = r"(?i)^[\W_]*date[\W_]*[:\-][\W_]*(.+?)[\W_]*$"
_DMY = r"^(\d{1,2})[/.\-](\d{1,2})[/.\-](\d{4})\b"
_NAMED = (r"^(?:(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]{3,9})|([A-Za-z]{3,9})\s+(\d{1,2})(?:st|nd|rd|th)?,?)"
          r"\s+(\d{4})\b")
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), start=1)}
MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdx", ".mkd", ".mdown")
# a markdown file run through a template engine keeps its markdown: runbook.html.md.erb
TEMPLATE_SUFFIXES = (".erb", ".liquid", ".njk", ".j2", ".jinja", ".hbs", ".tmpl", ".tpl")


def is_markdown(relpath: str) -> bool:
    """Markdown by name: .md, .markdown, .mdx, .mkd, .mdown, also under a template suffix (.md.erb)."""
    name = relpath.lower()
    stem, _, suffix = name.rpartition(".")
    return (stem if f".{suffix}" in TEMPLATE_SUFFIXES else name).endswith(MARKDOWN_SUFFIXES)


@dataclass
class Chunk:
    breadcrumb: str = ""          # heading path joined with " › "; the title (or "") before any heading
    start_line: int = 0           # 1-based, inclusive, in the original file (front matter counted)
    end_line: int = 0             # 1-based, inclusive
    text: str = ""                # the lines as in the file, joined with "\n"


@dataclass
class Document:
    meta: dict = field(default_factory=dict)      # title (str), date ('YYYY-MM-DD'), tags (list[str])
    chunks: list = field(default_factory=list)    # list[Chunk], in file order, never overlapping


@dataclass
class _Section:
    first: int = 0                # 0-based line indexes, inclusive, trimmed of blank lines
    last: int = 0
    breadcrumb: str = ""
    level: int = 0                # 0 for the text before the first heading
    heading_only: bool = False


def _parse(text: str) -> tuple:
    """(lines, meta with the title of the front matter or the first H1, first body line, headings, fences)."""
    lines = _split_lines(text)
    meta, body = _front_matter(lines)
    headings, fences = _scan(lines, body)
    title = meta.get("title") or next((name for _, level, name, _ in headings if level == 1 and name), "")
    if title:
        meta["title"] = title
    return lines, meta, body, headings, fences


def chunk_markdown(text: str, *, max_chars: int = 2000, min_chars: int = 200) -> Document:
    """Markdown → heading sections: tiny ones merged, huge ones split, fences kept whole."""
    _check_max(max_chars)
    lines, meta, body, headings, fences = _parse(text)
    if "date" not in meta and (found := _date_line(lines, body)):
        meta["date"] = found
    sections = _sections(lines, body, headings, meta.get("title", ""))
    size = _sizer(lines)
    chunks = [Chunk(group.breadcrumb, first + 1, last + 1, piece)
              for group in _merge_tiny(sections, size, max_chars, min_chars)
              for first, last, piece in _split(lines, group.first, group.last, fences, size, max_chars)]
    return Document(meta, chunks)


def sections_in(text: str, first: int, last: int) -> list:
    """[(start line, end line, breadcrumb)] (1-based) of the heading sections that lines
    first..last of a markdown file hold, before any merging: what a hit inside them points at."""
    lines, meta, body, headings, _ = _parse(text)
    return [(sec.first + 1, sec.last + 1, sec.breadcrumb)
            for sec in _sections(lines, body, headings, meta.get("title", ""))
            if sec.first + 1 <= last and sec.last + 1 >= first]


def heading_lines(text: str) -> list:
    """[(1-based line, level)] of every heading outside fences and front matter."""
    return [(at + 1, level) for at, level, _, _ in _parse(text)[3]]


def chunk_text(text: str, path: str, *, max_chars: int = 2000) -> Document:
    """A non-markdown file → blocks of at most max_chars cut at blank lines; breadcrumb = path."""
    _check_max(max_chars)
    lines = _split_lines(text)
    first, last = _trim(lines, 0, len(lines) - 1)
    if first > last:
        return Document({}, [])
    pieces = _split(lines, first, last, {}, _sizer(lines), max_chars)
    return Document({}, [Chunk(path, s + 1, e + 1, piece) for s, e, piece in pieces])


def _check_max(max_chars: int) -> None:
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, not {max_chars}")


def _split_lines(text: str) -> list:
    """Lines without their endings; \\r\\n and \\n both end a line, other characters do not."""
    lines = text.removeprefix("\ufeff").split("\n")
    if lines[-1] == "":  # a final newline ends the last line; it does not start a new one
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _sizer(lines: list):
    """size(first, last) = len of lines[first..last] joined with "\\n", in O(1) via prefix sums."""
    ends = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
    return lambda first, last: ends[last + 1] - ends[first] - 1


def _trim(lines: list, first: int, last: int) -> tuple:
    while first <= last and not lines[first].strip():
        first += 1
    while last >= first and not lines[last].strip():
        last -= 1
    return first, last


# --- front matter ---------------------------------------------------------------------------

def _front_matter(lines: list) -> tuple:
    """(meta, index of the first body line); no closing delimiter means no front matter."""
    if not lines or lines[0].rstrip() != "---":
        return {}, 0
    for end in range(1, len(lines)):
        if lines[end].rstrip() in ("---", "..."):
            return _meta(_read_yamlish(lines[1:end])), end + 1
    return {}, 0


def _read_yamlish(lines: list) -> dict:
    """Top-level `key: value` pairs with their indented or `- item` lines; skips the rest."""
    fields, key = {}, None
    key_line = re.compile(_YAML_KEY).match
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = key_line(line)
        if match:
            key = match.group(1).lower()
            fields[key] = (match.group(2).strip(), [])
        elif key is not None and (line[0] in " \t-"):
            fields[key][1].append(stripped)
        else:
            key = None  # an unreadable line: don't let what follows attach to the previous key
    return fields


def _meta(fields: dict) -> dict:
    meta = {}
    if "title" in fields:
        title = _value(*fields["title"])
        if isinstance(title, str) and title:
            meta["title"] = title
    if "date" in fields:
        date = _value(*fields["date"])
        found = parse_date(date) if isinstance(date, str) else ""
        if found:               # `date: 2025-06-02`, `date: 2 June 2025`; 2025-02-30 is no date
            meta["date"] = found
    if "tags" in fields:
        tags = _value(*fields["tags"])
        if isinstance(tags, str):  # `tags: a, b` or `tags: a b`, as some editors write them
            tags = tags.split(",") if "," in tags else tags.split()
        tags = [t.strip().lstrip("#").strip() for t in tags]
        meta["tags"] = [t for t in tags if t]
    return meta


def _date_line(lines: list, body: int) -> str:
    """The date of a `Date:` line among the first 40 lines of the body, or of a table's `Date` row
    or column (`| Date | 2025-06-02 |`, a `Date` header over its first rows), as YYYY-MM-DD, else ""."""
    date_line = re.compile(_DATE_LINE).match
    column = None               # the index of a table header's Date cell, until the table ends
    for line in lines[body:body + 40]:
        line = line.strip()
        if line.startswith("|"):
            cells = [c.strip(" *_`") for c in line.strip("|").split("|")]
            names = [c.lower() for c in cells]
            found = parse_date(cells[1]) if len(cells) > 1 and names[0] in ("date", "date:") else ""
            if not found and column is None and "date" in names:
                column = names.index("date")
            elif not found and column is not None and column < len(cells):
                found = parse_date(cells[column])
        else:
            column = None
            match = date_line(line)
            found = parse_date(match.group(1)) if match else ""
        if found:
            return found
    return ""


def parse_date(text: str) -> str:
    """'2024-03-04', '28/03/2018' (day first, as written outside the US), '5 April 2023' or
    'April 5, 2023' → 'YYYY-MM-DD'; "" when it is not one of those or not a real date."""
    text = text.strip()
    try:
        match = re.match(_DATE, text + " ")
        if match:
            return datetime.date(*map(int, match.groups())).isoformat()
        match = re.match(_DMY, text)
        if match:
            day, month, year = map(int, match.groups())
            if month > 12 >= day:          # 04/28/2018 can only be month first
                day, month = month, day
            return datetime.date(year, month, day).isoformat()
        match = re.match(_NAMED, text)
        if match:
            day, month = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(3))
            number = _MONTHS.get(month[:3].lower())
            if number:
                return datetime.date(int(match.group(5)), number, int(day)).isoformat()
    except ValueError:                     # 2025-02-30 and friends: not a date
        pass
    return ""


def _value(value: str, more: list):
    """A scalar (str) or a list (list[str]) from a key's value and its continuation lines."""
    item_line = re.compile(_YAML_ITEM).match
    items = [item_line(m) for m in more]
    if not value and items and items[0]:  # a block list; lines that aren't `- item` are skipped
        return [_scalar(item.group(1) or "") for item in items if item]
    if value.startswith("["):
        inner = " ".join([value] + more).strip()[1:]
        inner = inner[:inner.rindex("]")] if "]" in inner else inner
        return [_scalar(m.group(1)) for m in re.finditer(_FLOW_ITEM, inner) if m.group(1).strip()]
    if value[:1] in ("|", ">"):  # a block scalar: the indented lines are the value
        return " ".join(more)
    return _scalar(" ".join([value] + more))


def _scalar(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1].replace("''", "'") if raw[0] == "'" else raw[1:-1].replace('\\"', '"')
    return re.sub(r"[ \t]+#.*$", "", raw).strip()  # a trailing YAML comment


# --- markdown structure ---------------------------------------------------------------------

def _scan(lines: list, start: int) -> tuple:
    """Headings as (first line, level, name, line count); fences as {opening line: closing line}."""
    headings, fences = [], {}
    para = None  # the paragraph the previous line belongs to: None, "plain" or "container"
    i = start
    while i < len(lines):
        line = lines[i]
        fence = _FENCE_OPEN.match(line)
        if fence and not (fence.group(1)[0] == "`" and "`" in fence.group(2)):
            fences[i] = _fence_end(lines, i + 1, fence.group(1))
            i, para = fences[i], None
        elif not line.strip():
            para = None
        elif para == "plain" and _SETEXT.match(line):
            # a setext heading owns the paragraph line above its underline
            name = " ".join(_TEMPLATE_TAG.sub(" ", lines[i - 1]).split())
            headings.append((i - 1, 1 if line.strip()[0] == "=" else 2, name, 2))
            para = None
        elif ("<%" in line or "{" in line) and not _TEMPLATE_TAG.sub("", line).strip():
            para = None  # a line of template tags only (`<% end %>`) is no paragraph text
        elif match := _ATX.match(line):
            name = _ATX_CLOSE.sub("", (match.group(2) or "").strip()).strip()
            name = " ".join(_TEMPLATE_TAG.sub(" ", name).split())   # `# <%= page.title %>`: the title
            headings.append((i, len(match.group(1)), name, 1))
            para = None
        elif _THEMATIC.match(line):
            para = None
        elif _CONTAINER.match(line):
            para = "container"  # `- item` + `---` is a list and a rule, never a heading
        elif para is None and line.expandtabs(4).startswith("    "):
            pass  # indented code, not a paragraph
        else:
            para = para or "plain"
        i += 1
    return headings, fences


def _fence_end(lines: list, start: int, opener: str) -> int:
    """The closing line of a fence, or the last line when it never closes."""
    for i in range(start, len(lines)):
        close = _FENCE_CLOSE.match(lines[i])
        # any indent closes: fences nested in list steps are often indented unevenly
        if close and close.group(1)[0] == opener[0] and len(close.group(1)) >= len(opener):
            return i
    return len(lines) - 1


def _sections(lines: list, body: int, headings: list, title: str) -> list:
    """One section per heading (plus the text before the first), trimmed, with its breadcrumb."""
    # "INC-1 — failover" names the same document as "INC-1 — Failover (db3)"
    def same(a: str, b: str) -> bool:
        words_a, words_b = (re.sub(r"[\W_]+", " ", name).casefold().split() for name in (a, b))
        shorter = min(len(words_a), len(words_b))
        return shorter > 0 and words_a[:shorter] == words_b[:shorter]

    prefix = bool(title) and not (headings and headings[0][1] == 1 and same(headings[0][2], title))
    starts = [heading[0] for heading in headings] + [len(lines)]
    sections = []
    first, last = _trim(lines, body, starts[0] - 1)
    if first <= last:
        sections.append(_Section(first, last, title))
    path = []  # (level, name) from the top down to the current heading
    for k, (at, level, name, rows) in enumerate(headings):
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, name))
        names = [n for _, n in path if n]
        if prefix and not (names and same(names[0], title)):
            names.insert(0, title)
        first, last = _trim(lines, at, starts[k + 1] - 1)
        sections.append(_Section(first, last, SEPARATOR.join(names), level,
                                 heading_only=last == first + rows - 1))
    return sections


def _merge_tiny(sections: list, size, max_chars: int, min_chars: int) -> list:
    """Fold sections under min_chars into the group before them while it stays ≤ max_chars; a bare
    heading goes forward into its own subsection, whose breadcrumb names it, not onto a sibling."""
    groups, carried = [], None  # carried: first line of bare headings waiting for a child
    for k, section in enumerate(sections):
        first = section.first if carried is None else carried
        following = sections[k + 1] if k + 1 < len(sections) else None
        if section.heading_only and following and following.level > section.level:
            carried = first
            continue
        carried = None
        previous = groups[-1] if groups else None
        if (previous and size(first, section.last) < min_chars
                and size(previous.first, section.last) <= max_chars):
            previous.last = section.last  # the earlier (parent) breadcrumb names the merged chunk
        else:
            groups.append(_Section(first, section.last, section.breadcrumb))
    return groups


# --- size limits ----------------------------------------------------------------------------

def _split(lines: list, first: int, last: int, fences: dict, size, max_chars: int) -> list:
    """(first, last, text) pieces of at most max_chars: at blank lines, then between lines. A fence
    is never cut; a line over max_chars is, into pieces that share its line number."""
    def units(s: int, e: int):  # fences whole, every other line on its own
        i = s
        while i <= e:
            j = min(fences.get(i, i), e)
            yield i, j
            i = j + 1

    def hard(s: int, e: int) -> list:
        if s != e or s in fences:
            return [(s, e, None)]
        line = lines[s]
        return [(s, s, line[k:k + max_chars]) for k in range(0, len(line), max_chars)]

    def pack(spans, too_big) -> list:
        pieces, current = [], None
        for s, e in spans:
            if size(s, e) > max_chars:
                pieces += ([current] if current else []) + too_big(s, e)
                current = None
            elif current and size(current[0], e) <= max_chars:
                current = (current[0], e, None)
            else:
                pieces += [current] if current else []
                current = (s, e, None)
        return pieces + ([current] if current else [])

    paragraphs, start = [], None
    for s, e in units(first, last):
        if s == e and s not in fences and not lines[s].strip():
            if start is not None:
                paragraphs.append((start, s - 1))
            start = None
        elif start is None:
            start = s
    if start is not None:
        paragraphs.append((start, last))
    pieces = pack(paragraphs, lambda s, e: pack(units(s, e), hard))
    return [(s, e, text if text is not None else "\n".join(lines[s:e + 1]))
            for s, e, text in pieces]
