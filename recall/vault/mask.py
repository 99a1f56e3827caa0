"""The masker: any run of 8+ characters of a secret value or of one of its forms (vault/forms.py),
6+ of a value the child holds (probe.Short), masked as `[recall:ID]` across reads, pauses, breaks."""
from __future__ import annotations

import _thread
import re
from bisect import bisect_right
from itertools import accumulate

from ..errors import RecallError
from . import probe
from .forms import MIN_SECRET_LEN, WORD_BYTES, boilerplate, encodings
from .table import LOOSE_PIECE, PIECE, Table

__all__ = ["MIN_SECRET_LEN", "PIECE", "Masker", "MaskStream", "check_maskable"]

HOLD = LOOSE_PIECE - 1  # always held back: decides every run begun before
_EOF_PREFIX = 4    # at EOF a held prefix of a given value this long goes
_BREAKS = b"\r\n"  # no characters of a run: wrapped base64 is one run
_LOWER = bytes(range(256)).lower()
_SMALL = 128       # a buffer this short: the forms sharing a window only
SHARED_LOOKS = 8   # answers read by the forms they share (a pass over every form each)
                   # before the table of every form (10-100 passes' cost) is built
_LOOK_FORMS = 8 << 20  # forms this long: a stream's first buffers are read so too
_SHARED_MAX = 1 << 20  # an answer longer than this builds the table: its own grams would cost more
# PEM armor as _flat leaves it, its spaces as written, percent-encoded (%0A-----END%20…) or escaped
_ARMOR = re.compile(rb"-----(?:begin|end)(?:(?: |\+|%20|\\ )[a-z0-9]+)+-----")
# the last worked-out forms, by the values they are of: the redactor's masker and the door's (one
# vault, one process) share them, and the table of every form; another vault's values replace them
_BUILT: dict = {}


def check_maskable(secret_id: str, value: str) -> None:
    """Refuse a value too short to mask without blanking ordinary output."""
    if len(value) < MIN_SECRET_LEN:
        raise RecallError(
            f"secret '{secret_id}' is too short to mask safely ({len(value)} characters)",
            f"values under {MIN_SECRET_LEN} characters cannot be used with exec; "
            "store a longer value, or read it at a real terminal with `recall secret get`")


def _flat(data: bytes) -> bytes:
    """What runs are matched on: ASCII lower-cased (`tr a-z A-Z`, upper hex), line breaks dropped."""
    return data.translate(_LOWER, _BREAKS)


