"""Keyword search: identifiers exactly, words by BM25, hostile queries as text, shaping."""
import pytest

from recall import db
from recall.config import load_config
from recall.db import texts
from recall.errors import RecallError
from recall.notes.fusion import recency_factor, rrf
from recall.notes.index import run_index
from recall.notes.query import Route
from recall.notes.search import SearchHooks, search
from recall.vault import store as vault
from tests.conftest import write_tree


def _index():
    """The config's notes, indexed: (config, connection)."""
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, redactor=vault.redactor)
    return cfg, con


@pytest.fixture
def indexed(config):
    return _index()


def _rels(res):
    return [h.relpath for h in res.hits]


def test_ticket_key_ranks_the_note_about_it_first(indexed):
    cfg, con = indexed
    res = search(con, cfg, "INC-10963")
    assert _rels(res)[0] == "incidents/2023/INC-10963-db-failover.md"
    # the note saying "INC 10963" is found, but below the real one
    assert "meetings/2024-01-15-standup.md" in _rels(res)
    assert str(res.route) == "keyword (identifier)"


def test_lowercase_ticket_key_still_exact(indexed):
    cfg, con = indexed
    assert _rels(search(con, cfg, "inc-10963"))[0].startswith("incidents/")


def test_partial_hostname_finds_full_hostname_not_lookalike(indexed):
    cfg, con = indexed
    res = search(con, cfg, "jump01")
    assert _rels(res) == ["runbooks/jump-hosts.md"]
    res = search(con, cfg, "pg-prod-03")
    assert _rels(res)[0] == "incidents/2023/INC-10963-db-failover.md"


def test_words_rank_by_bm25_and_snippet_marks_terms(indexed):
    cfg, con = indexed
    res = search(con, cfg, "wildcard certificate")
    assert _rels(res)[0] == "projects/cert-rotation.md"
    assert "**wildcard**" in res.hits[0].marked()
    assert "**" not in res.hits[0].snippet        # JSON carries plain text and highlight spans
    got = res.hits[0].public()
    assert [got["snippet"][s:e].lower() for s, e in got["highlights"]][:2] == ["certificate", "wildcard"]


@pytest.mark.parametrize("query", ["wildcard certificate", "INC-10963", "disk filled up on the build server"])
def test_a_search_without_snippets_ranks_the_same_hits(indexed, query):
    """`recall eval` asks for no snippets: its files and their order are what a user's search shows."""
    cfg, con = indexed
    shown, bare = search(con, cfg, query, n=20), search(con, cfg, query, n=20, snippets=False)
    assert [(h.relpath, h.score) for h in bare.hits] == [(h.relpath, h.score) for h in shown.hits]
    assert any(h.snippet for h in shown.hits) and not any(h.snippet or h.highlights for h in bare.hits)


def test_snippet_marks_whole_terms_only():
    from recall.notes.snippets import mark, snippet_spans
    out = mark(*snippet_spans("Incident INC-10963: the incidents of inc 10963 were noisy", "INC-10963"))
    assert "**INC-10963**" in out and "**inc** **10963**" in out
    assert "Incident " in out and "incidents" in out and "**Inc**" not in out


def test_breadcrumb_carries_headings(indexed):
    cfg, con = indexed
    res = search(con, cfg, "fenced until the WAL was archived")
    assert res.hits[0].breadcrumb.endswith("Rollback")
    assert res.hits[0].line > 1


@pytest.mark.parametrize("q", ['"unbalanced', "a*", "-x", "col:on", "NEAR(a b)", "a AND OR NOT",
                               "((", ")", "'", "^", "{x}", "jump01 OR", '"" ""', "*", "\\", "%_"])
def test_fts_syntax_never_reaches_sqlite(indexed, q):
    cfg, con = indexed
    res = search(con, cfg, q)      # no exception: searched as text, by the keyword list
    assert res.route.kind == "keyword" and all(h.relpath.endswith(".md") for h in res.hits)


def test_hostile_query_is_searched_as_text(indexed):
    cfg, con = indexed
    assert _rels(search(con, cfg, 'NEAR("wildcard" certificate'))[0] == "projects/cert-rotation.md"


def test_empty_and_huge_queries_are_clear_errors(indexed):
    cfg, con = indexed
    with pytest.raises(RecallError, match="empty query"):
        search(con, cfg, "   ")
    with pytest.raises(RecallError, match="10,240 characters"):
        search(con, cfg, "x" * 10240)


