"""The masker: every secret value and part, its encodings, masked as `[recall:ID]` across read boundaries."""
from __future__ import annotations

import base64
import json
import re
import sys
from urllib.parse import quote, quote_plus

from ..errors import RecallError

MIN_SECRET_LEN = 6
_MIN_LINE_LEN = 16        # one line of a multi-line value is masked on its own from this length
_WRAP_WIDTHS = (76, 64)   # `base64` CLI and PEM line widths
_GRAM = 8                 # bytes per prefilter gram: one native unsigned 64-bit int
_MAX_STRIDE = 8           # sample every k-th gram, k <= this
_MAP_ENTRIES = 1 << 18    # a stride whose gram map would hold more entries is not taken (its build time)
_SMALL = 4096             # the first _SMALL_SCANS buffers up to this size get a find per form, no prefilter
_SMALL_SCANS = 8
_GRAM_NS = 40.0           # a set lookup per gram, and a bytes.find pass per byte: the cheaper plan wins
_FIND_NS_PER_BYTE = 0.15
_EOF_PREFIX = 4           # at EOF a held prefix of a given value this long is masked
_PCT_HEX = re.compile(rb"%[0-9A-F]{2}")
_JSON_U = re.compile(r"\\u([0-9a-f]{4})")


def check_maskable(secret_id: str, value: str) -> None:
    """Refuse a value too short to mask without blanking ordinary output."""
    if len(value) < MIN_SECRET_LEN:
        raise RecallError(
            f"secret '{secret_id}' is too short to mask safely ({len(value)} characters)",
            f"values under {MIN_SECRET_LEN} characters cannot be used with exec; "
            "store a longer value, or read it at a real terminal with `recall secret get`")


def encodings(value: bytes) -> set[bytes]:
    """Every form of `value` to mask (FORMS over each base of the value), but those under MIN_SECRET_LEN."""
    forms = {f for base in _bases(value) for _name, make, _who in FORMS for f in make(base)}
    forms |= _line_forms(value)
    return {f for f in forms if len(f) >= MIN_SECRET_LEN}


def _bases(value: bytes) -> set[bytes]:
    """The value, stripped of surrounding whitespace, and its LF and CRLF line-ending forms."""
    bases = {value, value.strip()}
    for v in list(bases):
        lf = v.replace(b"\r\n", b"\n")
        if b"\n" in lf:
            bases |= {lf, lf.replace(b"\n", b"\r\n")}
    return {b for b in bases if len(b) >= MIN_SECRET_LEN}


