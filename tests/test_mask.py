"""Tests for recall.mask: every encoding, every split of a stream, overlaps, binary data."""
from __future__ import annotations

import base64
import functools
import importlib.util
import json
import os
import random
import re
import shutil
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from recall.errors import RecallError
from recall.vault.mask import MIN_SECRET_LEN, Masker, check_maskable

TOKEN = "tok_9f8A7b6C5d4E3f2G"
PASSWORD = "p@ss w/rd+é&x<y>\"q\\"      # URL- and JSON-special characters
SECRETS = {"api-token": [TOKEN], "db-password": [PASSWORD]}


def label(secret_id: str) -> bytes:
    return f"[recall:{secret_id}]".encode()


def stream_all(masker: Masker, pieces) -> bytes:
    stream = masker.stream()
    return b"".join(stream.feed(p) for p in pieces) + stream.flush()


# What real programs print for $V (one line each), the forms a leak would take: never mask's own table.
PRINTERS = [
    ["sh", "-c", 'printf %s "$V" | base64 -w0; echo'],
    [sys.executable, "-c", "import os, base64, json, urllib.parse as u, re; v = os.environ['V']; "
     "print(base64.urlsafe_b64encode(v.encode()).decode(), u.quote(v, safe=''), u.quote_plus(v), u.quote(v), "
     "json.dumps(v), json.dumps(v, ensure_ascii=False), repr(v), ascii(v), re.escape(v), sep='\\n')"],
    ["bash", "-c", 'printf "%q\\n" "$V"; declare -p V'],
    ["perl", "-e", 'print quotemeta($ENV{V}), "\\n"'],
    ["sh", "-c", 'printf %s "$V" | xxd -p -c 256'],
]


@functools.lru_cache(maxsize=None)
def real_forms(value: str) -> tuple:
    """Every line the PRINTERS print for `value`, stripped of the quotes around it."""
    import subprocess
    out = b"".join(subprocess.run(cmd, env={**os.environ, "V": value}, capture_output=True, check=True,
                                  timeout=30).stdout for cmd in PRINTERS)
    lines = {line.strip() for line in out.splitlines()} - {b""}
    lines = {line.split(b"=", 1)[1] if line.startswith(b"declare ") else line for line in lines}
    return tuple(sorted({line.strip(b"'\"").removeprefix(b"$'").rstrip(b"'") for line in lines}))


def assert_no_form(masker_secrets: dict[str, list[str]], out: bytes) -> None:
    for values in masker_secrets.values():
        for value in values:
            forms = real_forms(value)
            assert len(forms) >= 3, forms
            for form in forms:
                assert form not in out, form


@pytest.fixture
def masker() -> Masker:
    return Masker(SECRETS)


def test_check_maskable_refuses_short_values():
    with pytest.raises(RecallError) as info:
        check_maskable("pin", "12345")
    assert str(info.value).startswith("secret 'pin' is too short to mask safely (5 characters) — ")
    assert "12345" not in str(info.value)
    check_maskable("ok", "x" * MIN_SECRET_LEN)


def test_empty_and_short_values_make_no_patterns():
    masker = Masker({"empty": [""], "short": ["abc"]})
    data = b"abc abc  abcabc"
    assert masker.mask(data) == data
    assert stream_all(masker, [data[:4], data[4:]]) == data


def test_raw_value_masked(masker):
    out = masker.mask(f"token={TOKEN}; done".encode())
    assert out == b"token=[recall:api-token]; done"


def test_every_two_way_split_matches_whole(masker):
    b64 = base64.b64encode(TOKEN.encode())
    data = (b"start " + TOKEN.encode() + b" mid " + b64 + b" url "
            + quote(PASSWORD, safe="").encode() + b" end " + TOKEN.encode())
    whole = masker.mask(data)
    assert whole == (b"start [recall:api-token] mid [recall:api-token] url "
                     b"[recall:db-password] end [recall:api-token]")
    for i in range(len(data) + 1):
        assert stream_all(masker, [data[:i], data[i:]]) == whole, i


def test_byte_by_byte_delivery(masker):
    data = b"a" + TOKEN.encode() + b"b" + json.dumps(PASSWORD).encode() + b"\n" + TOKEN.encode()
    pieces = [data[i:i + 1] for i in range(len(data))]
    out = stream_all(masker, pieces)
    assert out == masker.mask(data)
    assert out == b"a[recall:api-token]b\"[recall:db-password]\"\n[recall:api-token]"


def test_feed_holds_back_a_fixed_tail_whatever_it_holds(masker):
    """How much is held never depends on whether the tail begins a secret: a child that watches
    its own output cannot test guesses byte by byte (issue 11 point 2)."""
    hold = masker.hold
    assert hold == 15
    filler = b"x" * (3 * hold)
    for tail in (b"plain text!", TOKEN[:5].encode(), TOKEN[:7].encode(), TOKEN[-7:].encode(), b"\0" * 5):
        stream = masker.stream()
        out = stream.feed(filler + tail)
        assert len(out) == len(filler) + len(tail) - hold, tail
        assert out + stream.flush() == filler + tail
    stream = masker.stream()
    assert stream.feed(b"key " + TOKEN[:5].encode()) == b""
    assert stream.feed(TOKEN[5:].encode() + b" ok!") == b"key [recall:api-token]"   # a run is masked whole
    assert stream.flush() == b" ok!"


@pytest.mark.parametrize("prefix_len", range(6))
@pytest.mark.parametrize("suffix_len", range(4))
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
def test_base64_every_alignment(prefix_len, suffix_len, encode):
    value = "s3cr>t?~~~??xyzzy"          # its base64 holds both '+'/'/' and '-'/'_'
    assert set(b"+/") & set(base64.b64encode(value.encode()))
    masker = Masker({"k": [value]})
    rng = random.Random(prefix_len * 10 + suffix_len)
    prefix = bytes(rng.randrange(256) for _ in range(prefix_len))
    suffix = bytes(rng.randrange(256) for _ in range(suffix_len))
    encoded = encode(prefix + value.encode() + suffix)
    data = b"data: " + encoded + b"\n"
    out = masker.mask(data)
    assert label("k") in out
    residue = out.replace(label("k"), b"")
    masked = len(data) - len(residue)
    # Every character made only of the value's bits is gone.
    assert masked >= (8 * len(value)) // 6 - 1
    assert stream_all(masker, [data[i:i + 3] for i in range(0, len(data), 3)]) == out


def test_base64_wrapped_by_the_cli():
    value = "k" * 30 + "".join(chr(33 + i) for i in range(60))
    masker = Masker({"pem": [value]})
    wrapped = base64.encodebytes(value.encode())   # 76-column lines, like `base64`
    assert wrapped.count(b"\n") > 1
    assert masker.mask(wrapped) == b"[recall:pem]\n"


