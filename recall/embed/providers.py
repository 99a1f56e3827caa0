"""Embedding providers: what a vector means (fingerprints), Voyage over urllib with retries, the local model."""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import astuple, dataclass

from ..errors import RecallError

# the ledger's calls and the local model's names, here too for embed's callers (index, search, vault, doctor)
from .ledger import estimate_tokens, ledger_totals, ledgered, paid_call  # noqa: F401
from .local_model import (
    LOCAL_DEFAULT_MODEL,  # noqa: F401 (for embed's callers)
    LOCAL_DIMENSIONS,
    WINDOW_STRIDE,
    WINDOW_TOKENS,
    LocalProvider,
    model_name,
    recipe,
)

DOC_FORMAT = "v1"                     # [breadcrumb + blank line +] body; part of every fingerprint
LOCAL_DOC_FORMAT = f"v1 windows {WINDOW_TOKENS}/{WINDOW_STRIDE}"
VOYAGE_DEFAULT_MODEL = "voyage-4"
VOYAGE_URL = "https://api.voyageai.com/v1"
# model: (default dimension, tokens allowed in one request)
VOYAGE_MODELS = {"voyage-4": (1024, 320_000), "voyage-4-lite": (1024, 1_000_000),
                 "voyage-4-large": (1024, 120_000), "voyage-3.5": (1024, 320_000),
                 "voyage-3.5-lite": (1024, 1_000_000), "voyage-3-large": (1024, 120_000),
                 "voyage-code-3": (1024, 120_000)}
MAX_BATCH_ITEMS = 1000                # Voyage's limit on texts per request
MAX_TEXT_CHARS = 24_000               # explicit client-side truncation (~6k tokens; chunks are ~2k chars)
REQUEST_TIMEOUT_S = 30.0


def document_text(breadcrumb: str, body: str) -> str:
    """What is embedded for a chunk: its breadcrumb (index.embedded_breadcrumb), a blank line, its
    text, cut at MAX_TEXT_CHARS."""
    text = f"{breadcrumb}\n\n{body}" if breadcrumb else body
    return text[:MAX_TEXT_CHARS]


# -- fingerprints ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fingerprint:
    provider: str
    model: str
    dimension: int               # 0: the model's own
    input_type: str              # document | query
    form: str = DOC_FORMAT       # how a chunk becomes the texts embedded

    @property
    def key(self) -> str:
        return f"{self.provider}|{self.model}|{self.dimension}|{self.input_type}|{self.form}"


def fingerprint(emb, input_type: str) -> Fingerprint:
    """What a vector from this config means — computed without importing any provider."""
    if emb.provider == "voyage":
        model = emb.model or VOYAGE_DEFAULT_MODEL
        return Fingerprint("voyage", model, emb.dimension or VOYAGE_MODELS.get(model, (0, 0))[0], input_type)
    if emb.provider == "local":
        model = model_name(emb)
        form = LOCAL_DOC_FORMAT if input_type == "document" else DOC_FORMAT
        how = recipe(emb).form(input_type)
        return Fingerprint("local", model, emb.dimension or LOCAL_DIMENSIONS.get(model, 0), input_type,
                           f"{form} {how}" if how else form)
    raise RecallError("no embedding provider is configured",
                      "set embedding.provider to voyage or local in the config")


def model_id(con, fp: Fingerprint, create: bool = True):
    row = con.execute("SELECT id FROM embed_models WHERE fingerprint=?", (fp.key,)).fetchone()
    if row is not None or not create:
        return row[0] if row else None
    con.execute("INSERT OR IGNORE INTO embed_models(fingerprint, provider, model, dimension, input_type) "
                "VALUES (?,?,?,?,?)", (fp.key, fp.provider, fp.model, fp.dimension, fp.input_type))
    return con.execute("SELECT id FROM embed_models WHERE fingerprint=?", (fp.key,)).fetchone()[0]


# -- errors and retries ---------------------------------------------------------------------------

class ProviderError(RecallError):
    """A request that failed for good. `billed`: tokens the provider reported for it (a malformed
    answer is still billed); `uncertain`: it may have reached the provider and been billed."""

    def __init__(self, message, hint=None, *, billed=None, uncertain=False):
        super().__init__(message, hint)
        self.billed, self.uncertain = billed, uncertain


class _Failure(Exception):
    """One attempt failed: `status` (0 for no HTTP answer), `retry_after` seconds, `sent`: may be billed."""

    def __init__(self, status: int, detail: str, retry_after=None, sent=False):
        super().__init__(detail)
        self.status, self.detail, self.retry_after, self.sent = status, detail, retry_after, sent


def _retry_after(value):
    if value in (None, ""):
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