class Masker:
    """Every form of every secret, and the table that finds their pieces."""

    def __init__(self, secrets: dict[str, list[str]], notes: bool = False):
        """`notes` (note text): a run of the value as written is masked only as a whole token (`admin`
        in `db-admin` stays), and the forms are worked out now (a watcher's warm-up); else on first use."""
        self._labels = [b"[recall:" + sid.encode("utf-8") + b"]" for sid in secrets]
        self._index = {secret_id: i for i, secret_id in enumerate(secrets)}
        self._forms: dict[bytes, tuple] = {}  # flat -> (owner, loose, word)
        self._public: set[bytes] = set()
        self._lengths: dict[int, int] = {}  # owner -> shortest value: ties
        self._values = [(owner, value.encode("utf-8")) for owner, values in enumerate(secrets.values())
                        for value in values]
        self._any = any(raw for _, raw in self._values)
        self._lock = _thread.allocate_lock()  # one build, whichever thread asks first
        self._notes, self._looks = notes, 0
        self._table: Table | None = None
        self._corpus: tuple | None = None
        self._built: dict = {}        # the forms, corpus and whole table, shared (_BUILT)
        self._shorts: dict = {}       # owners a child holds -> probe.Short (stdout, stderr, each run)
        if notes:
            self._corpus_of()

    def _ready(self) -> dict:
        """The forms, worked out on first use (`exec ID -- true` prints nothing and needs none)."""
        if self._values is not None:
            with self._lock:
                if self._values is not None:
                    key = tuple(self._values)
                    built = _BUILT.get(key)
                    if built is None:
                        for owner, raw in self._values:
                            self._add(owner, raw)
                        built = {"forms": (self._forms, self._public, self._lengths)}
                        _BUILT.clear()            # one vault's at a time (dict ops are atomic)
                        _BUILT[key] = built
                    self._forms, self._public, self._lengths = built["forms"]
                    self._built, self._values = built, None
        return self._forms

    def _add(self, owner: int, raw: bytes) -> None:
        """The forms of one value, and the public text it holds."""
        for form, row in encodings(raw).items():
            flat = _flat(form)
            loose = 4 * len(form) >= 5 * len(raw)
            old = self._forms.get(flat, (owner, True, False))
            self._forms[flat] = (old[0], old[1] and loose, old[2] or row == "raw")
            # a window across a PEM armor line holding 4 or fewer characters of the
            # body is no piece: the last character before "-----END" is one in 40
            self._public |= {flat[max(0, m.start() - 4):m.end() + 4] for m in _ARMOR.finditer(flat)}
        if len(raw) >= MIN_SECRET_LEN:
            shortest = self._lengths.get(owner, len(raw))
            self._lengths[owner] = min(len(raw), shortest)
        for part in boilerplate(raw):
            self._public |= {_flat(f) for f in encodings(part)}

    @property
    def hold(self) -> int:
        """Bytes (not line breaks) a stream always holds back: 0 when there is nothing to mask."""
        return HOLD if self._any else 0

    def mask(self, data: bytes) -> bytes:
        """`data` masked whole."""
        return self.mask_many([data])[0]

    def mask_many(self, datas: list) -> list:
        """Each of `datas` masked whole (the texts of one answer): up to 1 MB of them read by one table,
        one look at the forms for them all (a stream builds the table of every form at once)."""
        if not self._any:
            return [bytes(d) for d in datas]
        out, group, size = [], [], 0
        for data in [*datas, None]:
            if group and (data is None or size + 1 + len(data) > _SHARED_MAX):
                table = self._table_for(b"\n".join(_flat(d) for d in group), answer=True)
                for one in group:
                    stream = MaskStream(self, set(), table)
                    out.append(stream.feed(one) + stream.flush())
                group, size = [], 0
            if data is not None:          # joined by a line break each
                size += bool(group) + len(data)
                group.append(data)
        return out

    def stream(self, given=()) -> MaskStream:
        """A masker for one stream fed in pieces; `given`: ids of the secrets the child holds (see release)."""
        wanted = {self._index[g] for g in given if g in self._index}
        return MaskStream(self, wanted)

    def given_forms(self, wanted: set) -> list:
        """(flat form, owner) of every form of the secrets `wanted`."""
        return [(flat, spec[0]) for flat, spec in self._ready().items() if spec[0] in wanted]

    def short_of(self, wanted: set) -> probe.Short:
        """The runs of 6+ of the values `wanted` (a child holds them), made once for them."""
        key = frozenset(wanted)
        if key not in self._shorts:      # the forms as long as their values (no base64, hex)
            forms = [(flat, spec[0]) for flat, spec in self._ready().items() if spec[0] in key and not spec[1]]
            self._shorts[key] = probe.Short(forms, self._public)
        return self._shorts[key]

    def _runs(self, flat: bytes, table: Table | None = None, short=None) -> list:
        """(start, end, owners, word) of every run to mask in `flat`, by
        start, overlaps merged; `table`: one made for it (else its own);
        `short`: the runs of 6 of the values a child holds (probe.Short)."""
        table = table or self._table_for(flat)
        hits = table.probe.hits(flat)
        found = table.runs(flat, hits)
        if not self._notes:                # a child's output: values one after another, each masked
            found = [part for run in found for part in (table.cut(flat, run) if table.several(run) else [run])]
        found += table.whole(flat)
        if short is not None:              # every form's grams: its hits are ours too
            found += short.runs(flat, hits if table is self._table else None)
        return _merged(found)

    def _table_for(self, flat: bytes, answer: bool = False) -> Table:
        """The table of every form; for a short buffer (`exec ID -- true`: none) or one of the first
        answers, one of the forms that share a window with `flat`. A vault of 1 MB has millions of
        windows (seconds, a GB): a child's first output is read so too."""
        if self._table is not None:
            return self._table
        self._ready()
        looks = answer or len(self._corpus_of()[0]) >= _LOOK_FORMS
        if len(flat) <= _SMALL or (looks and self._looks < SHARED_LOOKS and len(flat) <= _SHARED_MAX):
            self._looks += len(flat) > _SMALL
            return Table(self, self._forms_sharing(flat))
        self._table = self._built.get("table") or self._built.setdefault("table", Table(self, self._forms))
        return self._table

    def _corpus_of(self) -> tuple:
        """(every flat form, joined by line breaks, which no window holds;
        where each starts; the forms with their specs)."""
        if self._corpus is None:
            forms = list(self._ready().items())
            if "corpus" not in self._built:
                starts = list(accumulate((len(f) + 1 for f, _ in forms), initial=0))
                self._built["corpus"] = (b"\n".join(f for f, _ in forms), starts, forms)
            self._corpus = self._built["corpus"]
        return self._corpus

    def _forms_sharing(self, flat: bytes) -> dict:
        """The forms that hold some 8-byte window of `flat`, and those matched whole: a table of these
        finds in `flat` what the whole table would."""
        corpus, starts, forms = self._corpus_of()
        found = {bisect_right(starts, i) - 1 for i in probe.shared(corpus, flat)}
        return {f: spec for k, (f, spec) in enumerate(forms)
                if k in found or len(f) < LOOSE_PIECE}


