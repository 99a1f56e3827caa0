"""The masker's probe: the offsets of a buffer where a piece of a form may
start, found by the forms' 5-byte grams. A set looks the grams up at C
speed; with numpy (the vec extra), once a stream is long enough to pay for
its import, a bitmap of their hashes lets only a few through to the set.
`shared`: the other way round, where a text's windows sit in the forms."""
from __future__ import annotations

import sys

__all__ = ["Probe", "grams", "shared"]

_BLOCK = 256       # grams a set probe; only a block with a hit is walked
NUMPY_AFTER = 8 << 20  # bytes probed before numpy's import (0.1 s) pays
_NUMPY_READ = 1 << 16  # ... or one read this long, numpy loaded (its bitmap costs ~1 ms)
_MIX = 0x9E3779B97F4A7C15  # odd: a gram times it, its top bits a hash
_GRAM = (1 << 40) - 1
_FIND_MAX = 32     # fewer windows than this: each found beats one probe pass
_SLICE = 1 << 22   # a corpus probed a slice at a time (a multiple of 4: the step)


def grams(flat: bytes, every: int) -> list:
    """The 5-byte grams of `flat` at offsets that are multiples of
    `every` (1 or 3), as zeroed words. A run of 16 holds a stream offset
    that is a multiple of 4 and a form offset that is one of 3 (they meet
    within 12): the forms masked from 16 need a third of their grams."""
    views = [memoryview(_zeroed(flat[r:])).cast("Q")
             for r in range(min(8, len(flat)))]
    if every == 1:
        return views
    return [view[r % 3::3] for r, view in enumerate(views)]  # 3 | r + 8i


def shared(corpus: bytes, flat: bytes) -> set:
    """Offsets in `corpus` (the forms) where an 8-byte window of `flat`
    starts. A few windows are each found; more make one pass: `flat`'s
    5-byte grams probe `corpus` at every 4th offset (an 8-byte window
    holds one), and each hit's windows meet `flat`'s."""
    found: set = set()
    if len(flat) - 8 < _FIND_MAX:
        for j in range(len(flat) - 7):
            i = corpus.find(flat[j:j + 8])
            while i != -1:
                found.add(i)
                i = corpus.find(flat[j:j + 8], i + 1)
        return found
    windows: set = set()
    windows.update(*(memoryview(flat[r:r + (len(flat) - r) // 8 * 8]).cast("Q") for r in range(8)))
    keys: set = set()
    keys.update(*grams(flat, 1))
    probe, last = Probe(keys), len(corpus) - 8
    for s in range(0, len(corpus), _SLICE):        # a slice at a time: the
        for at in probe.hits(corpus[s:s + _SLICE + 4]):   # words stay small
            found.update(j for j in range(max(0, at + s - 3), min(at + s, last) + 1)
                         if int.from_bytes(corpus[j:j + 8], sys.byteorder) in windows)
    return found


def _zeroed(data: bytes) -> bytearray:
    """`data` as 8-byte words, bytes 5-7 of each zeroed: each word is the
    5-byte gram it starts with."""
    words = bytearray(data)
    words += bytes(-len(words) % 8)
    zeros = bytes(len(words) // 8)
    words[5::8] = zeros
    words[6::8] = zeros
    words[7::8] = zeros
    return words


class Probe:
    """The forms' grams, and the offsets of a buffer that hold one."""

    def __init__(self, keys: set):
        self.keys = keys
        self.probed = 0        # bytes looked at: numpy's turn comes after NUMPY_AFTER
        self._numpy = None     # (numpy, bitmap, shift) once taken; () if not here

    def hits(self, flat: bytes) -> list:
        """Offsets (multiples of 4) whose 5-byte gram is a form's: a run of
        8 or more covers [p, p + 5) for the first multiple of 4 from its
        start."""
        self.probed += len(flat)
        if self._numpy is None and (self.probed > NUMPY_AFTER or (   # loaded already: a
                "numpy" in sys.modules and len(flat) >= _NUMPY_READ)):   # big read pays its bitmap
            self._numpy = _numpy_probe(self.keys)
        if self._numpy:
            return self._numpy_hits(flat, *self._numpy)
        keys, hits = self.keys, []
        for offset in (0, 4):
            words = memoryview(_zeroed(flat[offset:])).cast("Q")
            for block in range(0, len(words), _BLOCK):
                part = words[block:block + _BLOCK]
                if not keys.isdisjoint(part):
                    at = offset + 8 * block
                    hits += [at + 8 * i for i, gram in enumerate(part.tolist())
                             if gram in keys]
        hits.sort()
        return [h for h in hits if h + 5 <= len(flat)]

    def _numpy_hits(self, flat: bytes, np, bitmap, shift) -> list:
        """The same offsets: each gram's hash looks up the bitmap of the
        keys' hashes, and only the grams it lets through meet the set."""
        count = (len(flat) - 5) // 4 + 1
        if count <= 0:
            return []
        words = np.ndarray((count,), "<u8", flat + bytes(8), 0, (4,)) & np.uint64(_GRAM)
        at = np.flatnonzero(bitmap[words * np.uint64(_MIX) >> shift])
        return [4 * j for j, gram in zip(at.tolist(), words[at].tolist()) if gram in self.keys]


def _numpy_probe(keys: set):
    """(numpy, the keys' bitmap, the hash's shift) where numpy is
    installed on a little-endian machine; else ()."""
    from ..extras import installed
    if sys.byteorder != "little" or not installed("numpy"):
        return ()
    import numpy as np
    bits = min(26, max(20, len(keys).bit_length() + 7))  # under 1% let through
    shift = np.uint64(64 - bits)
    bitmap = np.zeros(1 << bits, bool)
    bitmap[np.fromiter(keys, np.uint64, len(keys)) * np.uint64(_MIX) >> shift] = True
    return np, bitmap, shift
