"""Fresh results: `recall mcp` follows its sources while it runs, so a note saved a moment ago is found
by the agent's next search — through the MCP SDK's client over real stdio, with the OS watcher
(watchdog) and with the stat poll (RECALL_WATCH=poll)."""
import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("mcp")
pytestmark = pytest.mark.extras

import anyio  # noqa: E402

from recall import db
from recall.config import load_config  # noqa: E402
from recall.notes import walk, watch  # noqa: E402
from tests.conftest import REPO, run_recall  # noqa: E402
from tests.world import stored_bytes

DEADLINE_S = 30          # generous on a loaded machine; the 2 s target is a bench row, not a test


def _methods():
    found = ["poll"]
    try:
        import watchdog.observers  # noqa: F401
        found.append("auto")                   # the default picks watchdog when it is installed
    except ImportError:
        pass
    return found


class Server:
    """One `recall mcp` over stdio for a whole test; `search(q)` → the hits' relpaths."""

    def __init__(self, how: str):
        self.how = how

    async def session(self, script):
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
        env = {k: os.environ[k] for k in ("HOME", "RECALL_HOME", "RECALL_CONFIG", "PATH")}
        env.update(PYTHONPATH=str(REPO), RECALL_WATCH=self.how)
        params = StdioServerParameters(command=sys.executable, args=["-m", "recall", "mcp"], env=env, cwd=str(REPO))
        with open(os.devnull, "w") as devnull:
            async with stdio_client(params, errlog=devnull) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()

                    async def raw(query):
                        r = await s.call_tool("recall_search", {"query": query, "mode": "keyword", "limit": 20})
                        text = "".join(c.text for c in r.content)
                        return text if r.is_error else json.loads(text)

                    async def search(query):
                        said = await raw(query)
                        return [] if isinstance(said, str) else [h["read"].split(":", 1)[1].rsplit(":", 1)[0]
                                                                 for h in said["hits"]]     # source:relpath:line
                    search.raw = raw

                    async def until(query, check):
                        deadline = time.monotonic() + DEADLINE_S
                        while True:
                            hits = await search(query)
                            if check(hits) or time.monotonic() > deadline:
                                return hits
                            await anyio.sleep(0.2)
                    return await script(search, until)


def run_session(how, script):
    return anyio.run(Server(how).session, script)


@pytest.fixture
def indexed(config, notes):
    assert run_recall("index").returncode == 0
    return notes


@pytest.mark.parametrize("how", _methods())
def test_save_edit_rename_delete_and_atomic_save_are_followed(indexed, how):
    notes = indexed

    async def script(search, until):
        out = {}
        (notes / "today.md").write_text("# Today\n\nINC-99999 paged at dawn.\n")
        out["saved"] = await until("INC-99999", lambda h: "today.md" in h)
        (notes / "today.md").write_text("# Today\n\nINC-88888 replaced it.\n")
        out["edited_new"] = await until("INC-88888", lambda h: "today.md" in h)
        out["edited_old"] = await search("INC-99999")
        os.rename(notes / "today.md", notes / "renamed.md")
        out["renamed"] = await until("INC-88888", lambda h: "renamed.md" in h and "today.md" not in h)
        tmp = notes / ".renamed.md.swp"                 # an editor's atomic save: temp file, rename over
        tmp.write_text("# Today\n\nINC-77777 saved atomically.\n")
        os.replace(tmp, notes / "renamed.md")
        out["atomic"] = await until("INC-77777", lambda h: "renamed.md" in h)
        os.remove(notes / "renamed.md")
        out["deleted"] = await until("INC-77777", lambda h: h == [])
        return out
    out = run_session(how, script)
    assert "today.md" in out["saved"]
    assert "today.md" in out["edited_new"] and "today.md" not in out["edited_old"]
    assert out["renamed"] == ["renamed.md"]
    assert out["atomic"] == ["renamed.md"]
    assert out["deleted"] == []