@pytest.mark.parametrize("form", [
    quote(PASSWORD, safe=""), quote(PASSWORD), quote_plus(PASSWORD),
    quote(PASSWORD, safe="").lower(), quote_plus(PASSWORD).lower(),
    quote(PASSWORD, safe="!'()*"),
])
def test_url_encoding(masker, form):
    data = b"GET /login?user=a&pw=" + form.encode() + b"&next=/ HTTP/1.1"
    out = masker.mask(data)
    assert out == b"GET /login?user=a&pw=[recall:db-password]&next=/ HTTP/1.1"


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_json_escaping(masker, ensure_ascii):
    doc = json.dumps({"password": PASSWORD, "token": TOKEN}, ensure_ascii=ensure_ascii)
    out = masker.mask(doc.encode())
    assert out == b'{"password": "[recall:db-password]", "token": "[recall:api-token]"}'


def test_json_of_multiline_value():
    value = "-----BEGIN KEY-----\nAAAAB3NzaC1yc2EAAAADAQAB\n-----END KEY-----\n"
    masker = Masker({"key": [value]})
    out = masker.mask(json.dumps({"k": value}).encode())
    assert out == b'{"k": "[recall:key]"}'


def test_multiline_value_lf_and_crlf():
    value = "line one of it\nline two of it"
    masker = Masker({"ml": [value]})
    assert masker.mask(b"<line one of it\nline two of it>") == b"<[recall:ml]>"
    assert masker.mask(b"<line one of it\r\nline two of it>") == b"<[recall:ml]>"
    crlf_value = "line one of it\r\nline two of it"
    masker = Masker({"ml": [crlf_value]})
    assert masker.mask(b"<line one of it\nline two of it>") == b"<[recall:ml]>"


def test_long_lines_of_a_multiline_value_mask_alone():
    value = "header\nMIIEpAIBAAKCAQEA1x2y3z4\nfooter"
    masker = Masker({"key": [value]})
    assert masker.mask(b"> MIIEpAIBAAKCAQEA1x2y3z4 <") == b"> [recall:key] <"
    assert masker.mask(b"header footer") == b"header footer"


def test_overlapping_values_longest_wins():
    masker = Masker({"short": ["abcdefgh"], "long": ["abcdefghijkl"]})
    assert masker.mask(b"x abcdefghijkl y abcdefgh z") == b"x [recall:long] y [recall:short] z"
    nested = Masker({"inner": ["cdefgh"], "outer": ["abcdefghij"]})
    assert nested.mask(b"-abcdefghij-cdefgh-") == b"-[recall:outer]-[recall:inner]-"


def test_partial_overlap_masks_both():
    masker = Masker({"a": ["abcdefgh"], "b": ["efghijklmn"]})
    data = b"<abcdefghijklmn>"
    assert masker.mask(data) == b"<[recall:a][recall:b]>"
    for i in range(len(data) + 1):
        assert stream_all(masker, [data[:i], data[i:]]) == b"<[recall:a][recall:b]>"


def test_adjacent_secrets_keep_their_labels(masker):
    """Two values side by side are masked each with its label; the same value twice, twice (a run
    longer than any form of its value holds it more than once)."""
    assert masker.mask(TOKEN.encode() + PASSWORD.encode()) == b"[recall:api-token][recall:db-password]"
    assert masker.mask(TOKEN.encode() + TOKEN.encode()) == b"[recall:api-token][recall:api-token]"


def test_multi_part_secret_masks_every_part():
    masker = Masker({"db-admin": ["admin-user", "hunter2hunter2"]})
    data = b"user=admin-user password=hunter2hunter2 b64=" + base64.b64encode(b"hunter2hunter2")
    assert masker.mask(data) == b"user=[recall:db-admin] password=[recall:db-admin] b64=[recall:db-admin]"


def test_trailing_newline_in_value_still_masks_bare_value():
    masker = Masker({"t": ["s3cret-value\n"]})
    assert masker.mask(b"[s3cret-value]") == b"[[recall:t]]"


def test_binary_output_byte_identical_outside_masks(masker):
    rng = random.Random(7)
    pieces = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) for _ in range(50)]
    data = TOKEN.encode().join(pieces)
    expected = label("api-token").join(pieces)
    assert masker.mask(data) == expected
    chunks, i = [], 0
    while i < len(data):
        n = rng.randrange(1, 200)
        chunks.append(data[i:i + n])
        i += n
    assert stream_all(masker, chunks) == expected


def test_degenerate_run_is_not_held_forever():
    masker = Masker({"z": ["zzzzzzzz"]})
    stream = masker.stream()
    emitted = b"".join(stream.feed(b"z" * 4096) for _ in range(64))
    assert emitted == b"[recall:z]"
    assert stream.feed(b"!") == b""            # the fixed tail is held until flush
    assert stream.flush() == b"!"
    assert masker.mask(b"z" * 5000 + b"!") == b"[recall:z]!"


def _many_secrets(rng: random.Random, count: int) -> dict[str, list[str]]:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+/=@!"
    return {f"s{i}": ["".join(rng.choice(alphabet) for _ in range(rng.randrange(8, 48)))]
            for i in range(count)}


def _random_bytes(rng: random.Random, n: int) -> bytes:
    return rng.getrandbits(8 * n).to_bytes(n, "little")


def _assert_same(got: bytes, want: bytes) -> None:
    """Equality without pytest's diff of two 10 MB buffers (which takes many minutes)."""
    if got != want:
        i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
        raise AssertionError(f"first difference at byte {i} (lengths {len(got)}, {len(want)}): "
                             f"got {got[max(0, i - 40):i + 60]!r}, want {want[max(0, i - 40):i + 60]!r}")


@pytest.mark.parametrize("count", [1, 3, 20, 40])
def test_ten_megabytes_random_binary_with_secrets(count):
    rng = random.Random(count)
    secrets = _many_secrets(rng, count)
    masker = Masker(secrets)
    ids = list(secrets)
    parts, expected, size = [], [], 0
    while size < 10_000_000:
        # a filler ending in a backslash before a value starting with '/' really holds the value's
        # JSON form '\/…' — masked one byte wider than this test's expectation
        filler = _random_bytes(rng, rng.randrange(1000, 400_000)).rstrip(b"\\")
        sid = rng.choice(ids)
        value = secrets[sid][0].encode()
        form = rng.choice([value, base64.b64encode(value), quote(value, safe="").encode(),
                           json.dumps(value.decode())[1:-1].encode()])
        parts += [filler, form]
        expected += [filler, label(sid)]
        size += len(filler) + len(form)
    data = b"".join(parts)
    whole = masker.mask(data)
    _assert_same(whole, b"".join(expected))
    chunks, i = [], 0
    while i < len(data):
        n = rng.choice([1, 7, 4096, 65536, rng.randrange(1, 200_000)])
        chunks.append(data[i:i + n])
        i += n
    _assert_same(stream_all(masker, chunks), whole)


