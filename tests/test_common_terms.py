"""The common words' postings (postings.py) and the top-k from them (common_terms.py): the same
chunks, order and scores as FTS5's bm25(), kept in step with the index."""
import itertools
import random

import pytest

from recall import db
from recall.config import load_config
from recall.notes import common_terms, keyword, postings
from recall.notes.index import run_index
from recall.notes.query import parse_query
from recall.vault import store as vault

# word forms the porter stemmer folds together (rotation/rotations/rotated), some in more than half
# of the chunks (FTS5's idf floor), some in fewer
COMMON = ["certificate", "rotation", "rotations", "database", "failover", "kafka", "consumer", "lag",
          "terraform", "state", "lock", "drift", "jump", "host", "vpn"]
RARE = ["etcd", "quorum", "bastion"]
QUERIES = ["certificate", "rotation", "certificate rotation", "database failover", "kafka consumer lag",
           "terraform state lock drift", "jump host vpn", "state drift", "rotations certificate",
           "certificates rotated", "lag state", "host", "vpn jump kafka", "etcd quorum", "certificate etcd",
           "database-failover", "the lock", "kafka lag consumer state host"]
# an OR of common words widens a search whose AND is short: above all when a word is in no note
ABSENT = ["certificate nosuchword", "kafka zzzq lag", "zzzq yyyq", "rotation nosuchword state drift",
          "vpn unheardof", "etcd nosuchword"]


def _tree(root, rnd, files: int, start: int = 0):
    weights = {w: rnd.uniform(0.2, 0.9) for w in COMMON}
    for i in range(start, start + files):
        name = "-".join(rnd.sample(COMMON, 2))
        lines = [f"# Note {i} {rnd.choice(COMMON)}", ""]
        for s in range(rnd.randint(2, 6)):
            heading = " ".join(rnd.sample(COMMON, rnd.randint(0, 2)))
            body = [w for w in COMMON if rnd.random() < weights[w] / 3 for _ in range(rnd.randint(1, 3))]
            body += [rnd.choice(RARE)] if rnd.random() < 0.05 else []
            body += ["filler"] * rnd.randint(0, 30)
            rnd.shuffle(body)
            lines += [f"## Section {s} {heading}", "", " ".join(body) + ".", ""]
        path = root / f"area{i % 5}" / f"{name}-{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines))


@pytest.fixture
def common_index(tmp_path, monkeypatch):
    """A generated tree of common words, indexed with the commonness threshold lowered."""
    monkeypatch.setattr(postings, "COMMON_MIN", 15)
    root = tmp_path / "gen"
    _tree(root, random.Random(13), 70)
    cfg_path = tmp_path / "gen.yaml"
    cfg_path.write_text(f"sources:\n  - name: gen\n    path: {root}\n")
    monkeypatch.setenv("RECALL_CONFIG", str(cfg_path))
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, redactor=vault.redactor)
    return root, cfg, con


def _fts(con, query, limit, op="AND"):
    sql = (f"SELECT rowid, {keyword.BM25} FROM chunks_fts WHERE chunks_fts MATCH ? "
           f"ORDER BY {keyword.BM25} LIMIT ?")
    return [(cid, -r) for cid, r in con.execute(sql, (parse_query(query).fts(op), limit))]


def _fast(con, query, limit, op="AND"):
    phrases = list(parse_query(query).phrases)
    return (common_terms.top_k if op == "AND" else common_terms.top_k_any)(con, phrases, keyword.WEIGHTS, limit)


def _check_all(con, queries, ops=("AND", "OR")) -> int:
    """Every query at several depths, as an AND and as an OR: the fast path, when it answers, is
    FTS5's answer. Returns how many it answered."""
    served = 0
    for query, limit, op in itertools.product(queries, (1, 5, 10, 50), ops):
        got = _fast(con, query, limit, op)
        if got is None:
            continue
        want = _fts(con, query, limit, op)
        assert [c for c, _ in got] == [c for c, _ in want], (query, limit, op)
        assert all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for (_, a), (_, b) in zip(got, want)), (query, limit, op)
        served += 1
    return served


def _random_queries(rnd, n):
    return [" ".join(rnd.sample(COMMON, rnd.randint(1, 4))) for _ in range(n)]


def test_fast_path_gives_fts5s_chunks_order_and_scores(common_index):
    _, _, con = common_index
    queries = QUERIES + _random_queries(random.Random(5), 60)
    before = common_terms.STATS["served"]
    served = _check_all(con, queries)
    # the path is taken (else the equality above proves nothing): most queries of common words
    assert served >= len(queries) * 2
    assert common_terms.STATS["served"] - before == served
    # and not for what it cannot answer exactly: a rare word, a hyphenated phrase
    assert _fast(con, "etcd quorum", 1) is None
    assert _fast(con, "database-failover", 1) is None
    assert common_terms.top_k(con, ['certificate"*', "rotation"], keyword.WEIGHTS, 1) is None   # not a word