def test_at_most_two_chunks_per_file(tmp_path, config, notes):
    sections = "".join(f"## Part {i}\n\nkafka broker rebalance details number {i} " + "filler " * 40 + "\n\n"
                       for i in range(6))
    write_tree(notes, {"kafka.md": "# Kafka\n\n" + sections})
    cfg, con = _index()
    res = search(con, cfg, "kafka broker rebalance", n=10)
    assert _rels(res).count("kafka.md") == 2


def test_semantic_without_provider_says_so(indexed):
    cfg, con = indexed
    with pytest.raises(RecallError, match="needs an embedding provider"):
        search(con, cfg, "anything", mode="semantic")


def test_recency_prior_is_small_and_monotonic():
    from datetime import date
    today = date(2026, 1, 1)
    new, old, ancient = (recency_factor(d, today) for d in ("2025-12-31", "2022-01-01", "1990-01-01"))
    assert 1.0 >= new > old > ancient >= 0.95


def _dated(day: str, body: str) -> str:
    return f"---\ndate: {day}\n---\n# Notes\n\n{body}\n"


def test_recency_breaks_a_tie_but_never_outranks_clearly_better_matches(config, notes):
    same = "the haproxy backend drained during the keepalived failover"
    write_tree(notes, {"old.md": _dated("2019-03-01", same), "new.md": _dated("2026-01-10", same),
                       "older-but-better.md": _dated("2018-05-05", "haproxy keepalived failover: " + same),
                       "newest-passing-mention.md": _dated("2026-02-01", "the failover of something else "
                                                           + "unrelated filler words " * 20)})
    cfg, con = _index()
    rels = _rels(search(con, cfg, "haproxy keepalived failover"))
    assert rels.index("older-but-better.md") < rels.index("new.md") < rels.index("old.md")
    assert rels[-1] == "newest-passing-mention.md"


def test_recency_never_lifts_a_note_over_one_naming_the_identifier():
    from recall.notes.fusion import final_score
    assert final_score(1, 0.01, 0.95) > final_score(0, 1e9, 1.0)
    assert final_score(0, 10.0, 0.95) > final_score(0, 9.0, 1.0)     # 10% more relevant wins
    assert final_score(0, 10.0, 0.95) < final_score(0, 9.8, 1.0)     # a near-tie goes to the newer


# -- recall read ----------------------------------------------------------------------------------

@pytest.fixture
def long_note(cli, config, notes):
    write_tree(notes, {"long.md": "# Long\n\nshort line\n" + "x" * 50_000 + "\nafter\n"})
    assert cli("index")[0] == 0
    return cli


def test_read_cuts_a_long_line_at_max_chars_and_says_how_to_see_it(long_note):
    code, out, err = long_note("read", "long.md", "--offset", "3", "--max-chars", "500")
    assert code == 0, err
    head, body, more = out.splitlines()
    assert head == "notes:long.md lines 4-4 of 5"
    assert len(body) + 1 <= 500 and body.startswith("4│ xxx")
    assert body.endswith("… [line 4 cut: 415 of 50000 characters shown; --max-chars 50004 shows it whole]")
    assert more == "… more: recall read long.md --offset 4"          # moves on: never the same page twice
    code, out, _ = long_note("read", "long.md", "--offset", "3", "--max-chars", "50004")
    assert out.splitlines()[1] == "4│ " + "x" * 50_000
    code, out, _ = long_note("read", "long.md", "--offset", "4", "--max-chars", "500")
    assert out.splitlines()[1:] == ["5│ after"]


def test_read_stops_before_a_long_line_that_does_not_fit_whole(long_note):
    code, out, _ = long_note("read", "long.md", "--offset", "2", "--max-chars", "500")
    assert out.splitlines() == ["notes:long.md lines 3-3 of 5", "3│ short line",
                                "… more: recall read long.md --offset 3"]


def test_read_offset_past_the_end_is_an_error_naming_the_line_count(long_note):
    code, out, err = long_note("read", "long.md", "--offset", "999999")
    assert code == 1 and out == ""
    assert err.startswith("recall: long.md has 5 lines; --offset 999999 is past its end")
    assert "below 5" in err
    code, out, err = long_note("read", "long.md:1", "--offset", "5")
    assert code == 1 and "the section at long.md:1 has 5 lines (1-5)" in err
    assert long_note("read", "long.md", "--offset", "4")[0] == 0      # the last line is still readable