def test_a_new_servers_first_search_waits_for_the_first_index(config, notes):
    """An agent's first search, sent as `recall mcp` starts on notes never indexed, said "the index
    holds no note yet: add markdown or text files to …" of a folder full of them: it now waits for
    the server's first pass and finds what is there."""
    for i in range(120):          # a first pass of a fraction of a second, well within the wait on a busy machine
        (notes / f"n{i:03}.md").write_text(f"# Note {i}\n\nticket FIRST-{i:03} raised.\n")

    async def script(search, until):
        return await search("FIRST-119")
    assert run_session("poll", script) == ["n119.md"]


def test_a_search_after_the_index_file_was_removed_waits_for_the_watcher_to_make_it_again(indexed):
    """The DB deleted while `recall mcp` runs: searches answered an error, then `hits: []` with no word, then
    "the index holds no note yet: add markdown files" while the watcher made it again."""
    from recall.config import load_config as load
    db_path = load().db_path
    for i in range(120):
        (indexed / f"n{i:03}.md").write_text(f"# Note {i}\n\nticket GONE-{i:03} raised.\n")

    async def script(search, until):
        first = await until("GONE-119", lambda h: h == ["n119.md"])
        for end in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{db_path}{end}")
        return first, await search.raw("GONE-119"), await until("GONE-119", lambda h: h == ["n119.md"])
    first, after, later = run_session("poll", script)
    assert first == later == ["n119.md"] and isinstance(after, dict), after      # no error
    if not after["hits"]:       # the 8 s wait ran out on a loaded machine: said, not taken for an empty index
        assert after["stale"] == ["notes"] and after["notices"] == [
            f"the notes are still being indexed ({indexed}): these results hold only what is indexed so far; "
            "search again in a minute"], after
    else:
        assert [h["read"] for h in after["hits"]] == ["notes:n119.md:1"], after


def test_a_first_pass_longer_than_a_search_waits_is_said_not_taken_for_an_empty_index(config, notes, monkeypatch):
    """A search that stops waiting for the first pass answers from what is indexed so far and says
    the notes are still being indexed; once the pass ends, it finds them."""
    import threading

    from recall import mcp_server
    from recall.api import notes as api_notes
    from recall.vault import store as vault
    (notes / "first.md").write_text("# First\n\nINC-31337 written before any index.\n")
    entered, go = threading.Event(), threading.Event()

    def slow_redactor(con, cfg):          # the pass holds here, before it writes a note
        entered.set()
        go.wait(DEADLINE_S)
        return vault.redactor(con, cfg)
    w = watch.Watcher(load_config(), redactor=slow_redactor, reload=load_config).start()
    monkeypatch.setattr(api_notes, "_FOLLOWING", [w])
    monkeypatch.setattr(api_notes, "FIRST_PASS_S", 0.2)
    read: list = []
    try:
        assert entered.wait(DEADLINE_S)
        during = json.loads(mcp_server.recall_search("INC-31337"))
        monkeypatch.setattr(api_notes, "FIRST_PASS_S", DEADLINE_S)       # a read waits for the pass too
        reader = threading.Thread(target=lambda: read.append(mcp_server.recall_read("notes:first.md:1")))
        reader.start()
        time.sleep(0.3)
        go.set()
        reader.join(DEADLINE_S)
        assert _eventually(lambda: w.passes)
        after = json.loads(mcp_server.recall_search("INC-31337"))
    finally:
        go.set()
        w.stop()
    assert read and "INC-31337 written before any index." in read[0], read
    assert during["hits"] == [] and during["stale"] == ["notes"]
    assert [n for n in during["notices"] if "index" in n] == [
        f"the notes are still being indexed ({notes}): these results hold only what is indexed so far; "
        "search again in a minute"]
    assert [h["read"] for h in after["hits"]] == ["notes:first.md:1"] and "stale" not in after


