"""A tiny BERT the tests build themselves: random weights (a fixed seed), CLS pooling, a query and
a document prefix, written as sentence-transformers lays a model out (safetensors + tokenizer)."""
import json
import struct
from pathlib import Path

WORDS = ("the a of to and in on for with was is disk full server backup restore database replica "
         "certificate expired load balancer pager alert night deploy rollback queue lag kafka node "
         "cluster search query document find why how did what when broke fixed log error").split()
PROMPTS = {"query": "search query: ", "document": "search document: "}
HIDDEN, LAYERS, HEADS, INNER, POSITIONS, MAX_LEN = 32, 2, 4, 64, 64, 48
REFERENCE = Path(__file__).parent / "data" / "tiny_bert_reference.json"
# what the references were computed on: queries with the query prefix, the rest as documents
QUERIES = ["why did the disk fill up", "kafka consumer lag", "", "ÜNÏCODE café 東京",
           "how did we fix the expired certificate on the load balancer " * 3]
DOCUMENTS = ["The backup server restored the replica database.", "pager alert at night: node full",
             "deploy rollback fixed the queue lag", "x"]


def _vocab() -> list:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789")
    pieces = [f"##{c}" for c in letters] + ["##s", "##ed", "##ing"]
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ":", ".", ",", "?"] + WORDS + letters + pieces


def _weights(vocab_size: int) -> dict:
    """name -> float32 array, by BertModel's names, from numpy's legacy generator (its stream is
    the same in every numpy version)."""
    import numpy as np
    rng = np.random.RandomState(20261205)
    out = {}

    def put(name, *shape, base=0.0, scale=0.4):
        out[name] = (base + scale * rng.standard_normal(shape)).astype("<f4")
    put("embeddings.word_embeddings.weight", vocab_size, HIDDEN)
    put("embeddings.position_embeddings.weight", POSITIONS, HIDDEN)
    put("embeddings.token_type_embeddings.weight", 2, HIDDEN)
    for p in ["embeddings.LayerNorm"] + [f"encoder.layer.{i}.{n}.LayerNorm" for i in range(LAYERS)
                                         for n in ("attention.output", "output")]:
        put(f"{p}.weight", HIDDEN, base=1.0, scale=0.1)
        put(f"{p}.bias", HIDDEN, scale=0.1)
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name, rows, cols in (("attention.self.query", HIDDEN, HIDDEN), ("attention.self.key", HIDDEN, HIDDEN),
                                 ("attention.self.value", HIDDEN, HIDDEN), ("attention.output.dense", HIDDEN, HIDDEN),
                                 ("intermediate.dense", INNER, HIDDEN), ("output.dense", HIDDEN, INNER)):
            put(p + name + ".weight", rows, cols, scale=0.3)
            put(p + name + ".bias", rows, scale=0.1)
    put("pooler.dense.weight", HIDDEN, HIDDEN, scale=0.3)
    put("pooler.dense.bias", HIDDEN, scale=0.1)
    return out


def _safetensors(path: Path, tensors: dict) -> None:
    """The format: a little-endian u64 header length, a JSON header, the raw tensors."""
    header, blobs, at = {}, [], 0
    for name, arr in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def _tokenizer(vocab: list):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    return tok


def build(folder: Path, prompts: dict = PROMPTS) -> Path:
    """The model folder: config, sentence-transformers' modules (CLS pooling, normalised),
    `prompts` as its query and document prefixes, tokenizer, weights."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = _vocab()
    files = {
        "config.json": {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": HIDDEN,
                        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": INNER,
                        "hidden_act": "gelu", "max_position_embeddings": POSITIONS, "type_vocab_size": 2,
                        "vocab_size": len(vocab), "layer_norm_eps": 1e-12, "pad_token_id": 0,
                        "position_embedding_type": "absolute"},
        "modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                         {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                         {"idx": 2, "name": "2", "path": "2_Normalize",
                          "type": "sentence_transformers.models.Normalize"}],
        "1_Pooling/config.json": {"word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": True,
                                  "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
                                  "pooling_mode_mean_sqrt_len_tokens": False},
        "sentence_bert_config.json": {"max_seq_length": MAX_LEN, "do_lower_case": False},
        "config_sentence_transformers.json": {"prompts": prompts, "default_prompt_name": None},
        "tokenizer_config.json": {"tokenizer_class": "BertTokenizer", "do_lower_case": True,
                                  "model_max_length": MAX_LEN, "unk_token": "[UNK]", "sep_token": "[SEP]",
                                  "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"},
        "special_tokens_map.json": {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                                    "cls_token": "[CLS]", "mask_token": "[MASK]"},
    }
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(data, indent=1))
    (folder / "2_Normalize").mkdir(exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    _tokenizer(vocab).save(str(folder / "tokenizer.json"))
    _safetensors(folder / "model.safetensors", _weights(len(vocab)))
    return folder
