"""Benchmark: MaskStream throughput on a text-like stream with secrets sprinkled in, beside a plain copy."""
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


def make_secrets(rng: random.Random, count: int) -> dict[str, list[str]]:
    """Tokens, and passwords with URL/JSON-special characters so each has ~10 forms."""
    secrets = {}
    for i in range(count):
        chars = ALPHABET if i % 2 else ALPHABET + "!@#%&*+/=?"
        secrets[f"secret-{i}"] = ["".join(rng.choice(chars) for _ in range(rng.randrange(16, 48)))]
    return secrets


def make_stream(rng: random.Random, size: int, secrets: dict[str, list[str]]) -> bytes:
    """Log-like lines (words, numbers, paths, some base64) with a secret form every ~64 KiB."""
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
    masker = Masker(secrets)
    forms = sum(len(encodings(v.encode())) for vs in secrets.values() for v in vs)
    view = memoryview(data)
    sink: list[int] = []

    def copy() -> None:
        for i in range(0, len(data), CHUNK):
            sink.append(len(bytes(view[i:i + CHUNK])))

    out: list[bytes] = []

    def masked() -> None:
        stream = masker.stream()
        for i in range(0, len(data), CHUNK):
            out.append(stream.feed(view[i:i + CHUNK]))
        out.append(stream.flush())

    sample = data[:20_000_000]
    alternation = re.compile(b"|".join(re.escape(f) for f in masker._forms))

    def naive() -> None:
        alternation.sub(b"[recall]", sample)

    mb = len(data) / 1e6
    t_copy, t_mask, t_naive = timed(copy), timed(masked), timed(naive)
    result = b"".join(out)
    assert result.count(b"[recall:") > 0 and not any(f in result for f in masker._forms[:50])
    print(f"Python {sys.version.split()[0]}, {args.secrets} secrets, {forms} forms, "
          f"plan: {'gram stride ' + str(masker._stride) if masker._stride else 'find per form'}")
    print("| case | MB | seconds | MB/s |")
    print("|---|---:|---:|---:|")
    print(f"| plain copy, 64 KiB reads | {mb:.0f} | {t_copy:.2f} | {mb / t_copy:.0f} |")
    print(f"| MaskStream, 64 KiB reads | {mb:.0f} | {t_mask:.2f} | {mb / t_mask:.0f} |")
    print(f"| one `re` alternation of all forms (sample) | {len(sample) / 1e6:.0f} | "
          f"{t_naive:.2f} | {len(sample) / 1e6 / t_naive:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