@pytest.mark.parametrize("kind", ["stream", "answer", "notes", "stream of a vault of MBs"])
def test_a_short_buffer_and_the_table_agree(kind, monkeypatch):
    """An argv or a prompt is checked against the forms that share a window with it (no table built),
    and so are the first SHARED_LOOKS answers (a child's output too when the forms run to MBs); then
    the table of every form is built: all mask the same pieces with the same labels."""
    from recall.vault import mask as module
    if kind == "stream of a vault of MBs":
        monkeypatch.setattr(module, "_LOOK_FORMS", 0)
    looks = 0 if kind == "stream" else module.SHARED_LOOKS
    rng = random.Random(5)
    secrets = _many_secrets(rng, 10)
    pad = b"." * 5000
    for sid, values in secrets.items():
        value = values[0].encode()
        for piece in (value, value[1:9], value[-8:], base64.b64encode(value)):
            fresh = Masker(secrets, notes=kind == "notes")
            small = b"<<" + piece + b">>"
            assert fresh.mask(small) == b"<<" + label(sid) + b">>", piece
            assert fresh._table is None                      # `exec ID -- true` never builds it
            for _ in range(looks + 1):
                assert fresh._table is None
                data = pad + small + pad
                out = stream_all(fresh, [data]) if kind.startswith("stream") else fresh.mask(data)
                assert out == pad + b"<<" + label(sid) + b">>" + pad
            assert fresh._table is not None


def test_no_form_survives_in_text(masker):
    """Every form the real programs print (base64, URL, JSON, repr, printf %q, quotemeta, hex …)."""
    forms = [f for values in SECRETS.values() for v in values for f in real_forms(v)]
    text = b"a " + b" | ".join(forms) + b" z"
    out = masker.mask(text)
    assert_no_form(SECRETS, out)
    assert out.startswith(b"a [recall:") and out.endswith(b"] z") and out.count(b" | ") == len(forms) - 1, out


# -- pieces: any run of 8 or more characters of a value (issue 33 point 2) ------------------------

AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"      # 40 characters, as an AWS secret key


def windows_of(text: bytes, size: int = 8) -> set:
    return {text[i:i + size] for i in range(len(text) - size + 1)}


def no_piece(value: bytes, out: bytes, size: int = 8) -> bool:
    """No `size` characters of `value` stand together in `out` (ASCII case ignored, breaks dropped)."""
    flat = out.lower().replace(b"\n", b"").replace(b"\r", b"")
    return not any(w in flat for w in windows_of(value.lower(), size))


@pytest.mark.parametrize("length", [7, 8, 9, 18, 30])
def test_any_run_of_eight_characters_of_a_value_is_masked_and_seven_is_not(length):
    masker = Masker({"aws": [AWS]})
    for start in range(len(AWS) - length + 1):
        piece = AWS[start:start + length].encode()
        data = b"key: " + piece + b" ;"
        want = b"key: [recall:aws] ;" if length >= 8 else data
        assert masker.mask(data) == want, piece
        assert masker.mask(data.upper()) == want.upper().replace(b"RECALL:AWS", b"recall:aws"), piece


def test_a_piece_split_by_line_breaks_is_one_run():
    masker = Masker({"aws": [AWS]})
    piece = AWS[5:21].encode()
    for i in range(1, len(piece)):
        for brk in (b"\n", b"\r\n", b"\n\n"):
            assert masker.mask(b"[" + piece[:i] + brk + piece[i:] + b"]\n") == b"[[recall:aws]]\n", (i, brk)
    text = b"first line\nsecond line\n"          # breaks of text that is no piece stay where they were
    assert masker.mask(text) == text


def test_every_split_and_pause_masks_every_piece():
    """Fed in two parts, with a pause (release) between or not: no 8 characters of the value come out,
    and whatever does not begin a run comes out as it went in."""
    masker = Masker({"aws": [AWS], "tok": [TOKEN]})
    data = (b"a " + AWS[3:21].encode() + b" b " + base64.b64encode(b"x" + AWS.encode())[4:30]
            + b" c " + TOKEN[:8].encode() + b" d " + AWS[:7].encode() + b"!")
    whole = masker.mask(data)
    assert whole == b"a [recall:aws] b [recall:aws] c [recall:tok] d " + AWS[:7].encode() + b"!"
    for i in range(len(data) + 1):
        for pause, given in ((False, ()), (True, ()), (True, ("aws", "tok"))):
            stream = masker.stream(given)
            out = stream.feed(data[:i]) + (stream.release() if pause else b"") + stream.feed(data[i:])
            out += stream.flush()
            assert no_piece(AWS.encode(), out) and no_piece(TOKEN.encode(), out), (i, pause, given, out)
            if not pause:
                assert out == whole, i


def _reference_runs(masker: Masker, flat: bytes) -> list:
    """What the masker must find, by brute force: every 8-byte window of `flat` looked up; a run is a
    stretch they cover, masked if it holds a secret window and is long enough; short forms whole."""
    table = masker._table
    keys = [int.from_bytes(flat[j:j + 8], sys.byteorder) for j in range(len(flat) - 7)]
    runs, j = [], 0
    while j < len(keys):
        if keys[j] not in table.owners:
            j += 1
            continue
        start, end = j, j + 8
        while j < len(keys) and j <= end:         # windows that overlap or touch the run grow it
            if keys[j] in table.owners:
                end = j + 8
            j += 1
        inside = keys[start:end - 7]
        secret = [k for k in inside if k in table.owners and k not in table.public]
        strict = any(k in table.strict for k in secret)
        if secret and (strict or any(all(k in table.owners for k in inside[i:i + 9]) for i in range(len(inside) - 8))):
            runs.append((start, end))                 # a loose form needs 16 characters: 9 windows in a row
    runs += [(i, i + len(form)) for form, _owner, _word in table.short for i in _find_all(flat, form)]
    merged = []
    for start, end in sorted(runs):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _touching_joined(runs: list) -> list:
    """The bytes runs cover, as spans (a run of two values is cut in parts that touch)."""
    out: list = []
    for start, end in runs:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _find_all(flat: bytes, form: bytes) -> list:
    return [i for i in range(len(flat) - len(form) + 1) if flat.startswith(form, i)]


PROBES = ["python", pytest.param("numpy", marks=pytest.mark.skipif(
    importlib.util.find_spec("numpy") is None, reason="numpy (the vec extra) is not installed"))]


def _use_probe(monkeypatch, probe: str) -> None:
    """The set probe alone, or numpy's from the first byte (a stream takes it after 8 MB)."""
    from recall.vault import probe as module
    if probe == "numpy":
        monkeypatch.setattr(module, "NUMPY_AFTER", -1)
    else:
        monkeypatch.setattr(module, "_numpy_probe", lambda keys: ())


def _chance_values(rng, case: int, count: int, longest: int) -> list:
    """Random values over a small alphabet (many chance overlaps, hex and base64 forms): one case in
    five wrapped in PEM armor, one in three after a URL's public scheme and host."""
    alphabet = "ab01-+/=xyzAB" if case % 2 else "abcdefgh0123456789"
    values = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(6, longest))) for _ in range(count)]
    if case % 5 == 0:
        values[0] = "-----BEGIN EC PRIVATE KEY-----\n" + values[0] + "\n-----END EC PRIVATE KEY-----\n"
    if case % 3 == 0:
        values[1] = "https://db.example.com/" + values[1] + "/-----"
    return values


