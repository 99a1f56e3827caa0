"""Embedding providers: Voyage against the fake server over real HTTP (request shapes, retries, bad
answers, the token cap also under kill -9 and two runs at once, never embedding twice, the key from
the vault, no secret value in any request); the local models in numpy against stored references."""
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
from recall.notes.index import _texts, embed_batches, run_index
from recall.vault import store as vault
from tests.conftest import CANARY, REPO, write_tree
from tests.fake_voyage import KEY, FakeVoyage, tokens_of

FAST = Retry(attempts=4, base=0.01, cap=0.05, budget=5.0)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setattr(embed, "DEFAULT_RETRY", FAST)


@pytest.fixture
def voyage(make_world, fake, monkeypatch):
    """World writer: the notes tree, provider voyage at the fake server, plus `extra` embedding keys
    and any other tests.world.build argument (secrets=..., include=...)."""
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)

    def write(extra: str = "", **world):
        return make_world(config=f"embedding:\n  provider: voyage\n  dimension: 64\n  base_url: {fake.url}\n{extra}",
                          **world)
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
                assert gap >= wait - 0.005                                 # the server saw the pause
            # a busy machine only lengthens a gap: how much longer is no verdict (timings are benchmarks')
            assert all(b > a for a, b in zip(waits, waits[1:]))
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


def test_5xx_and_dropped_connections_are_retried(fake):
    t = UrllibTransport(KEY, fake.url)
    fake.script("500", "drop", "503")
    vectors, _ = _provider(fake, t).embed(["a"], "document")
    assert len(vectors) == 1 and fake.count == 4


def test_a_slow_answer_times_out_and_is_retried_then_held_as_unconfirmed(fake):
    t = UrllibTransport(KEY, fake.url, timeout=0.3)
    fake.slow_mode_seconds = 1.0
    fake.script("slow")
    vectors, _ = _provider(fake, t).embed(["a"], "document")
    assert len(vectors) == 1 and fake.count == 2
    fake.default = "slow"
    with pytest.raises(ProviderError, match="could not be reached") as err:
        _provider(fake, t).embed(["a"], "document")
    assert err.value.uncertain                     # it may have been billed: the ledger holds it


def test_a_429_storm_gives_up_within_bounds(fake):
    t = UrllibTransport(KEY, fake.url)
    fake.default = "429"
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"rate-limiting \(HTTP 429\).*gave up after 4 tries"):
        _provider(fake, t).embed(["a"], "document")
    assert fake.count == 4 and time.monotonic() - started < 5


def test_a_rejected_key_is_one_line_naming_the_variable(voyage, fake, cli, monkeypatch):
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


def test_not_json_is_an_error_not_a_crash(fake):
    t = UrllibTransport(KEY, fake.url)
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


def test_a_renamed_text_or_code_file_keeps_its_vectors(voyage, fake, cli, notes):
    voyage(include=["*.md", "*.txt", "*.py"])
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
    code, out, err = cli("index")
    assert code == 0, err
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == _texts_of(con), (out, err)
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
        proc = _popen_index()
        assert _wait_for(lambda: fake.count >= kill_after)
        time.sleep(0.013 * kill_after % 0.05)              # somewhere inside a request or a commit
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        con = sqlite3.connect(cfg.db_path)
        db.texts.register(con)               # the chunks view reads its texts through recall's function
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
    db.texts.register(con)
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


def test_a_note_another_run_removes_while_this_one_embeds_is_skipped(voyage, fake, monkeypatch):
    """Embedding runs after the index lock is let go: a watcher's run removed a note whose chunk this
    run had listed to embed, and `recall index` (and the watcher) ended in a KeyError traceback."""
    from recall.notes import index
    cfg, read = load_config(), index._texts

    def removed_meanwhile(con, batch):
        other = db.connect(cfg.db_path)
        gone = other.execute("DELETE FROM files WHERE id IN (SELECT file_id FROM chunks WHERE hash=?) "
                             "OR head_hash=?", (batch[0], batch[0])).rowcount
        other.close()
        monkeypatch.setattr(index, "_texts", read)
        assert gone == 1
        return read(con, batch)
    monkeypatch.setattr(index, "_texts", removed_meanwhile)
    report, con = _index()
    assert report.embedded == _texts_of(con) > 0
    assert con.execute("SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM embeddings e "
                       "WHERE e.hash = c.hash)").fetchone()[0] == 0


def test_two_runs_at_once_cannot_pass_the_cap_together(voyage, fake, notes):
    many_notes(notes, 30)
    fake.slow_seconds = 0.03
    voyage("  batch_size: 2\n  token_cap: 400\n")
    procs = [_popen_index() for _ in range(2)]
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
    write_tree(notes, {"jira/pasted.md": f"# Jira\n\nThe old token was {CANARY}, rotated since.\n"})
    monkeypatch.delenv("VOYAGE_API_KEY")
    voyage("  api_key_secret: voyage-key\n", secrets_in_notes=True,     # inside the notes tree: never indexed
           secrets=f'- id: voyage-key\n  service: voyage\n  value: "{KEY}"\n'
                   f'- id: canary-token\n  service: jira\n  value: "{CANARY}"\n')
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


def test_a_vault_value_typed_into_a_query_reaches_no_provider_or_reranker(voyage, fake, cli, notes):
    """`search "why does the token VALUE fail" --rerank`: the CLI's echo masked it, yet the query's
    embedding request and the rerank request carried it raw."""
    pytest.importorskip("cryptography")
    voyage(secrets=f'- id: canary-token\n  service: jira\n  value: "{CANARY}"\n')
    assert cli("secret", "sync")[0] == 0 and cli("index")[0] == 0
    sent = len(fake.raw)
    code, out, err = cli("search", "--mode", "hybrid", "--rerank", f"why does the token {CANARY} fail on jira")
    assert code == 0, err
    raw = b"".join(fake.raw[sent:]).decode()
    assert "/rerank" in " ".join(r[0] for r in fake.requests) and "[recall:canary-token]" in raw
    assert not any(CANARY[i:i + 6] in raw + out + err for i in range(len(CANARY) - 5))


def test_a_vault_key_for_voyages_host_is_never_sent_to_another(voyage, fake, cli, monkeypatch):
    """`embedding.api_key_secret` naming a secret whose url: is Voyage's, with the base URL pointed at
    another host over plain http: the key was sent there in its Authorization header."""
    pytest.importorskip("cryptography")
    monkeypatch.delenv("VOYAGE_API_KEY")
    voyage("  api_key_secret: voyage-key\n",
           secrets=f'- id: voyage-key\n  service: voyage\n  url: https://api.voyageai.com\n  value: "{KEY}"\n')
    assert cli("secret", "sync")[0] == 0
    code, out, err = cli("index")
    assert code == 1 and fake.count == 0 and KEY not in out + err
    assert f"embedding.api_key_secret 'voyage-key' is for api.voyageai.com (its url: line), and the embeddings " \
           f"would go to {fake.url}" in err and "over https" in err, err


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


def test_a_reloaded_config_that_changes_only_the_rerank_model_reranks_with_it(voyage, fake, cli):
    """The MCP server reloads the config per call: a new rerank_model alone must reach Voyage."""
    assert cli("index")[0] == 0
    assert cli("search", "--rerank", "database failover")[0] == 0
    voyage("  rerank_model: rerank-2\n")
    assert cli("search", "--rerank", "database failover")[0] == 0
    models = [r[2]["model"] for r in fake.requests if r[0] == "/v1/rerank"]
    assert models == ["rerank-2.5-lite", "rerank-2"]
