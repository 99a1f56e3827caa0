"""Tests for recall.chunk: sections, breadcrumbs, fences, front matter, size limits, line ranges."""
from __future__ import annotations

import random
import textwrap

import pytest

from recall.notes.chunk import Chunk, Document, chunk_markdown, chunk_text


def md(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def file_lines(text: str) -> list:
    """The file's lines as an editor numbers them (line 1 is index 0)."""
    lines = text.lstrip("\ufeff").replace("\r\n", "\n").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def body_start(text: str) -> int:
    """0-based index of the first line after the front matter (0 when there is none)."""
    lines = file_lines(text)
    if lines and lines[0].rstrip() == "---":
        for i in range(1, len(lines)):
            if lines[i].rstrip() in ("---", "..."):
                return i + 1
    return 0


def assert_exact_ranges(text: str, doc: Document) -> None:
    """Every chunk's text is exactly its line range in the file; chunks are in order, disjoint."""
    lines = file_lines(text)
    previous_end = 0
    for c in doc.chunks:
        assert 1 <= c.start_line <= c.end_line <= len(lines), c
        if c.start_line == c.end_line and c.text != lines[c.start_line - 1]:
            assert c.text in lines[c.start_line - 1], c  # a piece of a hard-split long line
        else:
            assert "\n".join(lines[c.start_line - 1:c.end_line]) == c.text, c
            assert c.start_line > previous_end, "chunks overlap"
        previous_end = c.end_line


def assert_covered_once(text: str, doc: Document) -> None:
    """Every non-blank line after the front matter is in exactly one chunk; none before it."""
    lines = file_lines(text)
    seen, hard_split = [0] * len(lines), set()
    for c in doc.chunks:
        if c.start_line == c.end_line and c.text != lines[c.start_line - 1]:
            hard_split.add(c.start_line - 1)  # one long line cut into several chunks
            continue
        for i in range(c.start_line - 1, c.end_line):
            seen[i] += 1
    for i in hard_split:
        seen[i] += 1
    start = body_start(text)
    for i, line in enumerate(lines):
        if i < start:
            assert seen[i] == 0, f"front matter line {i + 1} is in a chunk"
        elif line.strip():
            assert seen[i] == 1, f"line {i + 1} {line!r} is in {seen[i]} chunks"
        else:
            assert seen[i] <= 1


def check(text: str, **kwargs) -> Document:
    doc = chunk_markdown(text, **kwargs)
    assert_exact_ranges(text, doc)
    assert_covered_once(text, doc)
    return doc


def crumbs(doc: Document) -> list:
    return [c.breadcrumb for c in doc.chunks]


# --- breadcrumbs and headings ----------------------------------------------------------------

NESTED = md("""
    # Database upgrade 2025

    Why we upgrade.

    ## Prep

    Take a backup.

    ### Checks

    Run the checks.

    ## Rollback

    Restore the backup.

    # Appendix

    Links.
    """)


def test_nested_headings_give_the_heading_path():
    doc = check(NESTED, min_chars=0)
    assert crumbs(doc) == [
        "Database upgrade 2025",
        "Database upgrade 2025 › Prep",
        "Database upgrade 2025 › Prep › Checks",
        "Database upgrade 2025 › Rollback",
        "Appendix",
    ]
    assert doc.meta == {"title": "Database upgrade 2025"}  # no front matter: the first H1
    assert doc.chunks[3].text == "## Rollback\n\nRestore the backup."
    assert (doc.chunks[3].start_line, doc.chunks[3].end_line) == (13, 15)


def test_atx_variants_closing_hashes_indent_and_non_headings():
    text = md("""
        #   Title   ##
        a
           ## Indented up to three ##
        b
            #### four spaces is code, not a heading
        #no-space is a tag, not a heading
        ####### seven is too many
        ### C# tips
        c
        """)
    doc = check(text, min_chars=0)
    assert crumbs(doc) == ["Title", "Title › Indented up to three",
                           "Title › Indented up to three › C# tips"]


def test_skipped_levels_and_a_shallower_heading_pop_the_path():
    text = "# A\na\n### C\nc\n## B\nb\n"
    assert crumbs(check(text, min_chars=0)) == ["A", "A › C", "A › B"]


def test_front_matter_title_prefixes_when_the_first_heading_is_not_it():
    text = md("""
        ---
        title: Database upgrade 2025
        ---
        Intro line.

        ## Rollback

        Restore.
        """)
    doc = check(text, min_chars=0)
    assert crumbs(doc) == ["Database upgrade 2025", "Database upgrade 2025 › Rollback"]
    assert doc.chunks[0].start_line == 4  # front matter lines are counted


def test_title_not_repeated_when_the_first_h1_names_it():
    text = "---\ntitle: Database Upgrade 2025\n---\n# Database upgrade 2025\nx\n## Rollback\ny\n"
    assert crumbs(check(text, min_chars=0)) == ["Database upgrade 2025",
                                                "Database upgrade 2025 › Rollback"]
    # an H1 that starts the same words as a longer title names the same document
    text = "---\ntitle: 'INC-1 — failover (pg-03)'\n---\n# INC-1 — Failover\nx\n## Timeline\ny\n"
    assert crumbs(check(text, min_chars=0)) == ["INC-1 — Failover", "INC-1 — Failover › Timeline"]


def test_title_from_a_later_h1_is_prefixed_but_not_doubled():
    text = "## Intro\nx\n# Real title\ny\n## Part\nz\n"
    doc = check(text, min_chars=0)
    assert doc.meta["title"] == "Real title"
    assert crumbs(doc) == ["Real title › Intro", "Real title", "Real title › Part"]


def test_setext_headings():
    text = md("""
        Main title
        ==========

        Intro.

        Sub part
        --------

        Body of the sub part.

        Another paragraph.

        ---

        After a thematic break: still the sub part.
        - a list item
        ---
        > a quote
        ---
        """)
    doc = check(text, min_chars=0)
    assert crumbs(doc) == ["Main title", "Main title › Sub part"]
    assert doc.chunks[1].start_line == 6
    assert doc.chunks[1].text.startswith("Sub part\n--------\n")
    assert doc.chunks[1].end_line == len(file_lines(text))


def test_setext_underline_right_after_a_heading_is_a_rule():
    text = "# A\n---\ntext\n"
    doc = check(text, min_chars=0)
    assert crumbs(doc) == ["A"]


def test_heading_only_document():
    doc = check("# Lonely heading\n")
    assert [(c.breadcrumb, c.start_line, c.end_line, c.text) for c in doc.chunks] == [
        ("Lonely heading", 1, 1, "# Lonely heading")]


# --- fences ---------------------------------------------------------------------------------

def test_hash_lines_inside_fences_are_not_headings():
    text = md("""
        # Runbook

        ```bash
        # not a heading
        ## nor this
        ```

        ~~~
        # still code
        ```
        # a ``` line does not close a ~~~ fence
        ~~~

        ````markdown
        ```
        # nested example
        ```
        ````

        ## Real heading
        text
        """)
    doc = check(text, min_chars=0)
    assert crumbs(doc) == ["Runbook", "Runbook › Real heading"]
    assert "# nested example\n```\n````" in doc.chunks[0].text


def test_a_shorter_closing_fence_does_not_close():
    text = "# A\n````\n```\n# code\n````\n## B\nb\n"
    assert crumbs(check(text, min_chars=0)) == ["A", "A › B"]


def test_backticks_in_the_info_string_are_not_a_fence():
    text = "# A\n```inline``` code\n## B\nb\n"
    assert crumbs(check(text, min_chars=0)) == ["A", "A › B"]


def test_indented_fence_in_a_list_step():
    text = "# Steps\n1. run:\n    ```\n# inside\n    ```\n## Next\nx\n"
    assert crumbs(check(text, min_chars=0)) == ["Steps", "Steps › Next"]


def test_unclosed_fence_runs_to_the_end_of_the_file():
    text = "# A\nintro\n```\n# code\n## not a heading either\n\n\nmore code\n"
    doc = check(text, min_chars=0, max_chars=20)
    assert crumbs(doc) == ["A", "A"]
    assert doc.chunks[-1].text == "```\n# code\n## not a heading either\n\n\nmore code"
    assert doc.chunks[-1].end_line == 8


# --- front matter ---------------------------------------------------------------------------

def test_front_matter_title_date_tags():
    text = md("""
        ---
        title: "Postgres: failover"   
        date: 2024-02-05
        tags: [postgres, "db, ops", 'runbook']
        author:
          name: me
        ---
        # Body
        text
        """)
    doc = check(text)
    assert doc.meta == {"title": "Postgres: failover", "date": "2024-02-05",
                        "tags": ["postgres", "db, ops", "runbook"]}
    assert doc.chunks[0].start_line == 8


@pytest.mark.parametrize("fm, meta", [
    ("tags:\n  - a\n  - '#b'\n- c", {"tags": ["a", "b", "c"]}),
    ("tags: a, b", {"tags": ["a", "b"]}),
    ("tags: a b", {"tags": ["a", "b"]}),
    ("tags: [a,\n  b]", {"tags": ["a", "b"]}),
    ("Title: Upper-case key # a comment", {"title": "Upper-case key"}),
    ("title: 'It''s fine'", {"title": "It's fine"}),
    ("title: >\n  folded\n  title", {"title": "folded title"}),
    ("date: 2024-2-5T10:00:00Z", {"date": "2024-02-05"}),
    ("date: '2024/12/31'", {"date": "2024-12-31"}),
    ("date: 2024-02-30", {}),
    ("date: yesterday", {}),
    ("date: [2024-01-01]", {}),
    ("title: [not, a, string]", {}),
    ("title:", {}),
    ("", {}),
])
def test_front_matter_forms(fm, meta):
    text = f"---\n{fm}\n---\nbody\n"
    assert chunk_markdown(text).meta == meta


@pytest.mark.parametrize("fm", [
    "title: ok\n: no key\n  - stray item\n[broken\ntags: [unclosed, list\n\t- tab item",
    "title: \"unterminated\ndate: 2024-13-45\ntags:\n  -\n  - ''",
    "- a list at top\n- another\ntitle",
    "tags: {a: b}\nkey: value: more: colons\n'quoted key': x\n...more",
    ":\n::\n- \n#\n  # comment\n\x00\ufeff",
])
def test_malformed_front_matter_never_raises(fm):
    text = f"---\n{fm}\n---\n# Body\ntext\n"
    doc = check(text)
    assert isinstance(doc.meta, dict)
    assert all(isinstance(t, str) for t in doc.meta.get("tags", []))
    assert doc.chunks[-1].text == "# Body\ntext"


def test_front_matter_closed_by_dots_and_title_kept_from_it():
    text = "---\ntitle: From front matter\n...\n# Heading\nx\n"
    doc = check(text)
    assert doc.meta == {"title": "From front matter"}


def test_unclosed_front_matter_is_body_text():
    text = "---\ntitle: x\n\nJust a note that starts with a rule.\n"
    doc = check(text)
    assert doc.meta == {}
    assert doc.chunks[0].start_line == 1


def test_front_matter_only_file_has_meta_and_no_chunks():
    doc = check("---\ntitle: T\n---\n\n\n")
    assert doc.meta == {"title": "T"} and doc.chunks == []


# --- tiny sections --------------------------------------------------------------------------

def test_tiny_sections_merge_into_their_parent():
    doc = check(NESTED)  # every section is far below the default min_chars
    assert len(doc.chunks) == 1
    c = doc.chunks[0]
    assert c.breadcrumb == "Database upgrade 2025"
    assert (c.start_line, c.end_line) == (1, len(file_lines(NESTED)))


def test_tiny_section_merges_into_the_previous_big_section_when_it_fits():
    big = "long line of text " * 20
    text = f"# T\n\nIntro.\n\n## Big\n\n{big}\n\n## Tiny\none line\n"
    doc = check(text, min_chars=50)
    assert crumbs(doc) == ["T", "T › Big"]
    assert doc.chunks[1].text.endswith("## Tiny\none line")
    assert (doc.chunks[1].start_line, doc.chunks[1].end_line) == (5, 10)


def test_tiny_section_stays_alone_when_merging_would_exceed_max_chars():
    big = "x" * 90
    text = f"# A\n{big}\n# B\nshort\n"
    doc = check(text, max_chars=100, min_chars=50)
    assert crumbs(doc) == ["A", "B"]


def test_bare_heading_goes_forward_into_its_first_subsection():
    body = "text " * 60
    text = f"# T\n\n## Prep\n\n{body}\n\n## Options\n\n### A\n\n{body}\n\n### B\n\n{body}\n"
    doc = check(text)
    # a bare heading merged backwards would dangle at the end of an unrelated section
    assert crumbs(doc) == ["T › Prep", "T › Options › A", "T › Options › B"]
    assert doc.chunks[0].text.startswith("# T\n\n## Prep\n")
    assert doc.chunks[1].text.startswith("## Options\n\n### A\n")


def test_empty_section_with_nothing_to_merge_into_still_is_a_chunk():
    doc = check("# A\n" + "x" * 95 + "\n# Empty\n\n", max_chars=100, min_chars=50)
    assert [(c.breadcrumb, c.text) for c in doc.chunks][1:] == [("Empty", "# Empty")]
    doc = check("# Only\n\n\n## Child\n")
    assert [(c.breadcrumb, c.text) for c in doc.chunks] == [
        ("Only › Child", "# Only\n\n\n## Child")]


# --- huge sections --------------------------------------------------------------------------

def paragraph(n: int, word: str = "word") -> str:
    return " ".join([word] * n)


def test_huge_section_splits_at_blank_lines_and_repeats_the_breadcrumb():
    paras = [paragraph(30, f"p{i}") for i in range(10)]  # ~90-100 chars each
    text = "# Top\nIntro.\n## Huge\n\n" + "\n\n".join(paras) + "\n"
    doc = check(text, max_chars=250, min_chars=0)
    pieces = [c for c in doc.chunks if c.breadcrumb == "Top › Huge"]
    assert len(pieces) > 3
    assert all(len(c.text) <= 250 for c in pieces)
    assert pieces[0].text.startswith("## Huge")
    for c in pieces:  # no piece starts or ends inside a paragraph
        assert not c.text.startswith("\n") and not c.text.endswith("\n")
        assert all(len(p.split()) == 30 for p in c.text.split("\n\n") if not p.startswith("#"))


def test_a_fence_is_never_split_even_when_over_max_chars():
    fence = "```\n" + "\n\n".join(f"# line {i} " + "x" * 40 for i in range(20)) + "\n```"
    text = f"# A\n\nintro\n\n{fence}\n\nafter\n"
    doc = check(text, max_chars=200, min_chars=0)
    holding = [c for c in doc.chunks if "```" in c.text]
    assert len(holding) == 1 and fence in holding[0].text
    assert holding[0].text == fence
    assert crumbs(doc) == ["A"] * len(doc.chunks)


def test_a_fence_smaller_than_max_chars_is_kept_in_one_piece():
    fence = "~~~\n" + "\n\n".join("code " * 5 for _ in range(4)) + "\n~~~"
    text = "# A\n\n" + paragraph(20) + "\n\n" + fence + "\n\n" + paragraph(20) + "\n"
    doc = check(text, max_chars=len(fence) + 20, min_chars=0)
    assert any(fence in c.text for c in doc.chunks)


def test_a_paragraph_over_max_chars_splits_between_lines_and_a_long_line_hard():
    lines = [paragraph(10, f"l{i}") for i in range(10)]
    text = "# A\n" + "\n".join(lines) + "\n" + "y" * 250 + "\n"
    doc = chunk_markdown(text, max_chars=100, min_chars=0)
    assert_exact_ranges(text, doc)
    assert all(len(c.text) <= 100 for c in doc.chunks)
    hard = [c for c in doc.chunks if c.start_line == c.end_line == 12]
    assert "".join(c.text for c in hard) == "y" * 250


# --- line endings, empty input, whole-file invariants ---------------------------------------

def test_crlf_input_gives_the_same_chunks_as_lf():
    crlf = NESTED.replace("\n", "\r\n")
    assert chunk_markdown(crlf, min_chars=0) == chunk_markdown(NESTED, min_chars=0)
    doc = check(crlf, min_chars=0)
    assert all("\r" not in c.text for c in doc.chunks)
    fm = "---\r\ntitle: T\r\ntags: [a]\r\n---\r\n# T\r\nx\r\n"
    assert chunk_markdown(fm).meta == {"title": "T", "tags": ["a"]}


def test_no_trailing_newline_and_a_bom():
    doc = check("\ufeff# A\ntext")
    assert doc.chunks == [Chunk("A", 1, 2, "# A\ntext")]


@pytest.mark.parametrize("text", ["", "\n", "\n\n  \n", "\r\n"])
def test_empty_file(text):
    assert chunk_markdown(text) == Document({}, [])


def test_file_without_headings_is_one_chunk_with_the_title_or_nothing():
    text = "\n\nSome notes.\n\nMore notes.\n\n"
    doc = check(text)
    assert doc.chunks == [Chunk("", 3, 5, "Some notes.\n\nMore notes.")]
    doc = check("---\ntitle: Scratch\n---\n" + text)
    assert crumbs(doc) == ["Scratch"]
    assert (doc.chunks[0].start_line, doc.chunks[0].end_line) == (6, 8)


def test_bad_max_chars_is_a_bug_not_a_user_error():
    with pytest.raises(ValueError):
        chunk_markdown("x", max_chars=0)


PIECES = [
    "# H1", "## H2", "### H3", "#### H4", "Setext", "======", "-----", "---", "", "", "",
    "```", "~~~", "````", "```python", "# comment", "plain text line", "- item", "> quote",
    "    indented", "a much longer line of prose " * 6, "x" * 130, "title: t", "...", "\t# tab",
]


@pytest.mark.parametrize("seed", range(40))
def test_random_documents_keep_every_invariant(seed):
    rng = random.Random(seed)
    lines = [rng.choice(PIECES) for _ in range(rng.randint(0, 80))]
    if rng.random() < 0.3:
        lines = ["---", "title: T", "tags: [a]", "---"] + lines
    text = ("\r\n" if seed % 3 == 0 else "\n").join(lines) + rng.choice(["", "\n"])
    max_chars = rng.choice([40, 120, 500, 2000])
    doc = chunk_markdown(text, max_chars=max_chars, min_chars=rng.choice([0, 30, 200]))
    assert_exact_ranges(text, doc)
    assert_covered_once(text, doc)
    for c in doc.chunks:
        assert c.text.strip(), "empty chunk"
        assert len(c.text) <= max_chars or "```" in c.text or "~~~" in c.text


# --- chunk_text -----------------------------------------------------------------------------

def test_chunk_text_blocks_split_at_blank_lines():
    blocks = [f"block {i}\n" + "line\n" * 5 for i in range(6)]  # 32 chars each
    text = "\n".join(blocks)
    doc = chunk_text(text, "src/app.py", max_chars=90)  # two blocks fit, three don't
    assert doc.meta == {}
    assert all(c.breadcrumb == "src/app.py" for c in doc.chunks)
    assert all(len(c.text) <= 90 for c in doc.chunks)
    assert [c.text.count("block") for c in doc.chunks] == [2, 2, 2]
    assert_exact_ranges(text, doc)
    assert_covered_once(text, doc)


def test_chunk_text_ignores_markdown_syntax_and_handles_crlf():
    text = "# not a heading\r\n```\r\n\r\nbody\r\n"
    doc = chunk_text(text, "notes.txt", max_chars=20)
    assert [(c.start_line, c.end_line, c.text) for c in doc.chunks] == [
        (1, 2, "# not a heading\n```"), (4, 4, "body")]


def test_chunk_text_splits_a_single_long_line_hard():
    text = "short\n" + "z" * 250 + "\nend\n"
    doc = chunk_text(text, "data.csv", max_chars=100)
    assert [(c.start_line, c.end_line, len(c.text)) for c in doc.chunks] == [
        (1, 1, 5), (2, 2, 100), (2, 2, 100), (2, 2, 50), (3, 3, 3)]
    assert "".join(c.text for c in doc.chunks[1:4]) == "z" * 250


@pytest.mark.parametrize("text", ["", "\n\n", "  \r\n"])
def test_chunk_text_empty(text):
    assert chunk_text(text, "empty.txt") == Document({}, [])


# --- markdown by content: template suffixes, template tags, the note's own date ----------------

@pytest.mark.parametrize("name, expected", [
    ("runbook.md", True), ("a/b/page.html.md.erb", True), ("notes.markdown", True), ("doc.mdx", True),
    ("old.MKD", True), ("post.md.liquid", True), ("script.erb", False), ("readme.txt", False),
    ("config.yaml", False), ("page.html.erb", False)])
def test_markdown_is_known_by_its_suffix_also_under_a_template_suffix(name, expected):
    from recall.notes.chunk import is_markdown
    assert is_markdown(name) is expected


def test_an_erb_or_liquid_heading_takes_the_title_and_keeps_the_structure():
    text = md("""
        ---
        title: Delete a state lock
        ---
        # <%= current_page.data.title %>

        When terraform says the state is locked by someone else.

        <%= warning_text('Only do this when nobody else is applying') %>
        ---

        ## {{ page.section }} Find the lock id

        Read the id from the error message.

        ## Remove it

        Run the force-unlock command.
        """)
    doc = chunk_markdown(text, min_chars=0)
    crumbs = [c.breadcrumb for c in doc.chunks]
    assert crumbs == ["Delete a state lock", "Delete a state lock › Find the lock id",
                      "Delete a state lock › Remove it"]
    assert all("<%" not in c and "{{" not in c for c in crumbs)
    assert_exact_ranges(text, doc)


def test_a_date_line_is_the_notes_date_when_front_matter_has_none():
    assert chunk_markdown("# Outage\n\n**Date:** 28/03/2018\n\nThe site was down.\n").meta["date"] == "2018-03-28"
    assert chunk_markdown("# Outage\n\nDate: 2024-11-11\n").meta["date"] == "2024-11-11"
    assert chunk_markdown("# Outage\n\nDate: 5 April 2023\n").meta["date"] == "2023-04-05"
    fm = "---\ndate: 2020-01-02\n---\n# Outage\n\nDate: 2024-11-11\n"
    assert chunk_markdown(fm).meta["date"] == "2020-01-02"          # front matter first
    assert "date" not in chunk_markdown("# Outage\n\nDate: soon, we hope\n").meta
    assert "date" not in chunk_markdown("# Outage\n\nDate: 31/02/2020\n").meta


@pytest.mark.parametrize("text, expected", [
    ("2024-03-04", "2024-03-04"), ("28/03/2018", "2018-03-28"), ("04/28/2018", "2018-04-28"),
    ("5 April 2023", "2023-04-05"), ("April 5th, 2023", "2023-04-05"), ("31/02/2020", ""),
    ("next week", ""), ("13/13/2020", "")])
def test_parse_date_reads_the_usual_forms(text, expected):
    from recall.notes.chunk import parse_date
    assert parse_date(text) == expected


# the forms incident templates write (issue 26 point 5): each is the note's date
INCIDENT_DATES = {
    "sentence": "# INC-4242 outage\n\nDate: 2025-06-02. Severity: SEV2\n\nThe API was down.\n",
    "bold": "# INC-4242 outage\n\n**Date:** 2 June 2025\n\nThe API was down.\n",
    "table row": "# INC-4242 outage\n\n| Field | Value |\n|---|---|\n| Severity | SEV2 |\n"
                 "| **Date** | 2025-06-02 |\n\nThe API was down.\n",
    "table column": "# INC-4242 outage\n\n| Severity | Date | Owner |\n|---|---|---|\n"
                    "| SEV2 | 02/06/2025 | ana |\n\nThe API was down.\n",
    "front matter": "---\ntitle: INC-4242 outage\ndate: 2 June 2025\n---\n# INC-4242 outage\n\nThe API was down.\n",
}


@pytest.mark.parametrize("form", sorted(INCIDENT_DATES))
def test_incident_template_dates_are_the_notes_date(form):
    assert chunk_markdown(INCIDENT_DATES[form]).meta["date"] == "2025-06-02"


def test_a_table_without_a_date_column_gives_no_date():
    text = "# Hosts\n\n| Host | Port |\n|---|---|\n| db01 | 5432 |\n| 2025-06-02 | 1 |\n"
    assert "date" not in chunk_markdown(text).meta
    assert "date" not in chunk_markdown("# X\n\nDate: 2025-06-021\n").meta