def test_rrf_fuses_ranks():
    fused = rrf({"a": [1, 2, 3], "b": [3, 1]})
    order = sorted(fused, key=lambda c: -fused[c][0])
    assert order[0] == 1 and fused[3][1] == {"a": 3, "b": 1}


# --- words match their forms; markdown by content; identifiers in file names and messages -------

def test_words_match_their_forms_and_identifiers_stay_exact(tmp_path, config, notes):
    write_tree(notes, {
        "incidents/cert-outage.md": """\
            # Expired certificates on the ingress

            ## How we fixed it

            We rotated the certificates by hand and fixed the renewal job.
            """,
        "misc/inc.md": "# Tickets\n\nSee INC 8214 and the fixing guide.\n",
        "misc/inc-exact.md": "# Ticket\n\nINC-8214 was the cert outage.\n",
    })
    cfg, con = _index()
    hit = search(con, cfg, "how did we fix the certificate rotation", mode="keyword").hits[0]
    assert (hit.relpath, hit.breadcrumb.split(" › ")[-1]) == ("incidents/cert-outage.md", "How we fixed it")
    assert _rels(search(con, cfg, "INC-8214"))[0] == "misc/inc-exact.md"


def test_template_markdown_is_chunked_by_its_headings(tmp_path, config, notes):
    write_tree(notes, {"source/state-lock.html.md.erb": """\
        ---
        title: Delete a terraform state lock
        ---
        # <%= current_page.data.title %>

        Intro text about locks that are left behind by a cancelled pipeline run.

        ## Find the lock id

        The ConditionalCheckFailedException message names the lock id.
        """})
    cfg, con = _index()
    hit = search(con, cfg, "ConditionalCheckFailedException").hits[0]
    assert hit.relpath == "source/state-lock.html.md.erb"
    assert hit.breadcrumb == "Delete a terraform state lock › Find the lock id"


def test_an_identifier_only_in_the_file_name_finds_the_file(tmp_path, config, notes):
    write_tree(notes, {"alerts/RouterErrorRatioTooHigh.html.md": "# Router errors\n\nCheck the 5xx rate.\n",
                       "alerts/other.md": "# Router\n\nThe router error ratio is too high sometimes.\n"})
    cfg, con = _index()
    assert _rels(search(con, cfg, "RouterErrorRatioTooHigh"))[0] == "alerts/RouterErrorRatioTooHigh.html.md"


def test_a_pasted_message_ranks_the_note_holding_it_word_for_word_first(tmp_path, config, notes):
    write_tree(notes, {
        "tips.md": "# Tips\n\nx509 certificates: an unknown authority signed by whom? x509 x509 certificate "
                   "signed unknown authority x509.\n",
        "incidents/ingress.md": "# Ingress rules\n\nThe webhook failed: x509: certificate signed by unknown "
                                "authority, so no new rules could be made.\n"})
    cfg, con = _index()
    res = search(con, cfg, "x509: certificate signed by unknown authority", mode="keyword")
    assert _rels(res)[0] == "incidents/ingress.md"


def test_a_highlight_never_splits_an_identifier_and_markdown_markers_are_gone():
    from recall.notes.snippets import mark, snippet_spans
    out = mark(*snippet_spans("See INC-8214 (the **cert** outage) and inc 8214 on jump01.example.com", "INC jump01 cert"))
    assert "**INC**-8214" not in out and "INC-8214" in out and "**inc**" in out
    assert "**jump01.example.com**" in out and "**cert**" in out
    text, spans = snippet_spans("## How we fixed it\n\nWe **fixed** it by rotating certificates",
                                "fix rotation certificate")
    assert "*" not in text and "#" not in text and text.startswith("How we fixed it We fixed")
    assert [text[s:e] for s, e in spans] == ["fixed", "fixed", "rotating", "certificates"]