def _base64_forms(v: bytes) -> set[bytes]:
    """Standard and URL-safe base64: the whole encoding, and the stable inner part at offsets 0, 1, 2."""
    forms: set[bytes] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        full = encode(v)
        forms |= {full, full.rstrip(b"=")}
        for pad in range(3):
            enc = encode(b"\0" * pad + v)
            # Only characters whose 6 bits all come from v are the same in any surrounding stream.
            inner = enc[(8 * pad + 5) // 6:(8 * (pad + len(v))) // 6]
            forms.add(inner)
            if pad == 0:
                forms |= {b"\n".join(t[i:i + width] for i in range(0, len(t), width))   # wrapped
                          for width in _WRAP_WIDTHS if len(full) > width for t in (full, inner)}
    return forms


def _url_forms(v: bytes) -> set[bytes]:
    """Percent-encoding as quote / quote_plus / encodeURIComponent would write it, upper and lower hex."""
    forms: set[bytes] = set()
    for safe in ("", "/", "!'()*"):
        forms.add(quote(v, safe=safe).encode())
        forms.add(quote_plus(v, safe=safe).encode())
    return forms | {_PCT_HEX.sub(lambda m: m.group().lower(), f) for f in forms}


def _json_forms(v: bytes) -> set[bytes]:
    """The inside of a JSON string: ASCII-escaped or not, with `\\/`, HTML-safe and upper-hex variants."""
    try:
        text = v.decode("utf-8")
    except UnicodeDecodeError:
        return set()
    forms: set[str] = set()
    for ascii_only in (True, False):
        body = json.dumps(text, ensure_ascii=ascii_only)[1:-1]
        forms |= {body, body.replace("/", "\\/"),
                  body.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # Go's
                  .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")}
    forms |= {_JSON_U.sub(lambda m: "\\u" + m.group(1).upper(), f) for f in forms}
    return {f.encode("utf-8") for f in forms}


_PLAIN = re.compile(rb"[A-Za-z0-9_./:=@+-]*\Z")   # no shell, C, Python or HTML escaper changes these


def _text(v: bytes):
    """The value as text for the escaping forms; None when not UTF-8 or when no escaper changes it."""
    if _PLAIN.match(v):
        return None
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _as_bytes(forms) -> set[bytes]:
    return {f.encode("utf-8", "surrogatepass") for f in forms}


def _case_forms(v: bytes) -> set[bytes]:
    """Upper and lower case beyond ASCII (`É` for `é`); the Masker ignores ASCII case anyway."""
    text = _text(v)
    return _as_bytes({text.upper(), text.lower()}) if text and not text.isascii() else set()


_SQ_SHELL = set(" !\"$&'()*,;<>?[\\]^`{|}")     # what bash `printf %q` puts a backslash before
_ANSI_C_NAMED = {"\\": "\\\\", "'": "\\'", "\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                 "\v": "\\v", "\f": "\\f", "\r": "\\r", "\x1b": "\\E"}     # inside bash's $'…'
_C_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escaped(text: str, named: dict, non_ascii: str = "") -> str:
    """`text` with `named` characters replaced, other controls as \\ooo, non-ASCII bytes as `non_ascii` % byte."""
    out = []
    for ch in text:
        if ch in named:
            out.append(named[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append("\\%03o" % ord(ch))
        elif ord(ch) > 127 and non_ascii:
            out.append("".join(non_ascii % b for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "".join(out)


def _shell_forms(v: bytes) -> set[bytes]:
    """As bash `declare -p`/`export -p` ("…"), `set` ('…'), `printf %q`, $'…', and shlex.quote print it."""
    text = _text(v)
    if text is None:
        return set()
    forms = {
        "".join("\\" + c if c in '\\"$`' else c for c in text),          # declare -p, export -p
        text.replace("'", "'\\''"),                                       # set
        text.replace("'", "'\"'\"'"),                                     # shlex.quote
        "".join("\\" + c if c in _SQ_SHELL else c for c in text),          # printf %q
        _escaped(text, _ANSI_C_NAMED), _escaped(text, _ANSI_C_NAMED, "\\%03o"),   # $'…' (UTF-8, C locale)
    }
    return _as_bytes(forms)


def _python_forms(v: bytes) -> set[bytes]:
    """The inside of Python's repr() of the str and of the bytes, and ascii() (print(os.environ))."""
    text = _text(v)
    forms = {repr(v)[2:-1]}
    if text is not None:
        forms |= {repr(text)[1:-1], ascii(text)[1:-1]}
    return _as_bytes(forms)


def _c_forms(v: bytes) -> set[bytes]:
    """C-style string escapes (strace, Go %q, printf '%b' input): \\" \\\\ \\n, non-ASCII as is, \\ooo or \\xNN."""
    forms = {"".join("\\x%02x" % b for b in v)}                      # strace -xx: every byte
    text = _text(v)
    if text is not None:
        forms |= {_escaped(text, _C_NAMED, non_ascii) for non_ascii in ("", "\\%03o", "\\x%02x")}
    return _as_bytes(forms)


_HTML = (("&amp;", "&lt;", "&gt;", "&quot;", "&#x27;"),     # Python html.escape
         ("&amp;", "&lt;", "&gt;", "&#34;", "&#39;"),       # Go html/template, markupsafe
         ("&amp;", "&lt;", "&gt;", "&quot;", "&apos;"),     # XML
         ("&amp;", "&lt;", "&gt;", '"', "'"))               # html.escape(quote=False)


def _html_forms(v: bytes) -> set[bytes]:
    """HTML/XML entity escapes as common escapers write them."""
    text = _text(v)
    if text is None or not any(c in text for c in "&<>\"'"):
        return set()
    return _as_bytes({"".join({"&": amp, "<": lt, ">": gt, '"': dq, "'": sq}.get(c, c) for c in text)
                      for amp, lt, gt, dq, sq in _HTML})


_RE_SPECIAL = frozenset("()[]{}?*+-|^$\\.&~# \t\n\r\v\f")     # what Python 3.7+ re.escape escapes
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
# Above Latin-1, perl quotemeta quotes Pattern_Syntax, white space and default-ignorable code points.
_PERL_QUOTED = ((0x200B, 0x200F), (0x2010, 0x2027), (0x202A, 0x203E), (0x2041, 0x2053), (0x2055, 0x206F),
                (0x2190, 0x245F), (0x2500, 0x2775), (0x2794, 0x2BFF), (0x2E00, 0x2E7F), (0x3001, 0x3003),
                (0x3008, 0x3020), (0x3030, 0x3030), (0xFD3E, 0xFD3F), (0xFE45, 0xFE46), (0xFEFF, 0xFEFF))


def _perl_keeps(c: str) -> bool:
    o = ord(c)
    if o < 256:
        return c.isalnum() or c == "_"
    return not (c.isspace() or any(lo <= o <= hi for lo, hi in _PERL_QUOTED))


def _regex_forms(v: bytes) -> set[bytes]:
    """As a regex escaper writes it: perl quotemeta (on bytes, and on characters: non-ASCII word
    characters kept), Python re.escape (3.7+: its special set; 3.3-3.6: all but ASCII word characters)."""
    if all(b in _WORD_BYTES for b in v):
        return set()
    forms = {b"".join(b"\\" + bytes([b]) if b not in _WORD_BYTES else bytes([b]) for b in v)}
    try:
        text = v.decode("utf-8")
    except UnicodeDecodeError:
        return forms
    return forms | _as_bytes({
        "".join(c if _perl_keeps(c) else "\\" + c for c in text),
        "".join("\\" + c if c in _RE_SPECIAL else c for c in text),
        "".join(c if ord(c) in _WORD_BYTES else "\\" + c for c in text)})


def _line_forms(value: bytes) -> set[bytes]:
    """Each long line of a multi-line value, so a reformatted print (indented, prefixed) still masks."""
    lines = value.replace(b"\r\n", b"\n").split(b"\n")
    if len(lines) < 2:
        return set()
    return {part for line in lines for part in (line, line.strip()) if len(part) >= _MIN_LINE_LEN}


# (name, bytes -> set of forms, a program that prints it): tests check each against its real output.
FORMS = (
    ("raw", lambda v: {v}, "cat"),
    ("case", _case_forms, "tr a-z A-Z"),
    ("base64", _base64_forms, "base64, python base64"),
    ("url", _url_forms, "python urllib.parse.quote, curl --data-urlencode"),
    ("json", _json_forms, "python json.dumps, jq"),
    ("hex", lambda v: {v.hex().encode(), v.hex().upper().encode()}, "xxd -p, python bytes.hex"),
    ("shell", _shell_forms, "bash declare -p / export -p / set / printf %q, python shlex.quote"),
    ("python", _python_forms, "python repr, print(os.environ)"),
    ("c", _c_forms, "strace, go %q"),
    ("html", _html_forms, "python html.escape, go html/template"),
    ("regex", _regex_forms, "perl quotemeta, python re.escape"),
)


_WORD = _WORD_BYTES | frozenset(b"-" + bytes(range(128, 256)))   # a token's bytes: UTF-8 letters too


def _whole_token(buf: bytes, start: int, end: int) -> bool:
    """Not inside a longer word: `admin` in `db-admin` or `admins` is left alone."""
    return not ((start > 0 and buf[start] in _WORD and buf[start - 1] in _WORD)
                or (end < len(buf) and buf[end - 1] in _WORD and buf[end] in _WORD))


class Masker:
    """All forms of all secrets, and the prefilter that finds them fast."""

    def __init__(self, secrets: dict[str, list[str]], notes: bool = False, lines_only: bool = False):
        """`notes` (note text): a value as written matches only as a whole token (encoded forms anywhere),
        and the prefilter is built now; else on the first large scan, so `exec ID -- true` never pays.
        `lines_only`: only each long line of a multi-line value (for text too short to hold it whole)."""
        owners: dict[bytes, list[int]] = {}
        words: set[bytes] = set()
        self._labels: list[bytes] = []
        self._index = {secret_id: i for i, secret_id in enumerate(secrets)}
        for index, (secret_id, values) in enumerate(secrets.items()):
            self._labels.append(b"[recall:" + secret_id.encode("utf-8") + b"]")
            for value in values:
                raw = value.encode("utf-8")
                for form in _line_forms(raw) if lines_only else encodings(raw):
                    owners.setdefault(form.lower(), []).append(index)   # matched without ASCII case
                if notes:
                    words |= {b.lower() for b in _bases(raw)}
        self._forms = sorted(owners, key=lambda f: (-len(f), f))
        self._owners = [owners[f] for f in self._forms]
        self._word_forms = {fi for fi, f in enumerate(self._forms) if f in words}
        self._maxlen = len(self._forms[0]) if self._forms else 0
        self._gram_map: dict[int, list[tuple[int, int]]] | None = None
        self._small_scans = 0
        if notes:
            self._prepare()

    def _prepare(self) -> None:
        self._stride, self._find_forms = self._plan()
        step, by_find = _GRAM * self._stride, set(self._find_forms)
        gram_map: dict[int, list[tuple[int, int]]] = {}
        for fi, form in enumerate(self._forms if step else ()):
            # a form at p meets its first sampled gram at offset (-p) % step: those offsets suffice
            for off in range(step) if fi not in by_find else ():
                key = int.from_bytes(form[off:off + _GRAM], sys.byteorder)
                gram_map.setdefault(key, []).append((fi, off))
        self._gram_keys = frozenset(gram_map)
        self._gram_map = gram_map

    def _plan(self) -> tuple[int, list[int]]:
        """(stride, forms found by bytes.find): a find per form, or a gram lookup every k-th gram plus a
        find for the forms too short to cover a whole gram at a multiple of GRAM*k (length < GRAM*(k+1)-1)."""
        lengths = [len(f) for f in self._forms]
        best_cost, best_stride, need = _FIND_NS_PER_BYTE * len(lengths), 0, float("inf")
        for k in range(1, _MAX_STRIDE + 1):
            cost = _GRAM_NS / (_GRAM * k) + _FIND_NS_PER_BYTE * sum(n < _GRAM * (k + 1) - 1 for n in lengths)
            entries = _GRAM * k * sum(n >= _GRAM * (k + 1) - 1 for n in lengths)
            if cost < best_cost and (k == 1 or entries <= _MAP_ENTRIES):   # many forms: a smaller map
                best_cost, best_stride, need = cost, k, _GRAM * (k + 1) - 1
        return best_stride, [fi for fi, n in enumerate(lengths) if n < need]

    def mask(self, data: bytes) -> bytes:
        stream = self.stream()
        return stream.feed(data) + stream.flush()

    def stream(self, given=()) -> MaskStream:
        """A masker for one stream fed in pieces; `given`: ids of the secrets the child holds (see release)."""
        wanted = {self._index[g] for g in given if g in self._index}
        return MaskStream(self, [(f, o[0]) for f, o in zip(self._forms, self._owners)
                                 if wanted.intersection(o)])

    def _gram_hits(self, buf: bytes, k: int) -> list[tuple[int, int]]:
        """(position, gram) of every k-th gram that occurs in some form."""
        count = len(buf) // _GRAM
        if count == 0 or not self._gram_keys:
            return []
        end = count * _GRAM
        grams = memoryview(buf)[:end].cast("Q")[::k]
        keys = self._gram_keys
        found = keys.intersection(grams)
        if not found:
            return []
        step = _GRAM * k
        if len(found) * count * _GRAM * _FIND_NS_PER_BYTE > len(grams) * _GRAM_NS:
            return [(i * step, g) for i, g in enumerate(grams) if g in keys]
        hits = []
        for key in found:  # usually one or two: locate each with a C-speed find
            gram = key.to_bytes(_GRAM, sys.byteorder)
            i = buf.find(gram, 0, end)
            while i != -1:
                if i % step == 0:
                    hits.append((i, key))
                i = buf.find(gram, i + 1, end)
        return hits

    def _occurrences(self, buf: bytes, limit: int) -> list[tuple[int, int, int]]:
        """(start, end, owner) of every form occurrence starting before `limit`; by start, longest first."""
        found: set[tuple[int, int]] = set()
        forms = self._forms
        if self._gram_map is None and len(buf) <= _SMALL and self._small_scans < _SMALL_SCANS:
            self._small_scans += 1      # a few short buffers (argv, a prompt): no prefilter built yet
            find_forms, stride = range(len(forms)), 0
        else:
            if self._gram_map is None:
                self._prepare()
            find_forms, stride = self._find_forms, self._stride
        for fi in find_forms:
            form = forms[fi]
            end = limit + len(form) - 1
            i = buf.find(form, 0, end)
            while i != -1:
                found.add((i, fi))
                i = buf.find(form, i + 1, end)
        if stride:
            gram_map = self._gram_map
            candidates = {(g - off, fi) for g, key in self._gram_hits(buf, stride)
                          for fi, off in gram_map[key]}
            found.update((p, fi) for p, fi in candidates
                         if 0 <= p < limit and buf.startswith(forms[fi], p))
        if self._word_forms:
            found = {(p, fi) for p, fi in found if fi not in self._word_forms
                     or _whole_token(buf, p, p + len(forms[fi]))}
        return sorted(((p, p + len(forms[fi]), self._owners[fi][0]) for p, fi in found),
                      key=lambda o: (o[0], -o[1]))


class MaskStream:
    """Masks one stream fed in arbitrary pieces; the output equals Masker.mask of the whole stream."""

    def __init__(self, masker: Masker, given):
        self._masker = masker
        self._given = given        # (form, owner) of the values this child holds
        self._held = b""
        self._idle = False         # the held bytes were already offered to `release`
        self._carry_end = 0        # held bytes [0, carry_end) belong to an emitted mask of these ids
        self._carry_ids: list[int] = []

    def feed(self, data: bytes) -> bytes:
        """Mask what is safe to emit now. The last (longest form - 1) bytes are always held, whatever they
        are, so a child watching its own output learns nothing from the delay (`release`, `flush` emit them)."""
        if not self._masker._forms:
            return bytes(data)
        if not data:
            return b""
        self._idle = False
        buf = self._held + data     # bytes, whatever buffer `data` is
        return self._scan(buf, len(buf) - self._masker._maxlen + 1)

    @property
    def holding(self) -> bool:
        """Held bytes that `release` has not yet been offered since the last feed."""
        return bool(self._held) and not self._idle

    def release(self) -> bytes:
        """Idle stream: emit what is held, masked, but a tail that begins a value the child holds (holding
        it tells the child nothing it knows not) until the next bytes show it is not that value."""
        buf, self._idle = self._held, True
        keep, _owner = self._given_prefix(buf)
        return self._scan(buf, len(buf) - keep)

    def flush(self) -> bytes:
        """At end of stream, everything held, masked; a held prefix of 4+ characters of a given value too."""
        buf = self._held
        if not buf:          # nothing held: no open run either (a run never ends past the held bytes)
            return b""
        keep, owner = self._given_prefix(buf)
        if keep and len(buf[len(buf) - keep:].decode("utf-8", "ignore")) < _EOF_PREFIX:
            keep = 0
        return self._scan(buf, len(buf), (len(buf) - keep, len(buf), owner) if keep else None)

    def _given_prefix(self, buf: bytes) -> tuple[int, int]:
        """(length, owner) of the longest tail of `buf` that begins a form of a given value."""
        if not self._given or not buf:
            return 0, 0
        low, best, owner = buf.lower(), len(buf), 0
        for form, who in self._given:
            i = low.find(form[:1], max(0, len(low) - len(form) + 1))
            while i != -1 and i < best:
                if form.startswith(low[i:]):
                    best, owner = i, who
                    break
                i = low.find(form[:1], i + 1)
        return len(buf) - best, owner

    def _scan(self, buf: bytes, limit: int, extra=None) -> bytes:
        """Emit buf[:limit] masked (a run that crosses `limit` masked whole) and hold the rest."""
        masker = self._masker
        labels = masker._labels
        limit = max(0, limit)
        out: list[bytes] = []
        run_end, run_ids, emitted = self._carry_end, list(self._carry_ids), len(self._carry_ids)
        # lower-cased: `tr a-z A-Z`, upper-case hex or %-escapes all match one form at the same offsets
        found = masker._occurrences(buf.lower(), limit)
        if extra is not None:
            found = sorted(found + [extra], key=lambda o: (o[0], -o[1]))
        for start, end, owner in found:
            if start < run_end:  # overlaps the open run: the run grows
                if end > run_end:
                    run_end = end
                    if owner not in run_ids:
                        run_ids.append(owner)
                continue
            out.extend(labels[i] for i in run_ids[emitted:])
            out.append(buf[run_end:start])
            run_end, run_ids, emitted = end, [owner], 0
        out.extend(labels[i] for i in run_ids[emitted:])
        if run_end > limit:      # the labels are final; later data may only extend the run
            self._carry_end, self._carry_ids = run_end - limit, run_ids
        else:
            out.append(buf[run_end:limit])
            self._carry_end, self._carry_ids = 0, []
        self._held = buf[limit:]
        return b"".join(out)
