"""Benchmark: MaskStream throughput on a text-like stream with secrets (private keys and tokens)
sprinkled in, beside a plain copy."""
from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import sys
import time
from urllib.parse import quote

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from recall.vault.forms import encodings  # noqa: E402
from recall.vault.mask import Masker  # noqa: E402

CHUNK = 64 * 1024
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def make_pem(rng: random.Random) -> str:
    """A private key the size of an RSA-2048 one (1,190 DER bytes): armor and 64-column base64."""
    body = base64.b64encode(bytes(rng.randrange(256) for _ in range(1190))).decode()
    lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN RSA PRIVATE KEY-----\n{lines}\n-----END RSA PRIVATE KEY-----\n"


def make_secrets(rng: random.Random, count: int) -> dict[str, list[str]]:
    """Every fourth a private key; tokens, and passwords with URL/JSON-special characters so each
    has ~10 forms."""
    secrets = {}
    for i in range(count):
        chars = ALPHABET if i % 2 else ALPHABET + "!@#%&*+/=?"
        value = make_pem(rng) if i % 4 == 0 else "".join(rng.choice(chars) for _ in range(rng.randrange(16, 48)))
        secrets[f"secret-{i}"] = [value]
    return secrets


def make_stream(rng: random.Random, size: int, secrets: dict[str, list[str]]) -> bytes:
    """Log-like lines (words, numbers, paths, some base64) with a secret form every ~64 KiB: the
    value whole, or a piece of 8-40 of its characters, raw or encoded."""
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(2, 10)))
             for _ in range(4000)]
    lines = []
    for _ in range(20000):
        kind = rng.random()
        if kind < 0.1:
            line = base64.b64encode(os.urandom(rng.randrange(20, 60))).decode()
        elif kind < 0.2:
            line = f"/var/lib/{rng.choice(words)}/{rng.choice(words)}.log:{rng.randrange(1, 9999)}"
        else:
            line = " ".join(rng.choice(words) for _ in range(rng.randrange(4, 16)))
        lines.append(f"2024-05-{rng.randrange(1, 29):02d} INFO {line}\n")
    block = "".join(lines).encode()
    values = [v.encode() for vs in secrets.values() for v in vs]
    parts, total = [], 0
    while total < size:
        start = rng.randrange(len(block) - CHUNK)
        piece = block[start:start + rng.randrange(CHUNK // 2, CHUNK * 2)]
        value = rng.choice(values)
        if rng.random() < 0.3:                       # `cut`, `head -c`: a piece
            start = rng.randrange(len(value) - 8)
            value = value[start:start + rng.randrange(8, 41)]
        form = rng.choice([value, base64.b64encode(value), quote(value, safe="").encode(),
                           json.dumps(value.decode())[1:-1].encode()])
        parts += [piece, b" token=", form, b"\n"]
        total += len(piece) + len(form) + 8
    return b"".join(parts)[:size]


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=200, help="stream size in MB (default 200)")
    parser.add_argument("--secrets", type=int, default=20, help="number of secrets (default 20)")
    args = parser.parse_args(argv)
    rng = random.Random(42)
    secrets = make_secrets(rng, args.secrets)
    data = make_stream(rng, args.mb * 1_000_000, secrets)
    started = time.perf_counter()
    masker = Masker(secrets)
    masker.mask(b"x" * 4096)                     # builds its table
    t_build = time.perf_counter() - started
    forms = sum(len(encodings(v.encode())) for vs in secrets.values() for v in vs)
    view = memoryview(data)
    sink: list[int] = []

    def copy() -> None:
        for i in range(0, len(data), CHUNK):
            sink.append(len(bytes(view[i:i + CHUNK])))

    out: list[bytes] = []

    def masked(given=()) -> None:
        stream = masker.stream(given)
        for i in range(0, len(data), CHUNK):
            out.append(stream.feed(view[i:i + CHUNK]))
        out.append(stream.flush())

    sample = data[:20_000_000]
    alternation = re.compile(b"|".join(re.escape(v.encode()) for vs in secrets.values() for v in vs))

    def naive() -> None:
        alternation.sub(b"[recall]", sample)

    mb = len(data) / 1e6
    t_copy = timed(copy)
    from recall.vault import mask, probe
    rows, result = {}, None
    pem = next(sid for sid, vs in secrets.items() if "PRIVATE KEY" in vs[0])
    token = next(sid for sid, vs in secrets.items() if "PRIVATE KEY" not in vs[0])
    fast = probe._numpy_probe
    for core in (False, True):            # the core alone: no vec extra, its own masker and table
        if core:
            probe._numpy_probe = lambda keys: ()
        for given in ((), (pem,), (token,)):
            mask._BUILT.clear()           # a fresh process's masker: a probe that took numpy is not shared
            masker = Masker(secrets)
            masker.mask(b"x" * 4096)
            cpu, wall = time.process_time(), time.perf_counter()
            masked(given)
            rows[core, given] = (time.process_time() - cpu, time.perf_counter() - wall)
            if not given:
                assert result is None or b"".join(out) == result
                result = b"".join(out)
            out.clear()
    probe._numpy_probe = fast
    t_mask, cpu = rows[False, ()][1], rows[False, ()][0]
    t_naive = timed(naive)
    pems = sum("PRIVATE KEY" in vs[0] for vs in secrets.values())
    middles = [vs[0][len(vs[0]) // 2 - 4:len(vs[0]) // 2 + 4].encode() for vs in secrets.values()]
    assert result.count(b"[recall:") > 0 and not any(m in result for m in middles)
    print(f"Python {sys.version.split()[0]}, {args.secrets} secrets ({pems} private keys of "
          f"{len(make_pem(random.Random(0)))} characters, the rest tokens), {forms} forms; "
          f"the table of their 8-byte windows built in {t_build * 1000:.0f} ms")
    print("| case | MB | seconds | MB/s |")
    print("|---|---:|---:|---:|")
    print(f"| plain copy, 64 KiB reads | {mb:.0f} | {t_copy:.2f} | {mb / t_copy:.0f} |")
    print(f"| MaskStream, 64 KiB reads (wall) | {mb:.0f} | {t_mask:.2f} | {mb / t_mask:.0f} |")
    print(f"| MaskStream, 64 KiB reads (CPU) | {mb:.0f} | {cpu:.2f} | {mb / cpu:.0f} |")
    for core, given in rows:
        if core or given:
            what = ("a child given one private key (its 6+ masked too)" if given == (pem,) else
                    "a child given one token (its 6+ masked too)" if given else "the same")
            secs = rows[core, given][0]
            print(f"| {what}{', without numpy (the core alone, no vec extra)' if core else ''} (CPU) | "
                  f"{mb:.0f} | {secs:.2f} | {mb / secs:.0f} |")
    print(f"| one `re` alternation of the values, whole only (sample) | {len(sample) / 1e6:.0f} | "
          f"{t_naive:.2f} | {len(sample) / 1e6 / t_naive:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