def test_a_hit_in_a_short_note_points_at_its_own_section(tmp_path, config, notes):
    write_tree(notes, {"runbooks/short.md": """        # Disk replacement

        ## Before you start

        Drain the node and tell the channel.

        ## After

        Check the RAID rebuild finished and undrain.
        """, "incidents/2024-02-03-outage.md": "# Outage\n\nDate: 5 March 2019\n\nThe RAID was slow.\n",
        "meetings/notes.md": "# Notes\n\n**Date:** 28/03/2018\n\nRAID talk.\n"})
    cfg, con = _index()
    assert con.execute("SELECT count(*) FROM chunks c JOIN files f ON f.id = c.file_id "
                       "WHERE f.relpath='runbooks/short.md'").fetchone()[0] == 1
    hits = {h.relpath: h for h in search(con, cfg, "raid rebuild undrain", mode="keyword").hits}
    hit = hits["runbooks/short.md"]
    assert hit.breadcrumb == "Disk replacement › After" and hit.line == 7
    assert hit.public()["read"] == "notes:runbooks/short.md:7"
    assert "RAID" in hit.snippet and "Drain the node" not in hit.snippet
    # the note's own date: a Date: line before the date in the file name, the file name before mtime
    assert hits["incidents/2024-02-03-outage.md"].date == "2019-03-05"
    assert hits["meetings/notes.md"].date == "2018-03-28"


def test_a_pasted_camel_case_name_takes_the_identifier_route(indexed):
    from recall.notes import terms
    cfg, con = indexed
    assert terms.is_identifier("ErrorsInExternalDNS") and terms.is_identifier("NoVPCAttachmentTraffic")
    assert not terms.is_identifier("GitHub") and not terms.is_identifier("DNS")
    assert search(con, cfg, "EmergencyQuarantine").route == Route("keyword", "identifier")
    assert search(con, cfg, "quarantine the host").route == Route("keyword", "no embedding provider")


def test_an_identifier_inside_a_question_is_one_signal_in_the_fusion_not_a_tier_above_it():
    from recall.notes.fusion import fuse
    kw = [(1, 9.0, {"exact_identifiers": 0}), (2, 5.0, {"exact_identifiers": 0}), (5, 1.0, {"exact_identifiers": 1})]
    vec = [(2, 0.8), (1, 0.7), (3, 0.6)]
    own = {c: c for c in range(1, 6)}               # each chunk a file of its own
    order = [r.file_id for r in fuse(kw, vec, own)]
    assert order.index(5) > order.index(2) and order.index(5) > order.index(1)     # both lists' first two lead
    assert order.index(5) < order.index(3)          # its identifier still counts: above the vector list's third
    base = [r.file_id for r in fuse([(c, s, {"exact_identifiers": 0}) for c, s, _ in kw], vec, own)]
    assert base.index(5) > base.index(3)


def test_the_file_path_is_searched_and_a_note_answering_in_several_sections_leads(tmp_path, config, notes):
    files = {f"misc/filler{i}.md": f"# Filler {i}\n\nNothing about queues here, note {i}.\n" for i in range(20)}
    files.update({
        "runbooks/restore-etcd.md": "# Getting the cluster store back\n\nTake the snapshot from the bucket.\n",
        "runbooks/kafka-lag.md": "# Kafka consumers\n\n## Why it grows\n\n" + "Partitions fall behind when the lag grows. " * 6
                                 + "\n\n## Fixing it\n\n" + "Add consumers when lag stays high. " * 6
                                 + "\n\n## Watching it\n\n" + "The lag dashboard shows it. " * 6 + "\n",
        "misc/one-mention.md": "# Lag on the bus\n\nSometimes there is lag on the bus, nobody knows why. "
                               "Other words here to pad it.\n"})
    write_tree(notes, files)
    cfg, con = _index()
    assert _rels(search(con, cfg, "restore etcd", mode="keyword"))[0] == "runbooks/restore-etcd.md"
    # each section alone scores about as the one-line mention; together they lead
    assert _rels(search(con, cfg, "lag", mode="keyword"))[:2] == ["runbooks/kafka-lag.md"] * 2


