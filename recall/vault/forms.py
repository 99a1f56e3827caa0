"""The forms a secret value takes in printed output: the FORMS table, each row checked by a test against
the real program that prints it, and the public boilerplate inside a value (PEM armor, a URL's scheme)."""
from __future__ import annotations

import base64
import json
import re

MIN_SECRET_LEN = 6        # a shorter value or form would blank ordinary output


def encodings(value: bytes) -> dict[bytes, str]:
    """{form: the FORMS row that makes it ("raw" first)} over each base of `value`, but forms under
    MIN_SECRET_LEN."""
    forms: dict[bytes, str] = {}
    for base in _bases(value):
        for name, make, _who in FORMS:
            for form in make(base):
                if len(form) >= MIN_SECRET_LEN and forms.get(form) != "raw":
                    forms[form] = name
    return forms


def _bases(value: bytes) -> set[bytes]:
    """The value, stripped of surrounding spaces and tabs, and with LF line endings (a line break is
    no character of a run, so a trailing one needs no base of its own)."""
    bases = {value, value.strip(b" \t")}
    bases |= {v.replace(b"\r\n", b"\n") for v in bases}
    return {b for b in bases if len(b) >= MIN_SECRET_LEN}


_ARMOR = re.compile(rb"-----(?:BEGIN|END) [A-Z0-9 ]+-----")     # PEM: the same in every key of a kind
# A URL's scheme and host, with the / after it (not a user:password@ in between): what every link to
# that site shows.
_URL = re.compile(rb"\A([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s]*@)?([^/?#@\s]*/?)")


def boilerplate(value: bytes) -> list[bytes]:
    """The parts of `value` that are public text (PEM armor lines, a URL's scheme and host): their
    forms alone are not pieces of the value."""
    url = _URL.match(value)
    if url is None:
        return _ARMOR.findall(value)
    scheme, userinfo, host = url.groups()
    return _ARMOR.findall(value) + ([scheme, host] if userinfo else [scheme + host])