@dataclass
class Retry:
    attempts: int = 6            # tries in all, the first included
    base: float = 0.5            # first backoff's ceiling, doubled each time; a wait is ½–1× it
    cap: float = 20.0            # longest single wait
    budget: float = 120.0        # longest time spent on one request, waits included
    sleep: object = time.sleep

    def run(self, call, what: str):
        started, tries = time.monotonic(), 0
        while True:
            tries += 1
            try:
                return call()
            except _Failure as f:
                if f.status in (401, 403):
                    raise ProviderError(f"Voyage rejected the API key (HTTP {f.status})",
                                        "set VOYAGE_API_KEY (or the vault secret named by "
                                        "embedding.api_key_secret) to a valid key") from None
                transient = f.status == 0 or f.status == 429 or f.status >= 500
                if not transient:
                    raise ProviderError(f"Voyage refused {what} (HTTP {f.status}): {f.detail[:200]}",
                                        "check embedding.model and embedding.dimension") from None
                ceiling = min(self.cap, self.base * 2 ** (tries - 1))
                wait = random.uniform(ceiling / 2, ceiling)     # "equal jitter": grows, never in lockstep
                if f.retry_after is not None:
                    wait = max(wait, f.retry_after)
                spent = time.monotonic() - started
                if tries >= self.attempts or spent + wait > self.budget:
                    why = "kept rate-limiting (HTTP 429)" if f.status == 429 else (
                        f"kept failing (HTTP {f.status})" if f.status else f"could not be reached: {f.detail}")
                    raise ProviderError(f"Voyage {why} for {what}; gave up after {tries} tries in {spent:.0f}s",
                                        "nothing was stored for that batch; run 'recall index' again "
                                        "to resume where it stopped", uncertain=f.sent) from None
                self.sleep(wait)


DEFAULT_RETRY = Retry()
QUERY_RETRY = Retry(attempts=3, base=0.3, cap=2.0, budget=8.0)     # a search waits seconds, not minutes


# -- Voyage over HTTP -------------------------------------------------------------------------------

def voyage_base_url(emb) -> str:
    return (emb.base_url or os.environ.get("RECALL_VOYAGE_BASE_URL") or VOYAGE_URL).rstrip("/")


class UrllibTransport:
    """The Voyage HTTP API with the standard library only."""

    def __init__(self, key: str, base_url: str, timeout: float = REQUEST_TIMEOUT_S):
        self.key, self.base_url, self.timeout = key, base_url, timeout

    def _post(self, path: str, body: dict) -> dict:
        import urllib.error
        import urllib.request
        req = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {self.key}",
                                              "Content-Type": "application/json",
                                              "User-Agent": "recall (urllib)"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            raise _Failure(exc.code, detail, _retry_after(exc.headers.get("Retry-After"))) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            refused = isinstance(reason, ConnectionRefusedError)
            raise _Failure(0, "connection refused" if refused else str(reason), sent=not refused) from None
        try:
            return json.loads(raw)
        except ValueError:
            raise ProviderError("Voyage answered with something that is not JSON", uncertain=True) from None

    def embed(self, texts, model, input_type, dimension):
        data = self._post("/embeddings", {"input": texts, "model": model, "input_type": input_type,
                                          "truncation": True, "output_dtype": None,
                                          "output_dimension": dimension or None, "encoding_format": "base64"})
        try:
            vectors = [_decode(d["embedding"]) for d in sorted(data["data"], key=lambda d: d["index"])]
            return vectors, int(data["usage"]["total_tokens"])
        except (KeyError, TypeError, ValueError):
            raise ProviderError("Voyage's answer lacks data or usage", billed=_usage(data), uncertain=True) from None

    def rerank(self, query, documents, model, top_k):
        data = self._post("/rerank", {"query": query, "documents": documents, "model": model,
                                      "top_k": top_k, "truncation": True})
        try:
            return [(int(d["index"]), float(d["relevance_score"])) for d in data["data"]], \
                int(data["usage"]["total_tokens"])
        except (KeyError, TypeError, ValueError):
            raise ProviderError("Voyage's rerank answer lacks data or usage", billed=_usage(data)) from None


def _usage(data):
    try:
        return int(data["usage"]["total_tokens"])
    except (KeyError, TypeError, ValueError):
        return None


def _decode(value) -> list:
    if isinstance(value, str):            # base64 float32, little-endian
        import base64

        from .vectors import unpack
        return unpack(base64.b64decode(value))
    return [float(x) for x in value]