@pytest.mark.parametrize("how", _methods())
def test_a_burst_of_a_thousand_files_is_all_found(indexed, how):
    notes = indexed

    async def script(search, until):
        await search("anything")                    # the server is up and its first pass ran
        burst = notes / "burst"
        burst.mkdir()
        for i in range(1000):
            (burst / f"n{i:04}.md").write_text(f"# Note {i}\n\nticket BURST-{i:04} raised.\n")
        last = await until("BURST-0999", lambda h: "burst/n0999.md" in h)
        return last, [await search(f"BURST-{i:04}") for i in (0, 123, 500, 998)]
    last, some = run_session(how, script)
    assert last == ["burst/n0999.md"]
    assert some == [["burst/n0000.md"], ["burst/n0123.md"], ["burst/n0500.md"], ["burst/n0998.md"]]


@pytest.mark.parametrize("how", _methods())
def test_a_vanished_source_folder_keeps_what_is_indexed(indexed, how, tmp_path):
    notes = indexed

    async def script(search, until):
        before = await search("jump01")
        os.rename(notes, tmp_path / "unmounted")
        await anyio.sleep(3)                        # several rounds of the poll, events of the removal
        during = await search("jump01")
        os.rename(tmp_path / "unmounted", notes)
        (notes / "back.md").write_text("# Back\n\nINC-55555 after the remount.\n")
        after = await until("INC-55555", lambda h: "back.md" in h)
        return before, during, after
    before, during, after = run_session(how, script)
    assert before and during == before
    assert after == ["back.md"]


def test_behind_names_a_source_changed_since_the_last_run(indexed):
    cfg = load_config()
    con = db.connect(cfg.db_path, readonly=True)
    assert walk.behind(con, cfg) == []
    time.sleep(0.05)
    (indexed / "runbooks" / "new.md").write_text("# New\n")
    os.utime(indexed / "runbooks", None)
    assert walk.behind(con, cfg, budget_s=1.0) == ["notes"]
    # a machine too busy for any budget still checks a small tree whole (the suite at -n 3 once missed it)
    assert walk.behind(con, cfg, budget_s=0.0) == ["notes"]
    folders = db.get_meta(con, "folders").split("\n")
    assert folders.index("notes\trunbooks") > 0                 # … and a big one only as far as the budget
    assert walk.behind(con, cfg, budget_s=0.0, always=1) == []


class _Clock:
    """A stop event that records every pause the poll asks for and waits none of them."""

    def __init__(self):
        self.pauses = []

    def wait(self, seconds):
        self.pauses.append(seconds)
        return False


def test_the_poll_acts_on_a_change_at_once_and_waits_only_between_quiet_rounds(tmp_path):
    """A stat poll that sees a change says so without first sleeping out its period (a save was
    found 1-2 s late); a round that finds nothing waits the period before the next walk."""
    (tmp_path / "a.md").write_text("# A\n")
    clock = _Clock()
    poll = watch._Poll([str(tmp_path)], set(), clock)
    assert poll.wait(clock, watch.POLL_S) is False                       # nothing changed: it waits
    assert clock.pauses and max(clock.pauses) > watch.POLL_S / 2
    clock.pauses.clear()
    (tmp_path / "b.md").write_text("# B\n")
    assert poll.wait(clock, watch.POLL_S) is True
    assert all(p <= watch.PAUSE_S for p in clock.pauses)                 # no poll period slept
    assert poll.wait(clock, watch.POLL_S) is False


def test_recall_watch_off_or_a_bad_value(monkeypatch):
    monkeypatch.setenv("RECALL_WATCH", "off")
    assert watch.method() == "off"
    monkeypatch.setenv("RECALL_WATCH", "sometimes")
    r = subprocess.run([sys.executable, "-c", "from recall.notes import watch; watch.method()"], cwd=REPO,
                       capture_output=True, text=True, env={**os.environ, "RECALL_WATCH": "sometimes"})
    assert "RECALL_WATCH='sometimes' is not one of auto, poll, off" in r.stderr