@pytest.mark.parametrize("probe", PROBES)
def test_the_probe_finds_what_looking_at_every_window_finds(monkeypatch, probe):
    """Random values over a small alphabet (many chance overlaps, public armor, hex and base64 forms)
    and streams of their pieces: the gram probe (either) and the stepping growth find exactly the
    runs a brute-force look at every window finds."""
    _use_probe(monkeypatch, probe)
    rng = random.Random(33)
    for case in range(300):
        values = _chance_values(rng, case, 3, 30)
        masker = Masker({f"v{i}": [v] for i, v in enumerate(values)})
        masker._table_for(b"x" * (1 << 21))                      # builds the table of every form
        forms = list(masker._forms)
        parts = []
        for _ in range(rng.randrange(1, 8)):
            form = rng.choice(forms)
            start = rng.randrange(len(form))
            parts.append(form[start:start + rng.randrange(1, 40)])
            parts.append(bytes(rng.choice(b"ab01 -+xz./") for _ in range(rng.randrange(0, 6))))
        flat = b"".join(parts)
        got = [(start, end) for start, end, _owners, _word in masker._runs(flat)]
        assert _touching_joined(got) == _touching_joined(_reference_runs(masker, flat)), (case, values, flat)


def test_values_printed_on_lines_of_their_own_keep_their_line_breaks():
    """`printf '%s\\n' "$A" "$B"`: two values on two lines were one mask, `[recall:a][recall:b]` on one
    line (line breaks are no characters of a run, so the two runs touched); each is masked on its
    own line now, however the stream is cut, and no byte of either shows."""
    masker = Masker({"aws": [AWS], "tok": [TOKEN], "key": [PEM]})
    for data, want in ((f"{AWS}\n{TOKEN}\n".encode(), b"[recall:aws]\n[recall:tok]\n"),
                       (f"{TOKEN}\r\n{AWS}\r\n{TOKEN}\n".encode(), b"[recall:tok]\r\n[recall:aws]\r\n[recall:tok]\n"),
                       (f"{AWS[:12]}\n{TOKEN[5:30]}\n".encode(), b"[recall:aws]\n[recall:tok]\n"),
                       (f"{AWS}{TOKEN}\n".encode(), b"[recall:aws][recall:tok]\n")):
        assert masker.mask(data) == want, masker.mask(data)
        for given in ((), ("aws", "tok")):
            for size in (1, 3, 7, 16, len(data)):
                stream = masker.stream(given)
                out = b"".join(stream.feed(data[i:i + size]) for i in range(0, len(data), size)) + stream.flush()
                assert out == want, (size, given, out)
    assert masker.mask(PEM.encode() + AWS.encode() + b"\n") == b"[recall:key]\n[recall:aws]\n"
    twice = [f"{AWS}\n".encode(), f"{AWS}\n".encode()]          # one value on two lines, a write each
    assert masker.mask(b"".join(twice)) == stream_all(masker, twice) == b"[recall:aws]\n[recall:aws]\n"


def test_six_characters_of_a_value_the_child_holds_are_masked_wherever_they_stand():
    """A child holding a value (`secret exec ID`): any 6 of its characters in a row go, at any
    offset, fed byte by byte, upper-cased; the same pieces of a value it was not given show (8)."""
    masker = Masker({"aws": [AWS], "tok": [TOKEN]})
    for length in (6, 7):
        for start in range(len(AWS) - length + 1):
            piece = AWS[start:start + length].encode()
            for before, shown, after in ((b"at ", piece, b" mid\n"), (b"", piece.upper(), b"\n" + b"#" * 20)):
                data = before + shown + after
                given = masker.stream(("aws",))
                out = b"".join(given.feed(data[i:i + 1]) for i in range(len(data))) + given.flush()
                assert out == before + b"[recall:aws]" + after, (piece, out)
                assert stream_all(masker, [data]) == data                        # not given: 8
                other = masker.stream(("tok",))
                assert other.feed(data) + other.flush() == data
    text = b"the 5 words of a log line, ------ and 000000\n"       # no 6 of the value: unchanged
    stream = masker.stream(("aws", "tok"))
    assert stream.feed(text) + stream.flush() == text


@pytest.mark.parametrize("probe", PROBES)
def test_the_short_runs_are_what_looking_at_every_six_byte_window_finds(monkeypatch, probe):
    """Random values over a small alphabet, public armor and hosts among them, and streams of their
    pieces: the probe of every even offset, or of 2, 6, … beside the hits of the table of every form,
    and the growth find exactly the stretches of 6-byte windows of the values' forms (but the public
    ones) a brute-force look finds."""
    _use_probe(monkeypatch, probe)
    rng = random.Random(6)
    for case in range(300):
        values = _chance_values(rng, case, 3, 30)
        masker = Masker({f"v{i}": [v] for i, v in enumerate(values)})
        short = masker.short_of({0, 1, 2})
        forms = [(f, spec[0]) for f, spec in masker._forms.items() if not spec[1]]   # as long as the value
        table = masker._table_for(b"x" * (1 << 21))                # the table of every form
        parts = []
        for _ in range(rng.randrange(1, 8)):
            form = rng.choice(forms)[0]
            start = rng.randrange(len(form))
            parts.append(form[start:start + rng.randrange(1, 14)])
            parts.append(bytes(rng.choice(b"ab01 -+xz./") for _ in range(rng.randrange(0, 6))))
        flat = b"".join(parts)
        public = set().union(*(windows_of(p, 6) for p in masker._public))
        held = {w for f, _ in forms for w in windows_of(f, 6)} - public
        held -= {bytes([b]) * 6 for b in range(256)}
        want, j = [], 0
        for j in range(len(flat) - 5):
            if flat[j:j + 6] in held:
                if want and want[-1][1] == j + 5:
                    want[-1] = (want[-1][0], j + 6)
                else:
                    want.append((j, j + 6))
        assert [(a, b) for a, b, _o, _w in short.runs(flat)] == want, (case, values, flat)
        fours = table.probe.hits(flat)
        assert [(a, b) for a, b, _o, _w in short.runs(flat, fours)] == want, (case, values, flat)


@pytest.mark.parametrize("encode", [bytes.hex, lambda v: base64.b64encode(v).decode()])
def test_encoded_forms_mask_from_sixteen_characters(encode):
    """Forms of 1.25 characters or more a character (base64, hex, \\xNN): a run of 16 is masked, 15 is
    not (what base64 shares with a public certificate's is no piece)."""
    masker = Masker({"aws": [AWS]})
    encoded = encode(AWS.encode()).encode()
    assert masker.mask(b"<" + encoded[4:20] + b">") == b"<[recall:aws]>"
    assert masker.mask(b"<" + encoded[4:19] + b">") == b"<" + encoded[4:19] + b">"
    assert masker.mask(b"<" + encoded + b">") == b"<[recall:aws]>"