def test_an_index_from_before_the_path_column_is_migrated_and_searchable(tmp_path, config):
    import sqlite3
    path = tmp_path / "old.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE migrations(version INTEGER PRIMARY KEY, applied_at REAL)")
    for version, sql in enumerate(db.MIGRATIONS[:6], start=1):
        for statement in db._statements(sql):
            con.execute(statement)
        con.execute("INSERT INTO migrations VALUES (?, 0)", (version,))
    con.execute("INSERT INTO files(source, relpath, size, mtime_ns, hash) VALUES ('notes', 'runbooks/restore-etcd.md', 1, 1, 'h')")
    con.execute("INSERT INTO chunks(file_id, ord, start_line, end_line, breadcrumb, body, hash) "
                "VALUES (1, 0, 1, 3, 'Getting the store back', 'Take the snapshots.', 'h')")
    con.close()
    new = db.connect(path)
    assert [r[0] for r in new.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'etcd AND snapshot'")] == [1]
    new.execute("DELETE FROM files")
    assert new.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'etcd'").fetchone()[0] == 0


def test_an_index_with_the_common_words_postings_is_migrated_without_them(tmp_path, config):
    """The postings' tables and triggers go (issue 34.4): a chunk written after the migration
    lists itself nowhere, and the search answers from FTS5."""
    import sqlite3
    path = tmp_path / "old.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE migrations(version INTEGER PRIMARY KEY, applied_at REAL)")
    for version, sql in enumerate(db.MIGRATIONS[:8], start=1):
        for statement in db._statements(sql):
            con.execute(statement)
        con.execute("INSERT INTO migrations VALUES (?, 0)", (version,))
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE '%common%'").fetchone()[0] == 5
    con.close()
    new = db.connect(path)
    assert new.execute("SELECT name FROM sqlite_master WHERE name LIKE '%common%'").fetchall() == []
    new.execute("INSERT INTO files(source, relpath, size, mtime_ns, hash) VALUES ('notes', 'a.md', 1, 1, 'h')")
    new.execute("INSERT INTO chunk_rows(file_id, ord, start_line, end_line, hash, texts) VALUES (1, 0, 1, 3, 'h', ?)",
                (texts.pack("Rotation", "certificate rotation", "a.md", ""),))
    assert [r[0] for r in new.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'certificate'")] == [1]


def test_the_keyword_list_is_fts5s_every_word_first_then_any_word(tmp_path, config, notes):
    """Chunks holding every word the notes hold, as bm25() ranks them, when there are enough; too
    few, and the list widens to the chunks holding any of the words."""
    from recall.notes.keyword import BM25, bm25_list
    from recall.notes.query import parse_query
    tree = {f"certs/both-{i}.md": f"# Note {i}\n\ncertificate rotation {'certificate ' * i}\n" for i in range(6)}
    tree.update({f"certs/one-{i}.md": f"# Other {i}\n\ncertificate {'filler ' * i}\n" for i in range(4)})
    write_tree(notes, tree)
    cfg, con = _index()

    def fts(query, op, limit):
        sql = f"SELECT rowid, {BM25} FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY {BM25} LIMIT ?"
        return {cid: -r for cid, r in con.execute(sql, (parse_query(query).fts(op), limit))}
    both = fts("certificate rotation", "AND", 5)
    assert len(both) == 5 and bm25_list(con, parse_query("certificate rotation"), 5) == both
    wide = bm25_list(con, parse_query("certificate rotation"), 9)
    assert wide == fts("certificate rotation", "OR", 9) and len(wide) == 9
    assert bm25_list(con, parse_query("certificate nosuchword"), 9) == fts("certificate", "OR", 9)
    # a word in no note adds to no score: the words the notes hold are asked together first, and
    # the OR (every chunk holding any word scored: the slow query at scale) is not run
    asked = []
    con.set_trace_callback(asked.append)
    assert bm25_list(con, parse_query("certificate rotation nosuchword"), 5) == both
    con.set_trace_callback(None)
    assert not any(" OR " in sql for sql in asked), asked


def test_words_of_an_entry_id_pin_its_access_block(make_world):
    make_world(inventory="- id: jump-host\n  kind: host\n  access:\n    - ssh jump01.example.com\n"
                         "- id: jumphost-lab\n  kind: host\n")
    cfg, con = _index()
    from recall.inventory import pin_access  # the faces pass it in
    for query in ("jump host", "how do I get onto the Jump Host", "jump_host", "jump-host"):
        res = search(con, cfg, query, hooks=SearchHooks(pins=pin_access))
        assert [a["id"] for a in res.access] == ["jump-host"], query
        assert res.hits and res.hits[0].relpath == "runbooks/jump-hosts.md", query
    assert search(con, cfg, "jumping hosts", hooks=SearchHooks(pins=pin_access)).access == []


def test_a_search_does_not_load_the_chunker(config, notes):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO
    cfg = load_config()
    run_index(db.connect(cfg.db_path), cfg, redactor=vault.redactor)
    code = ("import sys; from recall.cli import main; main(['search', 'promoted the WAL primary']); "
            "print('loaded:', 'recall.notes.chunk' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=dict(os.environ), capture_output=True,
                         text=True, timeout=60)
    assert "INC-10963" in out.stdout and out.stdout.rstrip().endswith("loaded: False"), out.stderr


# Modules a `recall search` has no use for (a keyword search; no vault values, inventory or
# remotes), even when it re-reads a note to point a hit at its section: each one imported costs
# every search its load time (json ~1.2 ms, against ~20 ms for all of recall's own work). The
# query and its route are dataclasses (issue 25: one record style), so dataclasses is loaded.
NOT_FOR_A_SEARCH = ("json", "typing", "subprocess", "hashlib", "threading",
                    "shlex", "tempfile", "email", "http.client", "urllib.request", "ssl",
                    "recall.notes.index", "recall.inventory", "recall.remote", "recall.embed.providers",  # walk: a missing source, SKIP_DIRS
                    "recall.embed.vectors", "recall.vault.secretfile", "recall.vault.mask", "recall.vault.runner", "recall.notes.watch")


def test_a_search_pointing_a_hit_at_its_section_imports_nothing_it_does_not_use(config, notes):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO
    write_tree(notes, {"runbooks/short.md": "# Disk replacement\n\n## Before you start\n\nDrain the node.\n\n"
                                            "## After\n\nCheck the RAID rebuild finished and undrain.\n"})
    cfg = load_config()
    run_index(db.connect(cfg.db_path), cfg, redactor=vault.redactor)
    code = ("import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]); "
            "from recall.cli import main; main(['search', 'raid rebuild undrain']); "
            "print('imported:', *sorted(set(sys.modules) - before))")
    # -S: no site-packages .pth file imports anything first, so the difference is recall's own
    out = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], env=dict(os.environ),
                         capture_output=True, text=True, timeout=60)
    assert "runbooks/short.md:7" in out.stdout, out.stdout + out.stderr    # pointed at "After"
    imported = set(out.stdout.rsplit("imported:", 1)[1].split())
    assert {"recall.notes.chunk", "recall.vault.store", "sqlite3", "argparse"} <= imported     # the path was taken
    assert sorted(imported & set(NOT_FOR_A_SEARCH)) == []
    assert "shutil" not in imported          # argparse's own width lookup (cli._width stands in)


