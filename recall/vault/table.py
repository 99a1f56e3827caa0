"""The table of every 8-byte window of the secrets' forms, and the runs of them it finds in a text."""
from __future__ import annotations

import sys

from . import probe

PIECE = 8          # a run this long of a form is masked wherever it stands
LOOSE_PIECE = 16   # ... of a form 1.25x its value or more (base64, hex)
_ORDER = sys.byteorder
_REPEATS = frozenset(int.from_bytes(bytes([b]) * 8, _ORDER) for b in range(256))


def _windows(flat: bytes) -> list:
    """Every 8-byte window of `flat` as a native int, in eight views."""
    view, size = memoryview(flat), len(flat)
    return [view[r:r + (size - r) // 8 * 8].cast("Q")
            for r in range(min(8, size - 7))]


def _key(flat: bytes, at: int) -> int:
    return int.from_bytes(flat[at:at + 8], _ORDER)


class Table:
    """Every 8-byte window of the forms with its owners, the public ones, and the probe's keys: their 5-byte grams."""

    def __init__(self, masker, forms: dict):
        owned: dict[int, set] = {}
        strict, words, forced, grams = set(), set(), set(), set()
        public = set(_REPEATS)
        for flat in masker._public:
            public.update(*_windows(flat))
        self.short = []                # (flat form, owner, word): whole only
        self.longest: dict[int, int] = {}   # owner -> its longest form: a longer run holds it twice
        for flat, (owner, is_loose, word) in forms.items():
            self.longest[owner] = max(self.longest.get(owner, 0), len(flat))
            if len(flat) < (LOOSE_PIECE if is_loose else PIECE):
                self.short.append((flat, owner, word))
                continue
            windows = set()
            windows.update(*_windows(flat))
            owned.setdefault(owner, set()).update(windows)
            if not is_loose:           # a window no strict form has needs 16
                strict |= windows
            if word:
                words |= windows
            if windows <= public:      # a value of boilerplate alone still masks
                forced |= windows
            grams.update(*probe.grams(flat, 3 if is_loose else 1))
        self.owners: dict[int, tuple] = {}   # a window of several: the shorter value's first
        for owner in sorted(owned, key=lambda o: (masker._lengths.get(o, 0), o)):
            windows = owned.pop(owner)
            shared = [w for w in windows if w in self.owners]
            for w in shared:
                self.owners[w] += (owner,)
            self.owners.update(dict.fromkeys(windows.difference(shared), (owner,)))
        self.public, self.strict = public - forced, strict
        self.words, self.probe = words, probe.Probe(grams)

    def whole(self, flat: bytes) -> list:
        """Runs of the forms too short for pieces, matched whole."""
        return [(i, i + len(form), (owner,), word)
                for form, owner, word in self.short for i in _finds(flat, form)]

    def runs(self, flat: bytes, hits: list) -> list:
        """Runs found from the probe's `hits`; a hit inside a run already looked at is skipped."""
        found, covered = [], 0
        for at in hits:
            if at >= covered:
                run = self._run(flat, at)
                if run is not None:
                    covered = run[1]
                    if run[2]:
                        found.append(run)
        return found

    def several(self, run: tuple) -> bool:
        """Can the run hold more than one appearance (several values, or one longer than any of its forms)?"""
        return len(run[2]) > 1 or run[1] - run[0] > self.longest.get(run[2][0], 0)

    def cut(self, flat: bytes, run: tuple) -> list:
        """A run of several appearances (a value printed on two lines, two values one after the other),
        in parts: one where the forms' windows begin again after windows of none, or give way to another
        value's; each part masked with its own label, the line breaks between them kept. The parts cover
        the run, so no byte of it is shown."""
        start, end, _owners, word = run
        owners, public = self.owners, self.public
        parts: list = [[start, []]]
        common: set | None = None
        before = True                      # the window before j is a window of the forms
        for j in range(start, end - 7):
            key = _key(flat, j)
            got = owners.get(key)
            if got is not None and key not in public:
                if parts[-1][1] and (not before or common.isdisjoint(got)):
                    parts.append([j, []])
                    common = None
                common = set(got) if common is None else common & set(got)
                parts[-1][1].append(got)
            before = got is not None
        ends = [at for at, _ in parts[1:]] + [end]
        return [(at, stop, _owners_of(seen), word) for (at, seen), stop in zip(parts, ends)]

    def _run(self, flat: bytes, at: int):
        """(start, end, owners, word) of the union of form windows around
        the hit at `at`; no owners when it holds no secret window or is too
        short."""
        owners, last = self.owners, len(flat) - 8
        around = [j for j in range(max(0, at - 3), min(at, last) + 1)
                  if _key(flat, j) in owners]
        if not around:
            return None
        # walked from its start whichever hit found it: its owners in the
        # order they appear, whichever table (every form, or those shared)
        start = self._reach(flat, around[0], -1, [])
        seen = [_key(flat, start)]
        end = self._reach(flat, start, 1, seen)
        # Stepping 8 at a time lands in any 8 windows in a row: a secret
        # character of the run was seen, if there is one, but for one next
        # to PEM armor (public there): then every window decides.
        secret = [k for k in seen if k not in self.public]
        if not secret:
            secret = [k for k in (_key(flat, j) for j in range(start, end + 1))
                      if k in owners and k not in self.public]
        head = [_key(flat, j) for j in range(start, min(start + 9, end + 1))]
        if (secret and self.strict.isdisjoint(secret)         # 16 of a loose
                and not _chained(head, owners, 9)):           # form: 9 windows
            keys = [_key(flat, j) for j in range(start, end + 1)]  # all decide
            secret = [k for k in keys if k in owners and k not in self.public]
            if (self.strict.isdisjoint(secret)
                    and not _chained(keys, owners, LOOSE_PIECE - 7)):
                secret = []
        if not secret:
            return start, end + 8, (), False
        word = all(k in self.words for k in secret)
        return start, end + 8, _owners_of([owners[k] for k in secret]), word

    def _reach(self, flat: bytes, at: int, step: int, seen: list) -> int:
        """The start of the last window, going `step` (-1 or 1) from the
        window at `at`, that keeps the run unbroken (windows overlap or
        touch); the windows passed are added to `seen`."""
        owners, last = self.owners, len(flat) - 8
        while True:            # windows 8 apart, touching: a C-speed view
            count = (at if step < 0 else last - at) // 8
            if step < 0:
                keys = memoryview(flat)[at - 8 * count:at].cast("Q")[::-1]
            else:
                keys = memoryview(flat)[at + 8:at + 8 + 8 * count].cast("Q")
            for key in keys:
                if key not in owners:
                    break
                seen.append(key)
                at += 8 * step
            near = (range(at - 7, at) if step < 0      # the furthest first
                    else range(min(at + 7, last), at, -1))
            nxt = next((j for j in near if j >= 0 and _key(flat, j) in owners),
                       None)
            if nxt is None:
                return at
            seen.append(_key(flat, nxt))
            at = nxt


def _chained(keys: list, owners: dict, count: int) -> bool:
    """`count` keys in a row are windows of forms."""
    row = 0
    for key in keys:
        row = row + 1 if key in owners else 0
        if row == count:
            return True
    return False


def _owners_of(tuples: list) -> tuple:
    """One owner when every window has it (the one of the shorter value first), else each in turn."""
    common = set(tuples[0]).intersection(*tuples[1:])
    if common:
        return (next(o for o in tuples[0] if o in common),)
    return tuple(dict.fromkeys(t[0] for t in tuples))


def _finds(flat: bytes, form: bytes) -> list:
    """Every offset of `form` in `flat`."""
    out, i = [], flat.find(form)
    while i != -1:
        out.append(i)
        i = flat.find(form, i + 1)
    return out
