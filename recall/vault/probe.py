"""The masker's probe: the offsets of a buffer where a piece of a form may
start, found by the forms' 5-byte grams. A set looks the grams up at C
speed; with numpy (the vec extra), once a stream is long enough to pay for
its import, a bitmap of their hashes lets only a few through to the set.
`shared`: the other way round, where a text's windows sit in the forms.
`Short`: the runs of 6+ characters of a value the child holds."""
from __future__ import annotations

import sys

__all__ = ["SHORT", "Probe", "Short", "grams", "shared"]

SHORT = 6          # a run this long of a value the child holds is masked (8 of any other value)
_REPEATS = frozenset(int.from_bytes(bytes([b]) * SHORT + bytes(8 - SHORT), sys.byteorder) for b in range(256))

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


def _zeroed(data: bytes, keep: int = 5) -> bytearray:
    """`data` as 8-byte words, bytes `keep`-7 of each zeroed: each word is
    the 5-byte gram (or 6-byte window) it starts with."""
    words = bytearray(data)
    words += bytes(-len(words) % 8)
    zeros = bytes(len(words) // 8)
    for byte in range(keep, 8):
        words[byte::8] = zeros
    return words


class Probe:
    """The forms' grams, and the offsets of a buffer that hold one."""

    def __init__(self, keys: set):
        self.keys = keys
        self.probed = 0        # bytes looked at: numpy's turn comes after NUMPY_AFTER
        self._numpy = None     # (numpy, bitmap, shift) once taken; () if not here

    def hits(self, flat: bytes, first: int = 0, step: int = 4) -> list:
        """Offsets (`first` and on by `step`: 0, 4; 2, 6; or all even) whose
        5-byte gram is a form's: a run of 8 or more covers [p, p + 5) for
        the first multiple of 4 from its start, a run of 6 for the first
        multiple of 2."""
        self.probed += len(flat)
        if self._numpy is None and (self.probed > NUMPY_AFTER or (   # loaded already: a
                "numpy" in sys.modules and len(flat) >= _NUMPY_READ)):   # big read pays its bitmap
            self._numpy = _numpy_probe(self.keys)
        if self._numpy:
            return self._numpy_hits(flat, first, step, *self._numpy)
        keys, hits = self.keys, []
        for offset in range(first, 8, step):
            words = memoryview(_zeroed(flat[offset:])).cast("Q")
            for block in range(0, len(words), _BLOCK):
                part = words[block:block + _BLOCK]
                if not keys.isdisjoint(part):
                    at = offset + 8 * block
                    hits += [at + 8 * i for i, gram in enumerate(part.tolist())
                             if gram in keys]
        hits.sort()
        return [h for h in hits if h + 5 <= len(flat)]

    def _numpy_hits(self, flat: bytes, first: int, step: int, np, bitmap, shift) -> list:
        """The same offsets: each gram's hash looks up the bitmap of the
        keys' hashes, and only the grams it lets through meet the set."""
        count = (len(flat) - first - 5) // step + 1
        if count <= 0:
            return []
        words = np.ndarray((count,), "<u8", flat + bytes(8), first, (step,)) & np.uint64(_GRAM)
        at = np.flatnonzero(bitmap[words * np.uint64(_MIX) >> shift])
        return [first + step * j for j, gram in zip(at.tolist(), words[at].tolist()) if gram in self.keys]


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


class Short:
    """The runs of SHORT characters or more of the values a child holds, as
    written (`cut -c1-6` of its token): each covers a form's 5-byte gram at
    an even offset, and is grown over the forms' 6-byte windows. Those at
    multiples of 4 the probe of every form (whose grams hold these) found
    already: only 2, 6, … are probed again."""

    def __init__(self, forms: list, public: set):
        """`forms`: (flat form, owner) of the forms as long as their values;
        `public`: flat texts (PEM armor, a URL's host) whose windows are no
        piece, nor is a run of one repeated character."""
        self.owners: dict = {}
        keys: set = set()
        for flat, owner in reversed(forms):    # a window of several forms: the first's owner
            self.owners.update(dict.fromkeys(_sixes(flat), owner))
            keys.update(*grams(flat, 1))
        for key in set().union(_REPEATS, *map(_sixes, public)):
            self.owners.pop(key, None)
        self.probe = Probe(keys)
        # a form of 8+ (table.PIECE) is in the table of every form, its grams in that table's probe
        self.tabled = all(len(flat) >= 8 for flat, _ in forms)

    def runs(self, flat: bytes, fours: list | None = None) -> list:
        """(start, end, (owner,), False) of every run in `flat`, by start;
        `fours`: the hits at multiples of 4 of a probe holding our grams."""
        owners, last, found, covered = self.owners, len(flat) - SHORT, [], 0
        if fours is None or not self.tabled:
            hits = self.probe.hits(flat, 0, 2)
        else:
            hits = sorted(fours + self.probe.hits(flat, 2, 4))
        for hit in hits:
            start = next((j for j in (hit - 1, hit) if covered <= j <= last
                          and _six(flat, j) in owners), None)
            if start is None:
                continue
            end = start
            while end < last and _six(flat, end + 1) in owners:
                end += 1
            found.append((start, end + SHORT, (owners[_six(flat, start)],), False))
            covered = end + 1
        return found


def _six(flat: bytes, at: int) -> int:
    """The 6-byte window at `at` as a word, its last 2 bytes zero (as `_sixes` makes them)."""
    return int.from_bytes(flat[at:at + SHORT] + bytes(8 - SHORT), sys.byteorder)


def _sixes(flat: bytes) -> set:
    """Every 6-byte window of `flat` as a word: eight views of zeroed words (C speed)."""
    found: set = set()
    for r in range(min(8, len(flat) - SHORT + 1)):
        count = (len(flat) - r - SHORT) // 8 + 1          # the windows that end inside flat
        found.update(memoryview(_zeroed(flat[r:], SHORT))[:8 * count].cast("Q"))
    return found
