"""The local model run in numpy (no torch): a BERT encoder with mean or CLS pooling, for queries and documents."""
from __future__ import annotations

import contextlib
import json
import math
import os
import struct
import threading

from ..errors import MissingExtra, RecallError

# the sentence-transformers modules this encoder runs (the Normalize step is implied: recall
# compares by cosine); a Dense layer or another kind is refused
_MODULES = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
            "sentence_transformers.models.Normalize")
_DTYPES = {"F32": "<f4", "F16": "<f2"}
_CACHE: dict = {}              # model folder -> BertEncoder, per process
_LOCK = threading.Lock()


class Unsupported(Exception):
    """This model folder is not one the encoder runs (another architecture, pooling, dtype, …)."""


def _json(folder: str, name: str):
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        raise Unsupported(f"no readable {name}") from None


def read_safetensors(path: str) -> dict:
    """name -> numpy array over a read-only memory map of the file (a little-endian u64 header
    length, a JSON header of dtype/shape/offsets, then the raw tensors)."""
    import numpy as np
    with open(path, "rb") as fh:
        size = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(size))
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(meta["dtype"])
        if dtype is None:
            if meta["dtype"] in ("I64", "I32"):       # position_ids and the like: not weights
                continue
            raise Unsupported(f"tensor dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        arr = raw[start:end].view(dtype).reshape(meta["shape"])
        out[name[5:] if name.startswith("bert.") else name] = arr if dtype == "<f4" else arr.astype("<f4")
    return out


BATCH = 16                     # texts per forward pass of encode_many
ROWS = 1024                    # tokens per block of the feed-forward layer
GELU_ROWS = 64                 # … and per GELU pass: its four temporaries stay in the core's L2 cache


def _gelu(h):
    """BERT's exact GELU, x·Φ(x), in place: numpy has no erf, so 1 − erf(|x|/√2) by Abramowitz &
    Stegun 7.1.26 (error ≤ 1.5e-7), as max(x, 0) − |x|·(1 − erf(|x|/√2))/2 — one pass per step."""
    import numpy as np
    f32 = np.float32
    a = np.abs(h)
    t = a * f32(0.3275911 / math.sqrt(2.0))
    t += 1
    np.reciprocal(t, out=t)
    y = t * f32(1.061405429 / 2)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        y += f32(c / 2)
        y *= t
    np.square(h, out=t)
    t *= f32(-0.5)
    np.exp(t, out=t)
    y *= t                       # (1 − erf(|x|/√2)) / 2
    y *= a
    np.maximum(h, 0, out=h)
    h -= y
    return h


class BertEncoder:
    """A BERT encoder, its tokens pooled (mean or the [CLS] token) and L2-normalised, as the
    folder's modules.json and 1_Pooling/config.json describe (a folder without them: mean)."""

    def __init__(self, folder: str):
        self.pooling = read_pooling(folder)
        cfg = _json(folder, "config.json")
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu" or \
                cfg.get("position_embedding_type", "absolute") != "absolute":
            raise Unsupported(f"it is a {cfg.get('model_type')} model, not a plain BERT")
        st = _json(folder, "sentence_bert_config.json") if os.path.exists(
            os.path.join(folder, "sentence_bert_config.json")) else {}
        self.max_len = int(st.get("max_seq_length") or cfg.get("max_position_embeddings", 512))
        self.heads, self.layers = int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        weights = os.path.join(folder, "model.safetensors")
        if not os.path.exists(weights) or not os.path.exists(os.path.join(folder, "tokenizer.json")):
            raise Unsupported("it has no model.safetensors or no tokenizer.json")
        from tokenizers import Tokenizer
        self.tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=self.max_len)
        self.splitter = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))   # whole texts, for windows
        self.splitter.no_padding()
        self.splitter.no_truncation()
        self.w = read_safetensors(weights)
        self.dimension = int(cfg["hidden_size"])
        missing = [k for k in ("embeddings.word_embeddings.weight", f"encoder.layer.{self.layers - 1}.output.dense.weight")
                   if k not in self.w]
        if missing:
            raise Unsupported(f"weights lack {missing[0]}")
        self._qkv = [self._fused(i) for i in range(self.layers)]

    def _fused(self, i: int) -> tuple:
        """Layer i's query, key and value projections as one matrix: one product instead of three;
        the query's scaled by 1/√(head size) here, so the attention scores need no pass of their own."""
        import numpy as np
        p = f"encoder.layer.{i}.attention.self."
        scale = np.float32(1 / math.sqrt(self.dimension // self.heads))
        return (np.concatenate([self.w[p + "query.weight"] * scale, self.w[p + "key.weight"], self.w[p + "value.weight"]]).T,
                np.concatenate([self.w[p + "query.bias"] * scale, self.w[p + "key.bias"], self.w[p + "value.bias"]]))

    def offsets(self, text: str) -> list:
        """The (start, end) character span of every token of `text`: no special tokens, no limit."""
        return self.splitter.encode(text, add_special_tokens=False).offsets

    def encode_one(self, text: str) -> list:
        with _one_thread() or contextlib.nullcontext():
            return self.forward([self.tok.encode(text).ids])[0].tolist()

    def encode_many(self, texts: list, threads: int = 0) -> list:
        """[vector] for `texts`, longest first in batches of BATCH, one batch per thread, each thread's
        BLAS on one core."""
        if not texts:                     # no batches: no pool (ThreadPoolExecutor(0) raises)
            return []
        from concurrent.futures import ThreadPoolExecutor
        ids = [e.ids for e in self.tok.encode_batch(list(texts))]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        batches = [order[s:s + BATCH] for s in range(0, len(order), BATCH)]
        threads = max(1, threads or cpu_count())
        workers = min(threads, len(batches))
        limit = _one_thread() if workers > 1 or threads == 1 else None
        if limit is None:                 # BLAS's own threads, and ours only when it keeps to one
            limit, workers = contextlib.nullcontext(), 1
        out = [None] * len(ids)
        with limit:
            if workers == 1:
                done = [self.forward([ids[i] for i in b]) for b in batches]
            else:
                with ThreadPoolExecutor(workers) as pool:
                    done = list(pool.map(lambda b: self.forward([ids[i] for i in b]), batches))
        for batch, vecs in zip(batches, done):
            for i, vec in zip(batch, vecs.tolist()):
                out[i] = vec
        return out

    def forward(self, seqs: list):
        """Token ids of each text -> its pooled vector (an array, one row a text). The tokens of all
        texts are packed in one matrix for every product; attention is within each text."""
        import numpy as np
        w = self.w
        lens = [len(s) for s in seqs]
        ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in seqs])
        pos = np.concatenate([np.arange(n) for n in lens])
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][pos]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._ln(x.astype(np.float32), "embeddings.LayerNorm")
        starts = np.cumsum([0] + lens)
        d = self.dimension
        hd = d // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            qkv = x @ self._qkv[i][0]
            qkv += self._qkv[i][1]
            ctx = np.empty_like(x)
            for s, e in zip(starts[:-1], starts[1:]):
                q, k, v = np.ascontiguousarray(qkv[s:e].reshape(e - s, 3, self.heads, hd).transpose(1, 2, 0, 3))
                scores = q @ k.transpose(0, 2, 1)
                scores -= scores.max(-1, keepdims=True)
                np.exp(scores, out=scores)
                heads = scores @ v                      # the softmax's division after, on fewer numbers
                heads /= scores.sum(-1, keepdims=True)
                ctx[s:e] = heads.transpose(1, 0, 2).reshape(e - s, d)
            y = ctx @ w[p + "attention.output.dense.weight"].T
            y += w[p + "attention.output.dense.bias"]
            y += x
            x = self._ln(y, p + "attention.output.LayerNorm")
            y = self._feed_forward(x, p)
            y += x
            x = self._ln(y, p + "output.LayerNorm")
        if self.pooling == "cls":
            vecs = x[starts[:-1]].astype(np.float64)
        else:
            vecs = np.add.reduceat(x.astype(np.float64), starts[:-1], axis=0) / np.asarray(lens)[:, None]
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs /= np.where(norms == 0, 1.0, norms)
        return vecs

    def _feed_forward(self, x, p: str):
        """dense → GELU → dense, ROWS tokens at a time; the GELU GELU_ROWS at a time, in the CPU's cache."""
        import numpy as np
        wi, bi = self.w[p + "intermediate.dense.weight"].T, self.w[p + "intermediate.dense.bias"]
        wo, bo = self.w[p + "output.dense.weight"].T, self.w[p + "output.dense.bias"]
        out = np.empty_like(x)
        for s in range(0, len(x), ROWS):
            h = x[s:s + ROWS] @ wi
            for r in range(0, len(h), GELU_ROWS):
                part = h[r:r + GELU_ROWS]
                part += bi
                _gelu(part)
            np.matmul(h, wo, out=out[s:s + ROWS])
        out += bo
        return out

    def _ln(self, x, name):
        """Layer norm of `x` (an array of its own), in place."""
        import numpy as np
        x -= x.mean(-1, keepdims=True)
        var = np.square(x).mean(-1, keepdims=True)
        var += self.eps
        x /= np.sqrt(var, out=var)
        x *= self.w[name + ".weight"]
        x += self.w[name + ".bias"]
        return x


_BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_NUMPY_OURS = False          # numpy was first imported here, with BLAS on one thread


def _load_numpy() -> None:
    """Import numpy with its BLAS on one thread (a query's matrices are small, and on a busy machine
    BLAS threads wait on each other); the variables are put back at once, so no child inherits them."""
    global _NUMPY_OURS
    import sys
    if "numpy" in sys.modules:
        return
    saved = {k: os.environ.get(k) for k in _BLAS_VARS}
    os.environ.update({k: "1" for k in _BLAS_VARS})
    try:
        import numpy  # noqa: F401
        _NUMPY_OURS = True
    except ImportError:
        pass
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def _one_thread():
    """A context keeping BLAS to one thread: nothing to do when numpy was first imported here,
    threadpoolctl's limit when someone else loaded numpy; None when neither can."""
    if _NUMPY_OURS:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(1, "blas")
    except Exception:        # noqa: BLE001 — not installed, or a BLAS it does not know
        return None


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:       # not Linux
        return os.cpu_count() or 1


def read_pooling(folder: str) -> str:
    """mean or cls, from the folder's sentence-transformers files (none: mean, as they default)."""
    if not os.path.exists(os.path.join(folder, "modules.json")):
        return "mean"
    modules = _json(folder, "modules.json")
    kinds = tuple(m.get("type") for m in modules)
    if kinds not in (_MODULES, _MODULES[:2]):
        raise Unsupported(f"its modules.json asks for {', '.join(k.split('.')[-1] for k in kinds)}")
    pool = _json(os.path.join(folder, modules[1].get("path", "1_Pooling")), "config.json")
    modes = {k[len("pooling_mode_"):] for k, v in pool.items() if k.startswith("pooling_mode_") and v is True}
    known = {frozenset({"mean_tokens"}): "mean", frozenset({"cls_token"}): "cls"}
    if frozenset(modes) not in known:
        raise Unsupported(f"its pooling is {' + '.join(sorted(modes)) or 'none'} (recall runs mean or cls)")
    if pool.get("include_prompt") is False and modes == {"mean_tokens"}:
        raise Unsupported("its mean pooling leaves the prompt's tokens out")
    return known[frozenset(modes)]


def encoder_for(folder: str) -> BertEncoder:
    """The BertEncoder for a model folder, loaded once per process; a model it cannot run is
    refused in one sentence, never approximated."""
    with _LOCK:
        if folder not in _CACHE:
            _load_numpy()
            try:
                import numpy  # noqa: F401
                import tokenizers  # noqa: F401
            except ImportError:
                raise MissingExtra("local", "the local embedding model (numpy and tokenizers)") from None
            try:
                _CACHE[folder] = BertEncoder(folder)
            except (Unsupported, OSError, KeyError, ValueError, TypeError) as exc:
                raise RecallError(f"cannot run the local model in {folder}: {str(exc)[:200]}",
                                  "use a BERT model with mean or CLS pooling and a model.safetensors "
                                  "(README: local models), or leave embedding.model unset") from None
        return _CACHE[folder]