def test_a_paid_provider_embeds_changed_chunks_once_files_are_still(fake, config, notes, monkeypatch):
    """Ten saves of one note in a second, then stillness: one embedding request for its last text (not
    one per keystroke), nothing before the note was still, the token cap counting it as any run."""
    from recall.embed.ledger import ledger_totals
    from recall.vault import store as vault
    from tests.fake_voyage import KEY, tokens_of
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    config(f"embedding:\n  provider: voyage\n  dimension: 64\n  base_url: {fake.url}\n")
    assert run_recall("index").returncode == 0
    pytest.importorskip("watchdog")                  # events at once: the stillness wait is what batches
    before = len(fake.embed_requests())
    monkeypatch.setenv("RECALL_WATCH", "auto")
    cfg = load_config()
    billed_before, _ = ledger_totals(db.connect(cfg.db_path, readonly=True))
    w = watch.Watcher(cfg, redactor=vault.redactor).start()
    try:
        while w.passes < 1:
            time.sleep(0.05)
        for i in range(10):                          # typing: a save every 0.1 s
            (notes / "draft.md").write_text(f"# Draft\n\nrevision {i} of the rollback plan\n")
            time.sleep(0.1)
        saved = time.monotonic()
        deadline = saved + DEADLINE_S
        while len(fake.embed_requests()) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        first_request = time.monotonic()
        time.sleep(watch.QUIET_S * 3)
    finally:
        w.stop()
    sent = fake.embed_requests()[before:]
    assert len(sent) == 1, [r[2]["input"] for r in sent]
    texts = sent[0][2]["input"]
    assert any("revision 9" in t for t in texts) and not any("revision 8" in t for t in texts)
    assert first_request - saved >= 0.9      # waited until the note was still for a second (a lower bound)
    billed, _ = ledger_totals(db.connect(cfg.db_path, readonly=True))
    assert billed - billed_before >= sum(tokens_of(t) for t in texts), "the ledger counts what the watcher embedded"


def test_index_watch_follows_in_the_foreground_and_stops_cleanly_on_ctrl_c(indexed, tmp_path):
    import signal
    notes = indexed
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "index", "--watch"], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "RECALL_WATCH": "poll"})
    try:
        first = proc.stdout.readline()                     # the ordinary run's line, then watching
        assert first.startswith("indexed: "), first
        (notes / "fresh.md").write_text("# Fresh\n\nINC-44444 written while watching.\n")
        line = proc.stdout.readline()
        assert line.startswith("indexed: 1 new, 0 changed, 0 removed files"), line
        r = run_recall("--json", "search", "INC-44444")    # another process sees it at once
        assert [h["relpath"] for h in json.loads(r.stdout)["hits"]] == ["fresh.md"]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "watching 1 source(s) with poll; Ctrl-C stops" in err and err.rstrip().endswith("stopped watching")
    assert "Traceback" not in err


def test_doctor_says_how_recall_mcp_follows_the_sources(config):
    for how, said in (("poll", "with a stat poll"), ("off", "RECALL_WATCH=off"), ("nope", "is not one of")):
        r = run_recall("doctor", env={"RECALL_WATCH": how})
        line = next(line for line in r.stdout.splitlines() if " freshness " in line)
        assert said in line, line
    assert run_recall("doctor", env={"RECALL_WATCH": "nope"}).stdout.count("NO  freshness") == 1


def test_search_says_when_it_is_behind_and_names_a_missing_source(indexed, config, tmp_path):
    r = run_recall("--json", "search", "jump01")
    assert json.loads(r.stdout)["stale"] == [] and "changed since" not in r.stderr
    time.sleep(0.05)
    (indexed / "runbooks" / "late.md").write_text("# Late\n\nINC-33333\n")
    r = run_recall("search", "jump01")
    assert r.returncode == 0 and r.stderr.count("\n") == 1
    assert r.stderr == ("recall: notes changed since the last index run: 'recall index' brings the results up "
                        "to date ('recall index --watch' keeps them so)\n")
    assert json.loads(run_recall("--json", "search", "jump01").stdout)["stale"] == ["notes"]
    assert run_recall("index").returncode == 0
    assert json.loads(run_recall("--json", "search", "jump01").stdout)["stale"] == []
    os.rename(indexed, tmp_path / "away")
    r = run_recall("search", "jump01")
    assert r.returncode == 0 and "jump-hosts.md" in r.stdout
    assert "source 'notes'" in r.stderr and "is not there" in r.stderr