def _base64_forms(v: bytes) -> set[bytes]:
    """Standard and URL-safe base64: the whole encoding, and the stable inner part at offsets 0, 1, 2
    (the value inside a longer encoded stream, such as `env | base64`)."""
    forms: set[bytes] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        full = encode(v)
        forms |= {full, full.rstrip(b"=")}
        for pad in range(3):
            enc = encode(b"\0" * pad + v)
            # Only characters whose 6 bits all come from v are the same in any surrounding stream.
            forms.add(enc[(8 * pad + 5) // 6:(8 * (pad + len(v))) // 6])
    return forms


# urllib.parse.quote with safe="", "/" and "!'()*" (encodeURIComponent), as a regex over the bytes
# it changes: the same text, a tenth of the time on a private key (a masker's build, each exec)
_UNQUOTED = [re.compile(b"[^A-Za-z0-9_.~" + re.escape(safe) + b"-]") for safe in (b"", b"/", b"!'()*")]


_PERCENT = {bytes([b]): b"%%%02X" % b for b in range(256)}


def _url_forms(v: bytes) -> set[bytes]:
    """Percent-encoding as quote / quote_plus / encodeURIComponent would write it (lower-case hex is
    the same form to the masker, which folds ASCII case)."""
    forms = {pattern.sub(lambda m: _PERCENT[m.group()], v) for pattern in _UNQUOTED}
    return forms | {f.replace(b"%20", b"+") for f in forms}    # quote_plus: '%' itself is %25


def _json_forms(v: bytes) -> set[bytes]:
    """The inside of a JSON string: ASCII-escaped or not, with `\\/` and HTML-safe variants."""
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
    return {f.encode("utf-8") for f in forms}     # upper-case \\u hex: the masker folds case


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


def _translator(table: dict):
    """`str.translate(table)` as one regex over the characters it changes: the same text, a tenth of
    the time on a private key (a masker's build, each exec)."""
    table = {chr(k) if isinstance(k, int) else k: v for k, v in table.items()}
    pattern = re.compile("[" + "".join(re.escape(c) for c in sorted(table)) + "]")
    return lambda text: pattern.sub(lambda m: table[m.group()], text)


def _backslashed(chars: str):
    """A translator putting a backslash before each of `chars`."""
    return _translator({c: "\\" + c for c in chars})


_CONTROLS = {c: "\\%03o" % c for c in [*range(32), 127]}
_SQ_SHELL = _backslashed(" !\"$&'()*,;<>?[\\]^`{|}")     # what bash `printf %q` puts a backslash before
_DQ_SHELL = _backslashed('\\"$`')                         # declare -p, export -p
_ANSI_C = _translator({**_CONTROLS, "\\": "\\\\", "'": "\\'", "\a": "\\a", "\b": "\\b", "\t": "\\t",
                       "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r", "\x1b": "\\E"})   # bash's $'…'
_C = _translator({**_CONTROLS, "\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"})
_NON_ASCII = re.compile("[^\x00-\x7f]+")


def _escaped(text: str, translate, *non_ascii: str) -> set[str]:
    """`text` through `translate` (named characters, other controls as \\ooo), as is and with its
    non-ASCII bytes as each of `non_ascii` % byte (the same text when it has none)."""
    out = translate(text)
    return {out} | {_NON_ASCII.sub(lambda m: "".join(form % b for b in m.group().encode("utf-8", "surrogatepass")), out)
                    for form in non_ascii if not out.isascii()}


def _shell_forms(v: bytes) -> set[bytes]:
    """As bash `declare -p`/`export -p` ("…"), `set` ('…'), `printf %q`, $'…', and shlex.quote print it."""
    text = _text(v)
    if text is None:
        return set()
    forms = {
        _DQ_SHELL(text),                                                  # declare -p, export -p
        text.replace("'", "'\\''"),                                       # set
        text.replace("'", "'\"'\"'"),                                     # shlex.quote
        _SQ_SHELL(text),                                                  # printf %q
    }
    return _as_bytes(forms | _escaped(text, _ANSI_C, "\\%03o"))          # $'…' (UTF-8, C locale)


def _python_forms(v: bytes) -> set[bytes]:
    """The inside of Python's repr() of the str and of the bytes, and ascii() (print(os.environ))."""
    text = _text(v)
    forms = {repr(v)[2:-1]}
    if text is not None:
        forms |= {repr(text)[1:-1], ascii(text)[1:-1]}
    return _as_bytes(forms)


def _c_forms(v: bytes) -> set[bytes]:
    """C-style string escapes (strace, Go %q, printf '%b' input): \\" \\\\ \\n, non-ASCII as is, \\ooo or \\xNN."""
    forms = {"\\x" + v.hex(" ").replace(" ", "\\x")}                    # strace -xx: every byte
    text = _text(v)
    if text is not None:
        forms |= _escaped(text, _C, "\\%03o", "\\x%02x")
    return _as_bytes(forms)


_JS = _translator({**{c: "\\x%02X" % c for c in [*range(32), *range(0x7F, 0xA0)]},
                   "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"})


def _node_forms(v: bytes) -> set[bytes]:
    """Node's util.inspect (console.log of an object, process.env): only backslashes and controls escaped
    inside "…" or `…`, and \\' too inside '…' (a value holding ', " and `)."""
    text = _text(v)
    if text is None:
        return set()
    bare = _JS(text)
    return _as_bytes({bare, bare.replace("'", "\\'")})


def _quote_doubled(v: bytes) -> set[bytes]:
    """A quote written twice: SQL and YAML '…' (`it''s`), CSV "…" (`say ""hi""`)."""
    return {v.replace(b"'", b"''"), v.replace(b'"', b'""')} - {v}


_HTML = [_translator(dict(zip("&<>\"'", escapes))) for escapes in (
    ("&amp;", "&lt;", "&gt;", "&quot;", "&#x27;"),     # Python html.escape
    ("&amp;", "&lt;", "&gt;", "&#34;", "&#39;"),       # Go html/template, markupsafe
    ("&amp;", "&lt;", "&gt;", "&quot;", "&apos;"),     # XML
    ("&amp;", "&lt;", "&gt;", '"', "'"))]              # html.escape(quote=False)


def _html_forms(v: bytes) -> set[bytes]:
    """HTML/XML entity escapes as common escapers write them; non-ASCII as character references too
    (ElementTree's us-ascii output, xmlcharrefreplace: `&#233;`, `&#xe9;`)."""
    text = _text(v)
    if text is None:
        return set()
    forms = {escape(text) for escape in _HTML} if any(c in text for c in "&<>\"'") else set()
    if not text.isascii():
        forms |= {"".join(c if c.isascii() else ref % ord(c) for c in f) for f in forms | {text}
                  for ref in ("&#%d;", "&#x%x;")}
    return _as_bytes(forms)


_NOT_WORD = re.compile("[^A-Za-z0-9_]")
_BEFORE_NOT_WORD = re.compile("(?=[^A-Za-z0-9_])")      # a backslash inserted: no call per match (most of a key)
_BEFORE_NOT_WORD_B = re.compile(b"(?=[^A-Za-z0-9_])")
_RE_ESCAPE = re.compile("(?=[" + re.escape("()[]{}?*+-|^$\\.&~# \t\n\r\v\f") + "])")   # re.escape, 3.7+
WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
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
    if re.fullmatch(rb"\w*", v, re.ASCII):
        return set()
    forms = {_BEFORE_NOT_WORD_B.sub(rb"\\", v)}
    try:
        text = v.decode("utf-8")
    except UnicodeDecodeError:
        return forms
    every = _BEFORE_NOT_WORD.sub(r"\\", text)          # Python 3.3-3.6; perl's too on ASCII
    perl = every if text.isascii() else \
        _NOT_WORD.sub(lambda m: m.group() if _perl_keeps(m.group()) else "\\" + m.group(), text)
    return forms | _as_bytes({perl, _RE_ESCAPE.sub(r"\\", text), every})


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
    ("node", _node_forms, "node console.log(process.env)"),
    ("quoted", _quote_doubled, "sqlite3 quote(), YAML '…', python csv"),
    ("html", _html_forms, "python html.escape, go html/template"),
    ("regex", _regex_forms, "perl quotemeta, python re.escape"),
)