def test_an_or_of_common_words_is_fts5s_too_and_a_word_in_no_note_is_left_out(common_index):
    _, _, con = common_index
    queries = ABSENT + QUERIES + _random_queries(random.Random(8), 30)
    before = common_terms.STATS["served"]
    served = _check_all(con, queries, ops=("OR",))
    assert served >= len(queries) * 2 and common_terms.STATS["served"] - before == served
    for query in ABSENT[:5]:                    # a word no chunk holds does not stop the postings
        assert _fast(con, query, 10, "OR") is not None, query
    assert _fast(con, "zzzq yyyq", 10, "OR") == [] == _fts(con, "zzzq yyyq", 10, "OR")
    assert _fast(con, "etcd nosuchword", 10, "OR") is None             # a word too rare for postings
    assert _fast(con, "certificate rotation kafka lag state", 10, "OR") is None     # more than ANY_MAX


def test_keyword_list_is_the_same_with_or_without_the_fast_path(common_index, monkeypatch):
    _, _, con = common_index
    queries = QUERIES + ABSENT + _random_queries(random.Random(6), 20)
    fast = [keyword.keyword_ranked(con, parse_query(q), 50) for q in queries]
    monkeypatch.setattr(common_terms, "top_k", lambda *a, **k: None)
    monkeypatch.setattr(common_terms, "top_k_any", lambda *a, **k: None)
    assert fast == [keyword.keyword_ranked(con, parse_query(q), 50) for q in queries]


def test_changed_chunks_are_never_served_from_old_postings(common_index):
    root, cfg, con = common_index
    query = "certificate rotation"
    assert _fast(con, query, 5) is not None
    con.execute("DELETE FROM files WHERE id = (SELECT MIN(id) FROM files)")    # its chunks go by cascade
    assert _fast(con, query, 5) is None                 # pending: FTS5 answers
    assert postings.refresh(con).startswith("updated")
    assert _check_all(con, QUERIES) > 0


def test_incremental_index_keeps_them_exact(common_index):
    root, cfg, con = common_index
    rnd = random.Random(21)
    files = sorted(root.rglob("*.md"))
    for path in files[:5]:
        path.unlink()                                   # removed
    for path in files[5:12]:                            # changed: different words, more sections
        path.write_text(path.read_text().replace("certificate", "kafka lag") + "\n## More rotation\n\nstate drift\n")
    _tree(root, rnd, 6, start=1000)                     # added
    rep = run_index(con, cfg, redactor=vault.redactor)
    assert (rep.new, rep.changed, rep.removed) == (6, 7, 5)
    assert con.execute("SELECT count(*) FROM common_dirty").fetchone()[0] == 0
    assert _check_all(con, QUERIES + _random_queries(random.Random(7), 40)) > len(QUERIES)


def test_many_changes_rebuild_them(common_index, monkeypatch):
    root, cfg, con = common_index
    monkeypatch.setattr(postings, "REBUILD_AFTER", 10)
    for path in sorted(root.rglob("*.md"))[:20]:
        path.write_text(path.read_text() + "\n## Extra vpn host\n\njump jump host\n")
    con.execute("BEGIN")
    con.execute("DELETE FROM common_postings")          # a rebuild must not need what was there
    con.execute("COMMIT")
    run_index(con, cfg, redactor=vault.redactor)
    assert con.execute("SELECT count(DISTINCT term) FROM common_postings").fetchone()[0] >= 10
    assert _check_all(con, QUERIES) > len(QUERIES)


def test_other_weights_are_not_served_until_rebuilt(common_index):
    _, _, con = common_index
    phrases = ["certificate", "rotation"]
    assert common_terms.top_k(con, phrases, keyword.WEIGHTS, 5) is not None
    assert common_terms.top_k(con, phrases, (2.0, 1.0, 1.0), 5) is None
    assert postings.refresh(con, (2.0, 1.0, 1.0)).startswith("rebuilt")
    sql = ("SELECT rowid, bm25(chunks_fts, 2.0, 1.0, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ? "
           "ORDER BY bm25(chunks_fts, 2.0, 1.0, 1.0) LIMIT 5")
    want = [(c, -r) for c, r in con.execute(sql, ('"certificate" AND "rotation"',))]
    got = common_terms.top_k(con, phrases, (2.0, 1.0, 1.0), 5)
    assert [c for c, _ in got] == [c for c, _ in want]


def test_postings_are_built_with_the_weights_search_asks_for():
    # were they not, every search would quietly ask FTS5 (correct, and as slow as before)
    assert tuple(common_terms.WEIGHTS) == tuple(keyword.WEIGHTS)


def test_a_small_index_keeps_no_postings(config):
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, redactor=vault.redactor)
    assert con.execute("SELECT count(*) FROM common_postings").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM common_dirty").fetchone()[0] == 0
    assert con.execute("SELECT rows FROM common_state").fetchone()[0] > 0


def test_a_refresh_that_meets_another_writer_gives_up_and_the_next_one_catches_up(common_index):
    root, cfg, con = common_index
    con.execute("DELETE FROM files WHERE id = (SELECT MIN(id) FROM files)")
    other = db.connect(cfg.db_path)
    other.execute("BEGIN IMMEDIATE")                    # a writer holds the DB (a vault sync, say)
    con.execute("PRAGMA busy_timeout=100")
    try:
        assert postings.refresh(con) == "skipped: another writer"
        assert not con.in_transaction
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert _fast(con, "certificate rotation", 5) is None        # still pending: FTS5 answers
    assert postings.refresh(con).startswith("updated")
    assert _check_all(con, QUERIES) > 0
