"""The light query encoder: a sentence-transformers BERT model run in numpy (no torch), for queries."""
from __future__ import annotations

import json
import math
import os
import struct
import threading

# What this encoder reproduces exactly; any other model folder is left to sentence-transformers.
_MODULES = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
            "sentence_transformers.models.Normalize")
_DTYPES = {"F32": "<f4", "F16": "<f2"}
_CACHE: dict = {}              # model folder -> BertEncoder (or None: not supported), per process
_LOCK = threading.Lock()


class Unsupported(Exception):
    """This model folder needs sentence-transformers (another architecture, pooling, dtype, …)."""


def _json(folder: str, name: str):
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        raise Unsupported(f"no readable {name}") from None


def read_safetensors(path: str) -> dict:
    """name -> numpy array over a read-only memory map of the file (the format: a little-endian
    u64 header length, a JSON header of dtype/shape/offsets, then the raw tensors)."""
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


def _erf(x):
    """erf to ~1e-7 (Abramowitz & Stegun 7.1.26 is 1.5e-7): numpy has none, and BERT's GELU is exact."""
    import numpy as np
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return s * y


class BertEncoder:
    """A BERT encoder + mean pooling + L2 normalisation, as the folder's modules.json describes."""

    def __init__(self, folder: str):
        modules = _json(folder, "modules.json")
        kinds = tuple(m.get("type") for m in modules)
        if kinds not in (_MODULES, _MODULES[:2]):
            raise Unsupported(f"modules {kinds}")
        self.normalize = len(kinds) == 3
        pool = _json(os.path.join(folder, modules[1].get("path", "1_Pooling")), "config.json")
        if not pool.get("pooling_mode_mean_tokens") or any(
                pool.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens",
                                      "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                                      "pooling_mode_lasttoken")):
            raise Unsupported("pooling other than the mean")
        cfg = _json(folder, "config.json")
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu" or \
                cfg.get("position_embedding_type", "absolute") != "absolute":
            raise Unsupported("not a plain BERT model")
        st = _json(folder, "sentence_bert_config.json") if os.path.exists(
            os.path.join(folder, "sentence_bert_config.json")) else {}
        self.max_len = int(st.get("max_seq_length") or cfg.get("max_position_embeddings", 512))
        self.heads, self.layers = int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        weights = os.path.join(folder, "model.safetensors")
        if not os.path.exists(weights) or not os.path.exists(os.path.join(folder, "tokenizer.json")):
            raise Unsupported("no model.safetensors or tokenizer.json")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise Unsupported("the tokenizers package is missing") from None
        self.tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=self.max_len)
        self.w = read_safetensors(weights)
        self.dimension = int(cfg["hidden_size"])
        missing = [k for k in ("embeddings.word_embeddings.weight", f"encoder.layer.{self.layers - 1}.output.dense.weight")
                   if k not in self.w]
        if missing:
            raise Unsupported(f"weights lack {missing[0]}")

    def _ln(self, x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / (var + self.eps) ** 0.5 * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def encode_one(self, text: str) -> list:
        with _one_thread():
            return self._encode(text)

    def _encode(self, text: str) -> list:
        import numpy as np
        enc = self.tok.encode(text)
        ids = np.asarray(enc.ids, dtype=np.int64)
        types = np.asarray(enc.type_ids, dtype=np.int64)
        w, n = self.w, len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = self._ln(x.astype(np.float32), "embeddings.LayerNorm")
        hd = self.dimension // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (self._dense(x, p + f"attention.self.{m}").reshape(n, self.heads, hd).transpose(1, 0, 2)
                       for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            ctx = (scores / scores.sum(-1, keepdims=True)) @ v
            x = self._ln(self._dense(ctx.transpose(1, 0, 2).reshape(n, self.dimension), p + "attention.output.dense")
                         + x, p + "attention.output.LayerNorm")
            h = self._dense(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
            x = self._ln(self._dense(h, p + "output.dense") + x, p + "output.LayerNorm")
        vec = x.astype(np.float64).mean(0)
        if self.normalize:
            vec /= np.linalg.norm(vec) or 1.0
        return vec.tolist()


_BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _numpy_one_thread():
    """Import numpy with its BLAS on one thread: a query's matrices are small, and on a busy
    machine BLAS threads waiting on each other made one query 10× slower. The variables are put
    back at once, so no child process inherits them; a numpy already loaded is left as it is."""
    import sys
    if "numpy" in sys.modules:
        return sys.modules["numpy"]
    saved = {k: os.environ.get(k) for k in _BLAS_VARS}
    os.environ.update({k: "1" for k in _BLAS_VARS})
    try:
        import numpy
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return numpy


def _one_thread():
    """A context limiting BLAS to one thread when numpy was loaded by someone else (threadpoolctl,
    a dependency of sentence-transformers), else a no-op."""
    import contextlib
    if _NUMPY_OURS:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(1, "blas")
    except Exception:        # noqa: BLE001 — only a speed-up
        return contextlib.nullcontext()


_NUMPY_OURS = False          # numpy was first imported here, with BLAS on one thread


def _load_numpy() -> None:
    global _NUMPY_OURS
    import sys
    if "numpy" not in sys.modules:
        try:
            _numpy_one_thread()
            _NUMPY_OURS = True
        except ImportError:
            pass


def encoder_for(folder: str):
    """The BertEncoder for a model folder, loaded once per process; None when this folder needs
    sentence-transformers or numpy / tokenizers are missing (the caller then uses the full model)."""
    with _LOCK:
        if folder not in _CACHE:
            _load_numpy()
            try:
                _CACHE[folder] = BertEncoder(folder)
            except (Unsupported, ImportError, OSError, KeyError, ValueError, TypeError):
                _CACHE[folder] = None
        return _CACHE[folder]


def encode_with(folder: str, texts: list):
    """[vector] for `texts`, or None when this folder or this run cannot (fail safe: the caller
    then encodes with sentence-transformers)."""
    encoder = encoder_for(folder)
    if encoder is None:
        return None
    try:
        return [encoder.encode_one(t) for t in texts]
    except Exception:        # noqa: BLE001 — any failure here only means "use the full model"
        return None