def test_an_index_from_an_older_chunker_is_rewritten_once(tmp_path, config, notes):
    write_tree(notes, {"source/lock.html.md.erb": "# <%= t %>\n\n## Find the lock id\n\nIt is in the message.\n"})
    cfg, con = _index()
    with db.transaction(con):            # as an older recall left it: the page chunked as plain text
        rows = con.execute("SELECT id, file_id, ord, start_line, end_line, hash, body, path, idents FROM chunks").fetchall()
        con.execute("DELETE FROM chunk_rows")
        con.executemany("INSERT INTO chunk_rows VALUES (?,?,?,?,?,?,?)",
                        [(*row[:6], texts.pack("source/lock.html.md.erb", *row[6:])) for row in rows])
        db.set_meta(con, "chunk_format", "1")
    assert run_index(con, cfg, redactor=vault.redactor).chunks > 0
    crumbs = {r[0] for r in con.execute("SELECT breadcrumb FROM chunks")}
    assert "source/lock.html.md.erb" not in crumbs and "Find the lock id" in crumbs
    assert run_index(con, cfg, redactor=vault.redactor).chunks == 0          # once


def test_a_big_rewrite_leaves_the_text_index_merged(tmp_path, config, notes, monkeypatch):
    from recall.notes import index
    monkeypatch.setattr(index, "OPTIMIZE_AFTER", 50)
    write_tree(notes, {f"bulk/n{i}.md": f"# Note {i}\n\n" + "\n\n".join(f"## S{j}\n\n" + "words here " * 30
                                                                       for j in range(3)) for i in range(40)})
    cfg, con = _index()
    run_index(con, cfg, full=True, redactor=vault.redactor)
    pieces = con.execute("SELECT count(*) FROM chunks_fts_data").fetchone()[0]
    con.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
    assert con.execute("SELECT count(*) FROM chunks_fts_data").fetchone()[0] == pieces


# --- what a query's words count for (docs/BENCHMARKS.md, dev set rows 21–26) ----------------------