@pytest.mark.parametrize("prefix", range(0, 80, 3))
def test_wrapped_base64_is_masked_at_any_offset_in_the_stream(prefix):
    """`env | base64`: the value sits anywhere in the stream, and the CLI's 76-column wrap falls
    anywhere in its encoding."""
    import subprocess
    plain = b"A" * prefix + b"AWS_SECRET_ACCESS_KEY=" + AWS.encode() + b"\nHOME=/root\n"
    wrapped = subprocess.run(["base64"], input=plain, capture_output=True, check=True).stdout
    assert wrapped.count(b"\n") >= 2
    out = Masker({"aws": [AWS]}).mask(wrapped)
    assert out.count(b"[recall:aws]") == 1, out
    inner = [base64.b64encode(b"\0" * pad + AWS.encode())[(8 * pad + 5) // 6:(8 * (pad + 40)) // 6]
             for pad in range(3)]
    assert all(no_piece(form, out) for form in inner), out


PEM_BODY = ("MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5RUgQz8TLTHg7oAoGCCqGSM49\n"
            "AwEHoUQDQgAEYl7HzJDJ1OSwv8cSf5vmRhpNSXr5wVmrlyr3TiRp7yH8mr0OH3Hg\n"
            "zWgrxzB+8Xo8v3/4d8R1X7Xb4kJb0A2sRg==\n")
PEM = "-----BEGIN EC PRIVATE KEY-----\n" + PEM_BODY + "-----END EC PRIVATE KEY-----\n"
CERT = ("-----BEGIN CERTIFICATE-----\nMIIBfTCCASOgAwIBAgIUQ3ZpT1yL0f2Yb7h2cJkq8wGm0aIwCgYIKoZIzj0EAwIw\n"
        "-----END CERTIFICATE-----\n")
WEBHOOK = "https://hooks.example.com/services/T0A1B2C3/B4D5E6F7/q8W9e0R1t2Y3u4I5"


def test_public_boilerplate_in_a_value_is_no_piece():
    """PEM armor (in every key of its kind), a URL's scheme and runs of one character (table rules)
    are not masked on their own; the value they stand in is masked whole, armor and all."""
    masker = Masker({"tls-key": [PEM], "hook": [WEBHOOK]})
    public = [CERT.encode(), base64.b64encode(CERT.encode()), b"  name  | id\n--------+--------\n",
              b"see https://docs.python.org/3/ and http://localhost:8080/", b"=" * 40 + b"\n"]
    for text in public:
        assert masker.mask(text) == text, text
    assert masker.mask(b"key:\n" + PEM.encode()) == b"key:\n[recall:tls-key]\n"
    assert masker.mask(json.dumps({"k": PEM}).encode()) == b'{"k": "[recall:tls-key]"}'
    assert masker.mask(b"posting to " + WEBHOOK.encode() + b" ok") == b"posting to [recall:hook] ok"
    assert masker.mask(b"GET https://hooks.example.com/ 200") == b"GET https://hooks.example.com/ 200"
    # a word of 8+ letters in the value is a piece of it wherever it stands (README)
    assert masker.mask(b"cat /etc/services") == b"cat /etc[recall:hook]"


def test_a_run_of_public_text_is_looked_at_once(monkeypatch):
    """A child printing PEM armor over and over makes one long run of public windows: each probe hit
    inside it is skipped, not grown over the whole run again (that was quadratic: seconds a buffer)."""
    from recall.vault import table
    calls = []
    grow = table.Table._run
    monkeypatch.setattr(table.Table, "_run", lambda self, flat, at: calls.append(at) or grow(self, flat, at))
    data = b"-----BEGIN EC PRIVATE KEY-----\n" * 2000
    assert Masker({"tls-key": [PEM]}).mask(data) == data
    assert len(calls) < 20, len(calls)


def test_a_run_of_one_character_is_no_piece_but_such_a_value_is_masked():
    """An OpenSSH key holds runs of A (zero bytes in base64): base64 of zeros elsewhere stays."""
    ssh = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQAAACBq9xXf"
    masker = Masker({"z": ["zzzzzzzz"], "ssh": [ssh]})
    assert masker.mask(b"a zzzzzzzz b") == b"a [recall:z] b"
    zeros = base64.b64encode(bytes(30)) + b"\n"
    assert masker.mask(zeros) == zeros
    assert masker.mask(ssh[10:40].encode()) == b"[recall:ssh]"


def test_note_redaction_masks_whole_token_pieces_and_leaves_words_inside_words():
    """Notes: a piece of 8+ is redacted when it stands as a whole token (a pasted, truncated token);
    inside a longer word it stays, but the whole value goes wherever it stands. A value holding a
    word of 8+ letters redacts that word too."""
    from recall.vault.redact import text_redactor
    value = "ghp-Xq7Wm2Lr9Tz4Kv8Pn3Hs6Bd1"
    redact = text_redactor({"gh": {"": value}, "pw": {"": "7x-password-Q2"}}, {"gh": set(), "pw": set()})
    assert redact(f"token {value[:14]}... expired") == "token [recall:gh]... expired"
    assert redact(f"token {value} here") == "token [recall:gh] here"
    assert redact("see ghp-Xq7Wm2Lr9Tz4kk and moreghp-Xq7Wm2Lr9") == "see ghp-Xq7Wm2Lr9Tz4kk and moreghp-Xq7Wm2Lr9"
    assert redact("reset the password today; passwords rotate") == "reset the [recall:pw] today; passwords rotate"
    # the whole value inside a longer token goes all the same (no index byte keeps it)
    assert redact(f"host api-{value}-prod.example.com, {value}Suffix") == \
        "host api-[recall:gh]-prod.example.com, [recall:gh]Suffix"


# -- every row of mask.FORMS against the real program that prints it ---------------------------

CORE = "Zq8mK3"        # an alphanumeric stretch of each tricky value: it must not survive masking
TRICKY = [
    "p'a\"s\\s$w `o r-d!é&<>" + CORE,    # quotes, backslash, $, backtick, space, non-ASCII, HTML
    "tab\there-" + CORE + "'é",          # a control character: bash switches to $'…'
    "plain" + CORE + "token",
]
PY = [sys.executable, "-c"]
PROGRAMS = {   # FORMS row -> commands printing $V in that form, and what must not survive
    "raw": [["printenv", "V"]],
    "case": [["sh", "-c", 'printf %s "$V" | tr a-z A-Z'], ["sh", "-c", 'printf %s "$V" | tr A-Z a-z'],
             PY + ["import os; print(os.environ['V'].upper())"]],
    "base64": [["sh", "-c", 'printf %s "$V" | base64'], ["sh", "-c", 'printf %s "$V" | base64 -w0']],
    "url": [PY + ["import os, urllib.parse as u; print(u.quote(os.environ['V'], safe=''), "
                  "u.quote_plus(os.environ['V']))"]],
    "json": [["sh", "-c", 'printf %s "$V" | jq -Rs .'], PY + ["import os, json; print(json.dumps(os.environ['V']))"]],
    "hex": [["sh", "-c", 'printf %s "$V" | xxd -p -c 256']],
    "shell": [["bash", "-c", "declare -p V"], ["bash", "-c", "export -p | grep ' V='"],
              ["bash", "-c", "set | grep '^V='"], ["bash", "-c", 'printf "%q\\n" "$V"'],
              ["env", "LC_ALL=C", "bash", "-c", "declare -p V"],
              ["env", "LC_ALL=C", "bash", "-c", 'printf "%q\\n" "$V"'],
              PY + ["import os, shlex; print(shlex.quote(os.environ['V']))"]],
    "python": [PY + ["import os; print(repr(os.environ['V']))"], PY + ["import os; print(os.environ)"],
               PY + ["import os; print(os.environb)"], PY + ["import os; print(ascii(os.environ['V']))"]],
    "c": [["strace", "-qq", "-e", "trace=write", "-s", "500", "sh", "-c", 'printf %s "$V" >/dev/null'],
          ["strace", "-qq", "-xx", "-e", "trace=execve", "-s", "500", "printf", "%s", "-"]],
    "html": [PY + ["import os, html; print(html.escape(os.environ['V']), html.escape(os.environ['V'], False))"],
             PY + ["import os, xml.etree.ElementTree as E; e = E.Element('v'); e.text = os.environ['V']; "
                   "print(E.tostring(e).decode())"]],
    "regex": [["perl", "-e", 'print quotemeta($ENV{V}), "\\n"'],
              ["perl", "-CS", "-MEncode", "-e", 'print quotemeta(decode("UTF-8", $ENV{V})), "\\n"'],
              PY + ["import os, re; print(re.escape(os.environ['V']))"]],
    "node": [["node", "-e", "console.log([process.env.V])"], ["node", "-e", "console.log(process.env)"]],
    "quoted": [PY + ["import os, sqlite3; print(sqlite3.connect(':memory:').execute("
                     "'select quote(?)', (os.environ['V'],)).fetchone()[0])"],
               PY + ["import csv, os, sys; csv.writer(sys.stdout).writerow([os.environ['V'], 'x'])"]],
}


def test_every_form_row_has_a_real_program():
    from recall.vault.forms import FORMS
    assert {name for name, _make, _who in FORMS} == set(PROGRAMS)


def _run(cmd, value):
    import subprocess
    env = {**os.environ, "V": value, "LC_ALL": os.environ.get("LC_ALL", "C.UTF-8")}
    if cmd[0] == "strace" and cmd[-1] == "-":
        cmd = cmd[:-1] + [value]              # strace -xx shows the argv of an exec
    if cmd[0] == "env":
        env.pop("LC_ALL")
    r = subprocess.run(cmd, env=env, capture_output=True, timeout=30)
    return r.stdout + r.stderr


@pytest.mark.parametrize("value", TRICKY, ids=["quotes", "control", "plain"])
@pytest.mark.parametrize("row,cmd", [(row, cmd) for row, cmds in PROGRAMS.items() for cmd in cmds],
                         ids=lambda x: x if isinstance(x, str) else " ".join(x)[-40:])
def test_form_printed_by_the_real_program_is_masked(row, cmd, value):
    if cmd[0] in ("strace", "node") and not shutil.which(cmd[0]):
        pytest.skip(f"{cmd[0]} not installed")
    out = _run(cmd, value)
    encoded = {"base64": base64.b64encode(value.encode())[8:20], "hex": value.encode().hex()[8:20].encode(),
               "c": b"\\x5a\\x71\\x38" if "-xx" in cmd else CORE.encode()}
    probe = encoded.get(row, CORE.encode())
    assert probe.lower() in out.lower().replace(b"\n", b""), out          # the program printed it
    masked = Masker({"v": [value], "other": ["unrelated-value-123"]}).mask(out)
    assert b"[recall:v]" in masked, (out, masked)
    assert probe.lower() not in masked.lower().replace(b"\n", b""), (out, masked)


@pytest.mark.parametrize("value", TRICKY + ["tok-4f9a.8b7c+6d5e"], ids=["quotes", "control", "plain", "dashes"])
def test_a_regex_escaped_value_is_redacted_in_notes(value):
    """perl quotemeta and Python re.escape of a value, pasted into a note, are redacted."""
    from recall.vault.redact import text_redactor
    escaped = []
    for cmd in PROGRAMS["regex"]:
        try:                     # perl's quotemeta of the bytes splits a UTF-8 character: no note holds that
            escaped.append(_run(cmd, value).decode("utf-8").rstrip("\n"))
        except UnicodeDecodeError:
            assert "é" in value
    assert len(escaped) >= 2 and (any(line != value for line in escaped) or value.isalnum()), escaped
    redact = text_redactor({"v": {"": value}}, {"v": set()})
    for line in escaped:
        note = f"grep -P '{line}' /var/log/app.log"
        assert redact(note) == "grep -P '[recall:v]' /var/log/app.log", (line, redact(note))


# ' " \\ . between the letters: each escaper treats the four differently (node leaves the quotes and
# the dot and doubles the backslash, re.escape escapes the dot too, SQL doubles ', CSV "), so no 8
# characters of one's form stand in another's.
DENSE = "a'\"\\.b'\"\\.c'\"\\.d'\"\\.e'\"\\.f"
DENSE_PRINTERS = [
    PROGRAMS["quoted"][0],                                       # SQL quote(): 'a''b"c\d''e…'
    PROGRAMS["quoted"][1],                                       # CSV: "a'b""c\d'e""f…"
    ["node", "-e", "console.log([process.env.V])"],             # util.inspect: `a'b"c\\d'e"f…`
    ["node", "-e", "console.log({v: process.env.V, w: 1})"],
]


@pytest.mark.parametrize("cmd", DENSE_PRINTERS, ids=["sql", "csv", "node-array", "node-object"])
def test_a_value_dense_with_quotes_and_backslashes_is_masked_as_its_escaper_prints_it(cmd):
    if cmd[0] == "node" and not shutil.which("node"):
        pytest.skip("node not installed")
    out = _run(cmd, DENSE)
    assert b"a" in out and b"f" in out and (b"''" in out or b'""' in out or b"\\\\" in out), out
    masked = Masker({"v": [DENSE]}).mask(out)
    assert masked.count(b"[recall:v]") == 1, (out, masked)
    assert not re.search(rb"[a-f]\W{1,5}[a-f]", masked.replace(b"[recall:v]", b"")), (out, masked)


def _go_json(text: str) -> str:
    """The inside of a string as Go's encoding/json writes it: non-ASCII kept, <, >, &, U+2028 and
    U+2029 as \\u escapes (its HTML-safe default)."""
    named = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return "".join(named.get(c) or ("\\u%04x" % ord(c) if ord(c) < 0x20 or c in "<>&\u2028\u2029" else c)
                   for c in text)


def test_non_ascii_written_as_character_references_is_masked():
    """XML written in us-ascii (ElementTree's default) spells each non-ASCII character `&#228;`: a value
    with one every few letters showed only pieces of under 8 between them, and none was masked."""
    value = "p\u00e4ssw\u00f6rt-\u00dcn\u00efcode-\u00e9" + CORE
    for code in ("import os, xml.etree.ElementTree as E; e = E.Element('v'); e.text = os.environ['V']; "
                 "print(E.tostring(e).decode())",
                 "import os; print(os.environ['V'].encode('ascii', 'xmlcharrefreplace').decode())",
                 "import os; print(''.join(c if c.isascii() else '&#x%x;' % ord(c) for c in os.environ['V']))"):
        out = _run(PY + [code], value)
        assert b"&#" in out and CORE.encode() in out, out
        masked = Masker({"v": [value]}).mask(out)
        assert b"[recall:v]" in masked and CORE.encode() not in masked and b"ssw" not in masked, (out, masked)


def test_a_json_form_with_non_ascii_kept_and_html_characters_escaped_is_masked():
    value = "p\u00e9<x>&y\u2028z-" + CORE
    if shutil.which("go"):
        import subprocess
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            Path(d, "main.go").write_text('package main\nimport ("encoding/json"; "fmt"; "os")\n'
                                          'func main() { b, _ := json.Marshal(os.Getenv("V")); fmt.Println(string(b)) }\n')
            out = subprocess.run(["go", "run", "main.go"], cwd=d, env={**os.environ, "V": value},
                                 capture_output=True, check=True, timeout=120).stdout
    else:                       # no Go toolchain here: its encoder's rule, written out
        out = ('{"v":"' + _go_json(value) + '"}\n').encode()
    assert b"\\u003c" in out and "é".encode() in out and CORE.encode() in out, out
    assert Masker({"v": [value]}).mask(out).count(b"[recall:v]") == 1
    assert CORE.encode() not in Masker({"v": [value]}).mask(out)


def test_an_idle_stream_keeps_only_a_prefix_of_a_value_the_child_holds(masker):
    """release() (the stream went quiet) lets a prefix of another secret go as it always did, but
    keeps a prefix of the child's own value until the next bytes decide; flush() masks one of 4+."""
    own = masker.stream(given=["api-token"])
    assert own.feed(b"key=" + TOKEN[:5].encode()) == b""
    assert own.release() == b"key=" and not own.holding
    assert own.feed(TOKEN[5:].encode() + b" ok!") + own.flush() == b"[recall:api-token] ok!"
    own = masker.stream(given=["api-token"])
    own.feed(b"key=" + TOKEN[:5].encode())
    assert own.release() == b"key="
    own.feed(b"-not-it")
    assert own.release() + own.flush() == TOKEN[:5].encode() + b"-not-it"
    other = masker.stream(given=["db-password"])
    other.feed(b"key=" + TOKEN[:5].encode())
    assert other.release() == b"key=" + TOKEN[:5].encode()
    # ... and the rest of it after the pause is masked: the run goes on from what was released
    assert other.feed(TOKEN[5:].encode() + b" ok!") + other.flush() == b"[recall:api-token] ok!"
    end = masker.stream(given=["api-token"])
    end.feed(b"x " + TOKEN[:4].encode())
    assert end.flush() == b"x [recall:api-token]"
    end = masker.stream(given=["api-token"])
    end.feed(b"x " + TOKEN[:3].encode())
    assert end.flush() == b"x " + TOKEN[:3].encode()


def test_the_percent_encoded_forms_are_urllibs_quote():
    """forms._url_forms writes by regex what urllib.parse.quote writes (safe "", "/" and
    encodeURIComponent's "!'()*"), on random bytes of every kind."""
    from urllib.parse import quote

    from recall.vault import forms
    rng = random.Random(5)
    for _ in range(3000):
        v = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 48)))
        for pattern, safe in zip(forms._UNQUOTED, ("", "/", "!'()*")):
            assert pattern.sub(lambda m: b"%%%02X" % m.group()[0], v) == quote(v, safe=safe).encode(), (v, safe)