def test_the_watcher_and_a_manual_index_at_once_never_corrupt_or_bill_twice(fake, config, notes, monkeypatch):
    """`recall mcp`'s watcher and a `recall index` the user runs meanwhile, over the same notes being
    written: the DB passes its integrity check, every note is found, and no text is embedded twice."""
    from recall.vault import store as vault
    from tests.fake_voyage import KEY
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    monkeypatch.setenv("RECALL_WATCH", "poll")
    config(f"embedding:\n  provider: voyage\n  dimension: 64\n  base_url: {fake.url}\n")
    assert run_recall("index").returncode == 0
    cfg = load_config()
    w = watch.Watcher(cfg, redactor=vault.redactor).start()
    try:
        for i in range(40):
            (notes / "busy" / f"n{i:02}.md").parent.mkdir(exist_ok=True)
            (notes / "busy" / f"n{i:02}.md").write_text(f"# Busy {i}\n\nticket BUSY-{i:02} and its rollback.\n")
            if i % 10 == 0:
                assert run_recall("index").returncode == 0
        assert run_recall("index").returncode == 0
        deadline = time.monotonic() + DEADLINE_S
        con = db.connect(cfg.db_path, readonly=True)
        while time.monotonic() < deadline and con.execute(
                "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.hash=c.hash)"
                ).fetchone()[0]:
            time.sleep(0.2)
        time.sleep(watch.QUIET_S * 2)
    finally:
        w.stop()
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for i in (0, 17, 39):
        r = run_recall("--json", "search", f"BUSY-{i:02}")
        assert [h["relpath"] for h in json.loads(r.stdout)["hits"]] == [f"busy/n{i:02}.md"]
    sent = [t for r in fake.embed_requests() for t in r[2]["input"]]
    assert len(sent) == len(set(sent)), "a text was embedded (and billed) twice"


def test_a_secrets_file_inside_the_notes_stays_out_while_watched(make_world, notes, monkeypatch):
    """A secrets file kept in the notes tree (as older READMEs said) is edited while the watcher runs:
    its value is never indexed — no chunk holds it and no search finds it."""
    from recall.vault import store as vault
    from tests.conftest import CANARY
    secrets = make_world(secrets="- id: jira-api-token\n  service: jira\n  value: placeholder-value-1\n",
                         secrets_in_notes=True).secrets
    assert run_recall("index").returncode == 0
    monkeypatch.setenv("RECALL_WATCH", "poll")
    cfg = load_config()
    w = watch.Watcher(cfg, redactor=vault.redactor).start()
    try:
        while w.passes < 1:
            time.sleep(0.05)
        secrets.write_text(f"- id: jira-api-token\n  service: jira\n  value: {CANARY}\n")
        (notes / "after.md").write_text("# After\n\nINC-22222 saved after the secrets file.\n")
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            hits = json.loads(run_recall("--json", "search", "INC-22222").stdout)["hits"]
            if hits:
                break
            time.sleep(0.2)
    finally:
        w.stop()
    assert [h["relpath"] for h in hits] == ["after.md"]          # the watcher did index what changed
    con = db.connect(cfg.db_path, readonly=True)
    assert not con.execute("SELECT 1 FROM files WHERE relpath='secrets.yaml'").fetchone()
    stored = b"".join(stored_bytes(p) for p in cfg.db_path.parent.glob(cfg.db_path.name + "*"))
    assert CANARY.encode() not in stored


# -- following never stops for good: each cause reproduced, then gone, with short retries (parameters)

