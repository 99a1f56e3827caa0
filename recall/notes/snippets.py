"""What in a hit's text is a query term: highlight spans, the snippet window, the section it points at."""
from __future__ import annotations

import functools
import re

from . import terms
from .query import Query, parse_query

READ_AT_MOST = 64 * 2**20    # a note re-read to point a hit at its section; past this, the chunk as stored
_TEXT_TOKEN = re.compile(r"[^\W_](?:[\w.\-]*\w)?")     # a word, or an identifier with its inner . - _
_EMPHASIS = re.compile(r"\*\*|(?<!\w)__|__(?!\w)")
_HEADING_MARK = re.compile(r"(?m)^ {0,3}#{1,6}[ \t]+")       # the breadcrumb already names the heading
_INNER_HEADING = re.compile(r"\n {0,3}(?:#{1,6}(?:[ \t]|$)|(?:=+|-+)[ \t]*(?:\n|$))")
_ATX_LINE = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")
_SETEXT_LINE = re.compile(r" {0,3}(?:=+|-+)[ \t]*$")


class QueryTerms:
    """What in a text counts as a query term: an identifier exactly (or a host name by its dotted
    prefix), a plain word by its stem — so the highlight follows the porter-stemmed index."""

    def __init__(self, q: Query):
        self.exact = set(q.identifiers)
        self.stems = {terms.stem(w) for w in q.words if w not in terms.STOPWORDS and (len(w) > 1 or w.isdigit())}
        # every token that is a term starts with one of these (a stem is a prefix of its word; an
        # identifier, of itself and of a host name under it; a compound, with its first word)
        self.starts = tuple(self.exact | self.stems)
        self.match = functools.cache(self._match)        # a note repeats its words

    def _match(self, token: str):
        """The query term `token` stands for, or None."""
        low = token.lower()
        if low in self.exact:
            return low
        parts = low.split(".")
        for i in range(len(parts) - 1, 0, -1):
            if ".".join(parts[:i]) in self.exact:
                return ".".join(parts[:i])
        st = terms.stem(low) if low.isalnum() else None
        return st if st in self.stems else None

    def find(self, text: str) -> list:
        """[(start, end, term)] of whole tokens of `text` that are query terms; an identifier
        such as INC-8214 is one token, never cut at its hyphen."""
        out = []
        for m in _TEXT_TOKEN.finditer(text):
            token = m.group(0)
            if not token.lower().startswith(self.starts):
                continue
            term = self.match(token)
            if term is None and ("-" in token or "." in token):
                # a word inside a compound the query names as words: "jump host" in jump-host
                words = [w for w in re.split(r"[.\-]", token) if w]
                if words and all(self.match(w) for w in words):
                    term = token.lower()
            if term is not None:
                out.append((m.start(), m.end(), term))
        return out


def snippet_spans(text: str, query, width: int = 220):
    """(window, [(start, end)]): about `width` characters of `text` around its first query term,
    on one line without emphasis or heading marks, and where the terms are. `query`: its text, the
    parsed Query, or its QueryTerms."""
    flat = " ".join(_EMPHASIS.sub("", _HEADING_MARK.sub("", text)).split())
    if not isinstance(query, QueryTerms):
        query = QueryTerms(query if isinstance(query, Query) else parse_query(query))
    found = query.find(flat)
    start = 0
    if found:
        first = found[0][0]
        start = max(0, first - width // 3)
        if start:
            space = flat.find(" ", start)
            start = space + 1 if 0 <= space < first else start
    window = flat[start:start + width]
    prefix = "…" if start else ""
    spans = [(s - start + len(prefix), e - start + len(prefix)) for s, e, _ in found
             if s >= start and e <= start + len(window)]
    return prefix + window + ("…" if start + width < len(flat) else ""), spans


def mark(text: str, spans: list) -> str:
    """`text` with each span marked **like this** (the terminal view of highlights)."""
    out, at = [], 0
    for s, e in spans:
        out += [text[at:s], "**", text[s:e], "**"]
        at = e
    return "".join(out) + text[at:]


def _count(qt: QueryTerms, text: str) -> int:
    return len({term for _, _, term in qt.find(text)})


def point_at_section(hit, body: str, qt: QueryTerms) -> str:
    """A chunk that merged several small sections is pointed at the one holding the most query
    terms (its line, end line, heading path), whose text is returned for the snippet. The file is
    read again; a file changed since indexing is left be."""
    name = hit.relpath.lower()
    if not _INNER_HEADING.search(body) or not (".md" in name or ".markdown" in name or ".mkd" in name):
        return body
    # a rough cut at heading-like lines decides whether to look closer (chunk.py, the exact parser,
    # is imported only then)
    body_lines = body.split("\n")
    starts = [i for i in range(1, len(body_lines)) if _ATX_LINE.match(body_lines[i])
              or (i + 1 < len(body_lines) and body_lines[i].strip() and _SETEXT_LINE.match(body_lines[i + 1]))]
    if not starts:
        return body
    cuts = [0] + starts + [len(body_lines)]
    counts = [_count(qt, "\n".join(body_lines[a:b])) for a, b in zip(cuts, cuts[1:])]
    if max(counts) <= counts[0]:
        return body                         # the chunk's own first section is the best: as stored
    from .chunk import is_markdown, sections_in
    if not is_markdown(hit.relpath):
        return body
    from .walk import read_note_file
    data, _ = read_note_file(hit.path, READ_AT_MOST)
    if data is None:
        return body                         # no regular file now, or far larger than when indexed
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    held = lines[hit.line - 1:hit.end_line]
    if "\n".join(held).replace("\r", "") != body.replace("\r", ""):
        return body                         # changed on disk since it was indexed
    sections = sections_in(text, hit.line, hit.end_line)
    if len(sections) < 2:
        return body
    # the most distinct terms; the first on a tie
    best = max(sections, key=lambda sec: _count(qt, "\n".join(held[sec[0] - hit.line:sec[1] - hit.line + 1])
                                                + " " + sec[2]))
    start, end = max(best[0], hit.line), min(best[1], hit.end_line)
    hit.line, hit.end_line, hit.breadcrumb = start, end, best[2]
    return "\n".join(lines[start - 1:end])
