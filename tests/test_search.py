"""Keyword search: identifiers exactly, words by BM25, hostile queries as text, shaping."""
import pytest

from recall import db
from recall.config import load_config
from recall.errors import RecallError
from recall.index import run_index
from recall.search import recency_factor, rrf, search
from tests.conftest import write_tree


@pytest.fixture
def indexed(config):
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg)
    return cfg, con


def _rels(res):
    return [h.relpath for h in res.hits]


def test_ticket_key_ranks_the_note_about_it_first(indexed):
    cfg, con = indexed
    res = search(con, cfg, "INC-10963")
    assert _rels(res)[0] == "incidents/2023/INC-10963-db-failover.md"
    # the note saying "INC 10963" is found, but below the real one
    assert "meetings/2024-01-15-standup.md" in _rels(res)
    assert res.route == "keyword (identifier)"


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
    assert "**wildcard**" in res.hits[0].snippet


def test_snippet_marks_whole_terms_only():
    from recall.search import snippet
    out = snippet("Incident INC-10963: the incidents of inc 10963 were noisy", "INC-10963")
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
    search(con, cfg, q)      # no exception: searched as text


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
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg)
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
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg)
    rels = _rels(search(con, cfg, "haproxy keepalived failover"))
    assert rels.index("older-but-better.md") < rels.index("new.md") < rels.index("old.md")
    assert rels[-1] == "newest-passing-mention.md"


def test_recency_never_lifts_a_note_over_one_naming_the_identifier():
    from recall.search import final_score
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