def _following(cfg, first_pass=True):
    """A watcher with the test's short retries and busy wait, started (and its first pass done)."""
    from recall.vault import store as vault
    w = watch.Watcher(cfg, redactor=vault.redactor, reload=load_config, retry_s=0.1, retry_max_s=0.5,
                      busy_s=0.3).start()
    if first_pass:
        _eventually(lambda: w.passes)
    return w


def _eventually(check, seconds=DEADLINE_S):
    """check()'s first true value within `seconds` (else its last one)."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def _found(ident: str) -> list:
    """The relpaths a keyword search finds in the index as it is on disk now (a new file included)."""
    from recall.notes.search import search
    cfg = load_config()
    con = db.connect(cfg.db_path, readonly=True)
    try:
        return [h.relpath for h in search(con, cfg, ident, n=5, mode="keyword").hits]
    finally:
        con.close()


def test_a_db_locked_past_the_busy_wait_is_said_by_searches_then_followed_again(indexed, monkeypatch):
    import sqlite3

    from recall import mcp_server
    from recall.api import notes as api_notes
    monkeypatch.setenv("RECALL_WATCH", "poll")
    cfg = load_config()
    w = _following(cfg)
    other = sqlite3.connect(cfg.db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")                  # a writer that does not let go
        (indexed / "locked.md").write_text("# Locked\n\nINC-61616 saved while the index was locked.\n")
        why = _eventually(w.trouble)
        monkeypatch.setattr(api_notes, "_FOLLOWING", [w])
        answer = json.loads(mcp_server.recall_search("INC-61616"))
        other.execute("ROLLBACK")
        found = _eventually(lambda: _found("INC-61616"))
        _eventually(lambda: w.trouble() is None)          # the pass that wrote it has ended
        after = json.loads(mcp_server.recall_search("INC-61616"))
    finally:
        other.close()
        w.stop()
    assert "stayed locked by another process" in why
    assert answer["hits"] == [] and answer["stale"] == ["notes"]
    assert any("not being followed right now" in n and "locked" in n for n in answer["notices"])
    assert found == ["locked.md"] and w.trouble() is None
    assert "stale" not in after and [h["read"] for h in after["hits"]] == ["notes:locked.md:1"]


def test_a_db_file_replaced_under_the_watcher_is_reopened(indexed, monkeypatch):
    """As after `recall index --full` moved a damaged file aside: the watcher writes into the new file."""
    monkeypatch.setenv("RECALL_WATCH", "poll")
    cfg = load_config()
    w = _following(cfg)
    try:
        for end in ("", "-wal", "-shm"):
            if os.path.exists(f"{cfg.db_path}{end}"):
                os.replace(f"{cfg.db_path}{end}", f"{cfg.db_path}.broken{end}")
        assert run_recall("index").returncode == 0            # a new file under the same name
        (indexed / "after.md").write_text("# After\n\nINC-62626 saved after the rebuild.\n")
        found = _eventually(lambda: _found("INC-62626"))
    finally:
        w.stop()
    assert found == ["after.md"]


@pytest.mark.parametrize("how", _methods())
def test_a_source_folder_moved_away_and_made_again_is_followed(indexed, how, tmp_path, monkeypatch):
    from recall import mcp_server
    monkeypatch.setenv("RECALL_WATCH", how)
    w = _following(load_config())
    try:
        os.rename(indexed, tmp_path / "moved")
        away = json.loads(mcp_server.recall_search("jump01"))
        indexed.mkdir()                                       # a new folder under the old name
        time.sleep(1)                                         # a round or two sees it
        (indexed / "new.md").write_text("# New\n\nINC-63636 in the folder made again.\n")
        found = _eventually(lambda: _found("INC-63636"))
    finally:
        w.stop()
    assert [h["read"] for h in away["hits"]] == ["notes:runbooks/jump-hosts.md:1"]     # as last indexed
    assert any("source 'notes'" in n and "is not there" in n for n in away["notices"])
    assert found == ["new.md"]


def test_a_config_error_is_said_then_the_fixed_config_is_followed(config, notes, monkeypatch):
    """Started with a broken config (as `recall mcp` may be), fixed while it runs; then a second source
    added to it is followed too."""
    monkeypatch.setenv("RECALL_WATCH", "poll")
    config.path.write_text(config.path.read_text().replace("    path:", "    paht:"))     # one typo
    w = _following(None, first_pass=False)
    try:
        why = _eventually(w.trouble)
        (notes / "fixed.md").write_text("# Fixed\n\nINC-64646 saved before the config was fixed.\n")
        config()                                             # the config as it should be
        found = _eventually(lambda: os.path.exists(load_config().db_path) and _found("INC-64646"))
        more = notes.parent / "more"
        more.mkdir()
        (more / "other.md").write_text("# Other\n\nINC-65656 in a source added later.\n")
        config(sources={"more": more})
        added = _eventually(lambda: _found("INC-65656"))
    finally:
        w.stop()
    assert "config.yaml:3: unknown field 'paht' in a source" in why
    assert found == ["fixed.md"] and added == ["other.md"] and w.trouble() is None


def test_a_full_disk_is_said_then_followed_again_once_freed(config, notes, tmp_path, monkeypatch):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        monkeypatch.setenv("RECALL_HOME", str(mnt / "state"))
        monkeypatch.setenv("RECALL_WATCH", "poll")
        w = _following(load_config())
        try:
            filler = mnt / "filler"
            with open(filler, "wb") as f:                 # the rest of the disk, taken
                while True:
                    try:
                        f.write(b"\0" * 65536)
                        f.flush()
                    except OSError:
                        break
            bulk = notes / "bulk"
            bulk.mkdir()
            for i in range(300):
                (bulk / f"n{i:03}.md").write_text(f"# Bulk {i}\n\nrack r{i:03} holds host-{i:03}.example.com\n" * 20)
            why = _eventually(w.trouble)
            filler.unlink()
            found = _eventually(lambda: _found("host-299.example.com"))
        finally:
            w.stop()
    finally:
        subprocess.run(["umount", str(mnt)])
    assert "is full" in why
    assert found == ["bulk/n299.md"] and w.trouble() is None


def test_recall_mcp_started_with_a_config_error_follows_the_notes_once_it_is_fixed(config, notes):
    config.path.write_text(config.path.read_text().replace("    path:", "    paht:"))     # one typo

    async def script(search, until):
        broken = await search("INC-66666")                 # the config's error, as the agent reads it
        (notes / "later.md").write_text("# Later\n\nINC-66666 saved while the config was broken.\n")
        config()
        return broken, await until("INC-66666", lambda h: "later.md" in h)
    broken, after = run_session("poll", script)
    assert broken == [] and after == ["later.md"]


def test_a_value_written_into_the_secrets_file_leaves_the_index_while_watching(make_world, notes):
    """`recall index --watch` (as recall mcp) follows the secrets file too: a value written there, not yet
    synced, is redacted from the notes indexed before within a pass, with no note saved meanwhile."""
    from tests.conftest import CANARY
    token = f"tok-{CANARY}"
    w = make_world(secrets="", config="embedding: {provider: none}\n")
    (notes / "jira.md").write_text(f"# Jira\n\nThe jira token is {token} for the API.\n")
    cfg = load_config()
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "index", "--watch"], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "RECALL_WATCH": "poll"})
    try:
        assert proc.stdout.readline().startswith("indexed: ")
        w.secrets.write_text(f"- id: jira-api-token\n  value: {token}\n")
        deadline, held = time.monotonic() + DEADLINE_S, True
        while held and time.monotonic() < deadline:
            time.sleep(0.2)
            data = b"".join(stored_bytes(p) for p in cfg.home.iterdir() if p.name.startswith("recall.db"))
            held = any(CANARY[i:i + 6].encode() in data for i in range(len(CANARY) - 5))
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert not held, "the value indexed before it was a secret is still in the DB"