def _merged(runs: list) -> list:
    """Overlapping runs as one, their owners in order of appearance; word only if all were."""
    out: list = []
    for start, end, owners, word in sorted(runs, key=lambda r: (r[0], -r[1])):
        if out and start < out[-1][1]:
            first, last, seen, was_word = out[-1]
            if end > last:
                both = tuple(dict.fromkeys(seen + owners))
                out[-1] = (first, end, both, was_word and word)
            continue
        out.append((start, end, owners, word))
    return out


def _whole_token(buf: bytes, start: int, end: int) -> bool:
    """Not inside a longer word: `admin` in `db-admin` or `admins` stays."""
    return not ((start > 0 and buf[start] in _WORD and buf[start - 1] in _WORD)
                or (end < len(buf) and buf[end - 1] in _WORD and buf[end] in _WORD))


_WORD = WORD_BYTES | frozenset(b"-" + bytes(range(128, 256)))  # UTF-8 too


def _tail_start(buf: bytes, count: int) -> int:
    """Where the last `count` bytes of `buf` that are no line breaks begin."""
    at = len(buf)
    while count:
        at -= 1
        count -= buf[at] not in _BREAKS
    return at


class _Offsets:
    """Offsets in `buf` of its flat offsets (line breaks not counted), asked in increasing order."""

    def __init__(self, buf: bytes, flat_len: int):
        self._buf, self._plain = buf, flat_len == len(buf)
        self._at, self._flat = 0, 0

    def at(self, k: int) -> int:
        """Where flat byte k sits in buf (past the line breaks before it); len(buf) past the last."""
        if self._plain:
            return k
        buf, at, flat = self._buf, self._at, self._flat
        while flat < k:
            step = k - flat
            breaks = buf.count(b"\n", at, at + step) + buf.count(b"\r", at, at + step)
            flat += step - breaks
            at += step
        while at < len(buf) and buf[at] in _BREAKS:
            at += 1
        self._at, self._flat = at, flat
        return at