def voyage_key(cfg, con=None, load_values=None) -> str:
    """VOYAGE_API_KEY, else the vault secret embedding.api_key_secret names (`load_values` is the
    vault's, passed in by the faces)."""
    key = os.environ.get("VOYAGE_API_KEY", "").strip()
    if key:
        return key
    sid = cfg.embedding.api_key_secret
    if sid and con is not None and load_values is not None:
        vault = load_values(con, cfg, [sid])
        values = vault.get(sid)
        if not values:
            raise RecallError(f"embedding.api_key_secret names '{sid}', which is not in the vault",
                              "run 'recall secret sync', or set VOYAGE_API_KEY")
        _for_its_host(sid, vault.urls.get(sid, ""), voyage_base_url(cfg.embedding))
        return values.get("") or next(iter(values.values()))
    raise RecallError("no Voyage API key", "set VOYAGE_API_KEY, or name a vault secret in "
                      "embedding.api_key_secret, or use embedding.provider: local")


def _for_its_host(sid: str, url: str, base_url: str) -> None:
    """A vault secret with a url: line goes to that host only, over https (a base_url pointed elsewhere,
    or at plain http, would hand the key to whoever answers there)."""
    from urllib.parse import urlsplit
    if not url:
        return
    own, to = urlsplit(url if "//" in url else "https://" + url), urlsplit(base_url)
    if (to.hostname or "").lower() != (own.hostname or "").lower() or to.scheme != "https":
        raise RecallError(f"embedding.api_key_secret '{sid}' is for {own.hostname} (its url: line), and the "
                          f"embeddings would go to {base_url}: recall sends a vault value to its own host only, "
                          "over https", f"point embedding.base_url at https://{own.hostname}, or change the "
                          "secret's url: line if the key is meant for that host")


class VoyageProvider:
    name, paid = "voyage", True

    def __init__(self, emb, key: str, transport=None, retry: Retry | None = None):
        self.model = emb.model or VOYAGE_DEFAULT_MODEL
        self.dimension = emb.dimension or VOYAGE_MODELS.get(self.model, (0, 0))[0]
        self.request_tokens = VOYAGE_MODELS.get(self.model, (0, 120_000))[1]
        self.batch_items = max(1, min(emb.batch_size, MAX_BATCH_ITEMS))
        self.rerank_model = emb.rerank_model
        self.retry = retry or DEFAULT_RETRY
        self.transport = transport or UrllibTransport(key, voyage_base_url(emb))
        self.label = f"voyage/{self.model}"

    def embed(self, texts: list, input_type: str):
        retry = self.retry if input_type == "document" else QUERY_RETRY
        vectors, tokens = retry.run(lambda: self.transport.embed(texts, self.model, input_type, self.dimension),
                                    f"{len(texts)} texts" if len(texts) > 1 else f"the {input_type}")
        if len(vectors) != len(texts):
            raise ProviderError(f"Voyage returned {len(vectors)} vectors for {len(texts)} texts",
                                "nothing was stored for that batch; run 'recall index' again", billed=tokens)
        dims = {len(v) for v in vectors}
        if len(dims) > 1 or (self.dimension and dims != {self.dimension}):
            raise ProviderError(f"Voyage returned vectors of dimension {sorted(dims)}, expected "
                                f"{self.dimension or 'one size'}", "check embedding.dimension", billed=tokens)
        return vectors, tokens

    def rerank(self, query: str, documents: list, top_k: int):
        return QUERY_RETRY.run(lambda: self.transport.rerank(query, documents, self.rerank_model, top_k),
                               "the rerank request")


_PROVIDERS: dict = {}      # one per config per process: the MCP server keeps a loaded model alive


def _cache_key(kind: str, emb) -> tuple:
    """Every embedding setting and what the environment adds: a reloaded config that changes any
    one of them (the rerank model too) gets a new provider."""
    return (kind, astuple(emb), voyage_base_url(emb), os.environ.get("VOYAGE_API_KEY", ""))


def provider_for(cfg, con=None, load_values=None):
    """The configured provider, one per config per process (`con` and `load_values`: for a Voyage
    key kept in the vault)."""
    emb = cfg.embedding
    fingerprint(emb, "document")            # says so when no provider is configured
    key = _cache_key("embed", emb)
    if key not in _PROVIDERS:
        _PROVIDERS[key] = (VoyageProvider(emb, voyage_key(cfg, con, load_values)) if emb.provider == "voyage"
                           else LocalProvider(emb))
    return _PROVIDERS[key]


def reranker_for(cfg, con=None, load_values=None):
    """Voyage's reranker, whatever provider embeds: it needs a Voyage key either way."""
    emb = cfg.embedding
    if emb.provider == "voyage":
        return provider_for(cfg, con, load_values)
    key = _cache_key("rerank", emb)
    if key not in _PROVIDERS:
        _PROVIDERS[key] = VoyageProvider(emb, voyage_key(cfg, con, load_values))
    return _PROVIDERS[key]