@pytest.mark.parametrize("probe", PROBES)
def test_a_long_stream_masks_the_same_with_either_probe(monkeypatch, probe):
    """A stream of log lines with pieces and encodings of a private key and tokens, fed in reads of
    64 KiB: masked the same whether the set or numpy looks for the grams, and no piece is left."""
    rng = random.Random(5)
    secrets = {"tls-key": [PEM], "aws": [AWS], "token": [TOKEN], "hook": [WEBHOOK]}
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(2, 10)))
             for _ in range(500)]
    parts, size = [], 0
    while size < 600_000:
        size += len(parts[-1]) if parts else 0
        parts.append(" ".join(rng.choice(words) for _ in range(rng.randrange(4, 40))).encode() + b"\n")
        if rng.random() < 0.05:
            value = rng.choice([PEM, AWS, TOKEN, WEBHOOK]).encode()
            start = rng.randrange(len(value) - 8)
            piece = value[start:start + rng.randrange(8, 60)]
            parts.append(rng.choice([piece, value, base64.b64encode(value), quote(value, safe="").encode()]))
    data = b"".join(parts)
    _use_probe(monkeypatch, probe)
    masker, out = Masker(secrets), []
    stream = masker.stream()
    for i in range(0, len(data), 65536):
        out.append(stream.feed(data[i:i + 65536]))
    out = b"".join(out) + stream.flush()
    _use_probe(monkeypatch, "python")
    assert out == Masker(secrets).mask(data)
    assert out.count(b"[recall:") > 5
    assert all(no_piece(v.encode(), out) for v in (AWS, TOKEN))