class MaskStream:
    """Masks one stream fed in arbitrary pieces; the output equals
    Masker.mask of the whole stream (but for a run's labels when a pause
    splits it)."""

    def __init__(self, masker: Masker, given, table: Table | None = None):
        self._masker, self._table = masker, table
        self._wanted, self._given = given, None   # owners the child holds; their forms when asked
        self._short = None       # their runs of 6+ (probe.Short), made on first output
        self._held = b""
        self._idle = False       # the held bytes were offered to `release`
        self._seen = b""         # last HOLD flat bytes emitted: a run goes on
        self._open: tuple = ()   # owners of a mask that ended the emitted

    def feed(self, data: bytes) -> bytes:
        """Mask what is safe to emit now. The last HOLD bytes (line breaks
        not counted) are always held, whatever they are, so a child watching
        its own output learns nothing from the delay."""
        if not self._masker.hold:
            return bytes(data)
        if not data:
            return b""
        self._idle = False
        return self._scan(self._held + data, HOLD)

    @property
    def holding(self) -> bool:
        """Held bytes `release` was not offered since the last feed."""
        return bool(self._held) and not self._idle

    def release(self) -> bytes:
        """Idle stream: emit what is held, masked, but a tail that begins a
        value the child holds (holding it tells the child nothing it knows
        not) until the next bytes show it is not that value."""
        buf, self._idle = self._held, True
        keep, _owner = self._given_prefix(_flat(buf))
        return self._scan(buf, keep)

    def flush(self) -> bytes:
        """At end of stream, everything held, masked; a held prefix of 4+ characters of a given value too."""
        buf = self._held
        if not buf:
            return b""
        flat = _flat(buf)
        keep, owner = self._given_prefix(flat)
        tail = flat[len(flat) - keep:].decode("utf-8", "ignore")
        if len(tail) < _EOF_PREFIX:
            keep = 0
        return self._scan(buf, 0, (owner,) if keep else (), keep)

    def _given_prefix(self, flat: bytes) -> tuple[int, int]:
        """(length, owner) of the longest tail of `flat` that begins a form of a given value."""
        best, owner = len(flat), 0
        if self._given is None:
            self._given = self._masker.given_forms(self._wanted) if self._wanted else []
        for form, who in self._given:
            i = flat.find(form[:1], max(0, len(flat) - len(form) + 1))
            while i != -1 and i < best:
                if form.startswith(flat[i:]):
                    best, owner = i, who
                    break
                i = flat.find(form[:1], i + 1)
        return len(flat) - best, owner

    def _scan(self, buf: bytes, hold: int, tail: tuple = (), tail_len: int = 0) -> bytes:
        """Emit buf masked but its last `hold` flat bytes (a run begun before them is masked to its
        end) and hold the rest; `tail`: owners of a last `tail_len` flat bytes to mask at EOF."""
        masker, seen = self._masker, self._seen
        new = _flat(buf)
        flat, base = seen + new, len(seen)
        if self._wanted and self._short is None:     # a value the child holds: from 6 characters
            self._short = masker.short_of(self._wanted)
        runs = masker._runs(flat, self._table, self._short)
        if tail:
            runs = _merged([*runs, (len(flat) - tail_len, len(flat), tail, False)])
        limit = hold_at = len(flat) - hold
        last = None
        offsets, out, pos = _Offsets(buf, len(new)), [], 0
        for start, end, owners, word in runs:
            if end <= base or (start >= limit and (last is None or last[0] != start)):   # a run cut in parts: one
                continue
            lo = offsets.at(max(start, base) - base)
            hi = offsets.at(end - 1 - base) + 1
            if word and masker._notes and not _whole_token(buf, lo, hi) and \
                    end - start < min(masker._lengths.get(o, 1 << 30) for o in owners):   # a whole value goes anyway
                continue
            shown = self._open if start < base else ()  # it goes on: no label twice
            owners = tuple(dict.fromkeys(shown + owners))
            out += [buf[pos:lo]] + [masker._labels[o] for o in owners if o not in shown]
            pos, limit, last = hi, max(limit, end), (end, owners)
        if limit < base:                   # nothing new to emit yet
            self._held = buf
            return b""
        if limit == hold_at:
            stop = _tail_start(buf, hold)
        else:
            stop = offsets.at(limit - base)
        out.append(buf[pos:stop])
        self._held, self._seen = buf[stop:], flat[max(0, limit - HOLD):limit]
        self._open = last[1] if last is not None and last[0] == limit else ()
        return b"".join(out)