def test_short_words_that_carry_meaning_count_in_a_query(tmp_path, config, notes):
    write_tree(notes, {"wiki/outage.md": "# Wiki outage\n\nThe wiki came back.\n",
                       "wiki/dumps.md": "# Wiki dumps\n\nTo back up the wiki, the nightly job runs wiki-dump and "
                                        "keeps a week of copies on the NAS.\n"})
    cfg, con = _index()
    # "back up" is not "back": the note saying how to back the wiki up comes first
    assert _rels(search(con, cfg, "how do I back up the wiki", mode="keyword"))[0] == "wiki/dumps.md"


def test_the_words_that_make_a_query_a_question_do_not_count(tmp_path, config, notes):
    write_tree(notes, {"faq.md": "# How to restart\n\nWhen, why and how to restart: who knows.\n",
                       "runbooks/nginx.md": "# Nginx\n\nRestart nginx with systemctl after a config change; "
                                            "check the error log if the workers do not come back.\n"})
    cfg, con = _index()
    assert _rels(search(con, cfg, "how and when do I restart nginx", mode="keyword"))[0] == "runbooks/nginx.md"


def test_a_note_rewritten_while_a_search_reads_is_still_found(indexed, notes, monkeypatch):
    """An index run that commits between the keyword list and the reading of the chunks it names
    (the note rewritten: its chunks under new ids) does not leave the search without its hit: a
    keyword search reads both in one snapshot."""
    from recall.notes import search as search_module
    cfg, con = indexed
    load = search_module._load_chunks
    rewritten = []

    def writer_commits_first(con_, ids):
        if not rewritten:
            note = notes / "incidents/2023/INC-10963-db-failover.md"
            note.write_text(note.read_text() + "\nOne more line, written while a search reads.\n")
            other = db.connect(cfg.db_path)
            run_index(other, cfg, redactor=vault.redactor)     # its own connection: commits now
            other.close()
            rewritten.append(True)
        return load(con_, ids)
    monkeypatch.setattr(search_module, "_load_chunks", writer_commits_first)
    reader = db.connect(cfg.db_path, readonly=True)
    hits = search(reader, cfg, "INC-10963", mode="keyword").hits
    assert rewritten and hits and hits[0].relpath == "incidents/2023/INC-10963-db-failover.md"
    assert not reader.in_transaction


@pytest.mark.parametrize("query, reason", [
    ("kubectl drain --ignore-daemonsets", "command with flags"),
    ('"connection reset by peer"', "quoted string"),
    ("_netdev", "identifier"), ("RespectIgnoreDifferences=true", "identifier"),
    ("INC-10963", "identifier"), ("pg-prod-03", "identifier")])
def test_a_lookup_routes_keyword_first_even_with_a_provider(query, reason):
    from recall.notes.query import parse_query, route_for
    assert route_for("auto", parse_query(query), "local") == Route("keyword", reason)


@pytest.mark.parametrize("query", ["how do we use kubectl drain safely on a node", "who is on-call for db2 this week",
                                   "connection reset by peer"])
def test_a_question_holding_an_identifier_or_a_command_word_reads_both_lists(query):
    from recall.notes.query import parse_query, route_for
    assert route_for("auto", parse_query(query), "local") == Route("hybrid")


def test_a_command_with_flags_finds_the_note_holding_the_flag_first(config, notes):
    write_tree(notes, {
        "runbooks/drain.md": "# Node maintenance\n\nRun `kubectl drain node-7 --ignore-daemonsets` first.\n",
        "notes/kubectl.md": "# kubectl tips\n\nkubectl drain, kubectl cordon: drain drains, kubectl kubectl.\n"})
    cfg, con = _index()
    res = search(con, cfg, "kubectl drain --ignore-daemonsets")
    assert res.route == Route("keyword", "command with flags")
    assert _rels(res)[0] == "runbooks/drain.md"


def test_a_cli_search_parses_its_query_once(cli, config, notes, monkeypatch):
    """The record the CLI parses routes the DB open, both lists and the snippets: nothing parses the
    query string again (issue 25 point 3)."""
    from recall.notes import query
    from recall.notes import search as search_module
    assert cli("index")[0] == 0
    calls = []
    real = query.parse_query
    monkeypatch.setattr(query, "parse_query", lambda text: calls.append(text) or real(text))
    monkeypatch.setattr(search_module, "parse_query", lambda text: calls.append(text) or real(text))
    code, out, err = cli("search", "disk", "filled", "up")
    assert code == 0, err
    assert calls == ["disk filled up"]