def test_short_output_never_imports_numpy():
    """`secret exec ID -- true` and a short answer pay nothing for the fast probe: numpy (0.1 s to
    import) only comes in for a stream past 8 MB."""
    import subprocess
    code = ("import sys; from recall.vault.mask import Masker; "
            "m = Masker({'t': ['bench-value-0123456789']}); "
            "assert m.mask(b'x bench-value-0123456789 ' * 20000).count(b'[recall:t]') == 20000; "
            "print('numpy' in sys.modules)")
    from tests.conftest import REPO
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_a_translator_writes_what_str_translate_writes():
    """forms._translator (one regex over the characters a table changes) against str.translate, on
    random text of every kind and random tables (backslashes, controls, non-ASCII, replacements that
    hold other keys)."""
    from recall.vault import forms
    rng = random.Random(8)
    alphabet = "ab\\'\"&<>$ \t\n\x00\x1b\x7f\x85é€-]^["
    for _ in range(500):
        keys = rng.sample(alphabet, rng.randrange(1, 10))
        table = {ord(k): "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 4))) for k in keys}
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        assert forms._translator(table)(text) == text.translate(table), (table, text)


def test_the_regex_forms_are_what_re_escape_and_a_backslash_before_every_non_word_character_write():
    """forms' regex row inserts its backslashes by lookahead (no call a match): the same text as
    Python's re.escape (3.7+) and as the older escape of every non-word character, on random text."""
    from recall.vault import forms
    rng = random.Random(9)
    alphabet = "".join(map(chr, range(200))) + "é€😀"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        assert forms._RE_ESCAPE.sub(r"\\", text) == re.escape(text), text
        assert forms._BEFORE_NOT_WORD.sub(r"\\", text) == re.sub("[^A-Za-z0-9_]", lambda m: "\\" + m.group(), text)
        raw = text.encode("utf-8")
        assert forms._BEFORE_NOT_WORD_B.sub(rb"\\", raw) == re.sub(b"[^A-Za-z0-9_]", lambda m: b"\\" + m.group(), raw)


# A value per row whose printed form no other row writes: an escape every few characters breaks
# every run of 8 of the value as written and of the other rows' forms, so only the row masks it.
ONLY_ROW = {
    "shell": ("a-b$c.d$e-f$g.h$i-j$k.l$m", [["bash", "-c", "declare -p V"], ["bash", "-c", 'printf "%q\\n" "$V"']]),
    "python": ("aéb-céd-eéf-géh-iéj-kél", [PY + ["import os; print(ascii(os.environ['V']))"]]),
    "case": ("éab-céd-eéf-géh-iéj-kél", [PY + ["import os; print(os.environ['V'].upper())"]]),
}


@pytest.mark.parametrize("row", sorted(ONLY_ROW))
def test_a_form_only_its_row_writes_is_masked(row):
    """Rows whose forms the others often share (bash's quoting, Python's ascii(), non-ASCII case):
    a value each alone can catch, printed by the real program, leaves no piece."""
    value, cmds = ONLY_ROW[row]
    for cmd in cmds:
        out = _run(cmd, value).strip()
        assert out and value.encode() not in out, out                 # the program escaped it
        masked = Masker({"v": [value]}).mask(out)
        assert b"[recall:v]" in masked and no_piece(value.encode(), masked, 4), (cmd, out, masked)
        assert not re.search(rb"[a-z]-[a-z]", masked.lower()), (cmd, out, masked)


def test_a_character_of_a_key_beside_other_armor_is_no_piece():
    """A certificate whose last base64 character is the key's (one in 40) prints `M\\n-----END
    CERTIFICATE-----`: one character of the key beside public armor is no piece; five are."""
    body = PEM_BODY.replace("\n", "")
    masker = Masker({"tls-key": [PEM]})
    for tail in (body[-2:], body[-4:]):
        text = f"MIIBfTCCASOgAwIBAgIU{tail}\n-----END CERTIFICATE-----\n".encode()
        assert masker.mask(text) == text, tail
    text = f"junk {body[-6:]}\n-----END CERTIFICATE-----\n".encode()
    assert b"[recall:tls-key]" in masker.mask(text)


def test_a_certificate_ending_as_the_keys_encoded_line_break_does_is_no_piece():
    """The key percent-encoded writes `Q%0A-----END%20PRIVATE%20KEY-----`: its armor is public there
    too, so a certificate ending in `a` (one in 30 did, and test_runner's certificate case failed
    one run in 50) passes unchanged, and so does one after any of the key's encoded armor."""
    masker = Masker({"tls-key": [PEM]})
    for last in "aA0":
        text = f"MIIBfTCCASOgAwIBAgIU{last}\n-----END CERTIFICATE-----\n".encode()
        assert masker.mask(text) == text, last
    for armor in (quote(PEM), quote_plus(PEM), quote(PEM, safe="/")):
        text = f"id: {armor[-70:]}\n".encode()
        assert masker.mask(text).startswith(b"id: [recall:tls-key]")      # the key's own tail still masks


@pytest.mark.parametrize("probe", PROBES)
def test_a_notes_maskers_first_answers_mask_what_the_table_of_every_form_masks(monkeypatch, probe):
    """A notes masker reads its first answers by the forms they share (each found, or one probe pass
    over the forms), never building the table of every form (a 1 MB vault: seconds and a GB); what
    it masks, in each text of an answer, is what that table masks. After SHARED_LOOKS answers it
    builds the table."""
    from recall.vault import mask as module
    _use_probe(monkeypatch, probe)
    rng = random.Random(36)
    for case in range(40):
        values = _chance_values(rng, case, 4, 60)
        secrets = {f"v{i}": [v] for i, v in enumerate(values)}
        whole = Masker(secrets, notes=True)
        for _ in range(module.SHARED_LOOKS + 1):               # answers past 128 bytes: then the table
            assert whole._table is None
            whole.mask(b"y" * 200)
        assert whole._table is not None
        looked = Masker(secrets, notes=True)
        forms = list(whole._forms)
        for _answer in range(module.SHARED_LOOKS):
            texts = []
            for _ in range(rng.randrange(1, 4)):        # a title, a heading, a section: 3 to 3,000 bytes
                parts = [bytes(rng.choice(b"ab01 -+xz./\n") for _ in range(rng.randrange(0, 30)))]
                for _ in range(rng.randrange(0, 6)):
                    form = rng.choice(forms)
                    start = rng.randrange(len(form))
                    parts += [form[start:start + rng.randrange(1, 60)], b" " * rng.randrange(0, 3)]
                texts.append(b"".join(parts) * rng.choice([1, 1, 40]))
            assert looked.mask_many(texts) == [whole.mask(t) for t in texts], (case, values, texts)
            assert looked._table is None


def test_many_texts_are_read_a_megabyte_at_a_time(monkeypatch):
    """A sync re-reads every indexed chunk: its texts go a group of up to _SHARED_MAX bytes to a look,
    each text masked as the table of every form masks it."""
    from recall.vault import mask as module
    monkeypatch.setattr(module, "_SHARED_MAX", 4096)
    rng = random.Random(8)
    secrets = _many_secrets(rng, 6)
    whole = Masker(secrets, notes=True)
    whole._table_for(b"x" * 5000)                     # past _SHARED_MAX: the table of every form
    pieces = [v[0].encode()[i:i + 12] for v in secrets.values() for i in (0, 3)]
    texts = [b" ".join(rng.choice(pieces + [b"plain words", b"db-admin"]) for _ in range(rng.randrange(1, 60)))
             for _ in range(40)]
    groups, size = 1, len(texts[0])
    for text in texts[1:]:                            # joined by a line break each
        groups, size = (groups + 1, len(text)) if size + 1 + len(text) > 4096 else (groups, size + 1 + len(text))
    assert 1 < groups <= module.SHARED_LOOKS
    looked = Masker(secrets, notes=True)
    assert looked.mask_many(texts) == [whole.mask(t) for t in texts]
    assert looked._table is None and looked._looks == groups
