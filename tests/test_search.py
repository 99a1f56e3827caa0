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
    assert 1.0 >= new > old > ancient >= 0.85


def test_rrf_fuses_ranks():
    fused = rrf({"a": [1, 2, 3], "b": [3, 1]})
    order = sorted(fused, key=lambda c: -fused[c][0])
    assert order[0] == 1 and fused[3][1] == {"a": 3, "b": 1}
