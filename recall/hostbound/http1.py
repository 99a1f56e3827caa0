"""HTTP/1.1 framing for the host-bound proxy: request heads (strict), chunked and sized bodies, targets."""
from __future__ import annotations

import re

MAX_HEAD = 64 * 1024
READ_SIZE = 64 * 1024


class Reader:
    """Buffered reads from a socket: heads, lines, and exact or available byte counts; `pause`:
    (seconds, whether it is wanted, what to do) when the peer is silent that long."""

    def __init__(self, sock):
        self.sock, self.buf = sock, bytearray()
        self.pause = None

    def _fill(self) -> bool:
        chunk = None
        if self.pause is not None and self.pause[1]():
            import socket
            seconds, _, paused = self.pause
            before = self.sock.gettimeout()
            self.sock.settimeout(seconds)
            try:
                chunk = self.sock.recv(READ_SIZE)
            except socket.timeout:
                paused()
            finally:
                self.sock.settimeout(before)
        if chunk is None:
            chunk = self.sock.recv(READ_SIZE)
        self.buf += chunk
        return bool(chunk)

    def until(self, mark, limit: int = MAX_HEAD):
        """Bytes up to and including `mark` (bytes, or a compiled pattern: RESPONSE_END); None at a clean EOF;
        ValueError when too long or cut."""
        while (end := self._end(mark)) < 0:
            if len(self.buf) > limit:
                raise ValueError("head too long")
            if not self._fill():
                if self.buf:
                    raise ValueError("connection closed mid-head")
                return None
        out = bytes(self.buf[:end])
        del self.buf[:end]
        return out

    def _end(self, mark) -> int:
        """Where `mark` ends in the buffer; -1 when it is not there yet."""
        if isinstance(mark, bytes):
            at = self.buf.find(mark)
            return -1 if at < 0 else at + len(mark)
        found = mark.search(self.buf)
        return found.end() if found else -1

    def some(self, n: int) -> bytes:
        if not self.buf and not self._fill():
            return b""
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


RESPONSE_END = re.compile(rb"\r?\n\r?\n")   # a response head's blank line: CRLF, or bare LF as clients read it


class NoResponse(ValueError):
    """The upstream closed before answering (a kept-alive connection it had already dropped)."""


_CTL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")       # HTAB is the one control byte a head may hold
_TOKEN = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class Request:
    """One request head, refused (ValueError) when another reader could take it two ways."""

    def __init__(self, head: bytes):
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            raise ValueError("not an HTTP/1.x request")
        self.method, self.target, self.version = parts[0].decode("latin-1"), parts[1], parts[2]
        rest = head[:-4].replace(b"\r\n", b"")
        if b"\r" in rest or b"\n" in rest or b"\x00" in rest:
            raise ValueError("a bare CR, LF or NUL in the request head")     # no request hidden in a header
        if _CTL.search(rest) or not _TOKEN.match(parts[0]) or b"\t" in lines[0]:
            raise ValueError("a control character or a bad method in the request head")   # read one way only
        self.headers = [split_header(line) for line in lines[1:] if line]
        if not all(_TOKEN.match(k) for k, _ in self.headers):
            raise ValueError("a header name that is not a token")
        framing = [v.strip().lower() for k, v in self.headers if k.lower() in (b"content-length", b"transfer-encoding")]
        if len(framing) > 1 or (framing and not (framing[0] == b"chunked" or framing[0].isdigit())):
            raise ValueError("ambiguous request framing")                  # one Content-Length or chunked

    def get(self, name: bytes) -> bytes:
        return next((v for k, v in self.headers if k.lower() == name), b"")


def split_header(line: bytes) -> tuple:
    name, sep, value = line.partition(b":")
    if not sep or not name or name != name.strip():
        raise ValueError("bad header line")
    return name, value.strip()


def joined(headers: list) -> dict:
    """{lower-cased name: value}, a header sent several times as one comma-joined value (as a client reads
    it: two Content-Encoding lines are two codings, not the last one)."""
    out: dict = {}
    for name, value in headers:
        low = name.lower()
        out[low] = out[low] + b", " + value if low in out and low != b"content-length" else value
    return out


def send_piece(client, data: bytes, chunked: bool) -> None:
    if data:
        client.sendall(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)


def _chunked(reader: Reader):
    """A chunked body's data in pieces (chunk extensions and trailers dropped)."""
    while True:
        size_line = reader.until(b"\r\n")
        if size_line is None:
            raise ValueError("cut chunked body")
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while reader.until(b"\r\n") not in (b"\r\n", None):      # trailers, dropped
                pass
            return
        yield from _sized(reader, size)
        reader.until(b"\r\n")


def _sized(reader: Reader, left: int):
    """The next `left` bytes in pieces; ValueError when the peer closes first."""
    while left:
        piece = reader.some(min(left, READ_SIZE))
        if not piece:
            raise ValueError("cut body")
        left -= len(piece)
        yield piece


def response_body(up: Reader, headers: dict):
    """The response body's bytes in pieces (chunked, sized, or until close — then a None first)."""
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        yield from _chunked(up)
    elif b"content-length" in headers:
        yield from _sized(up, int(headers[b"content-length"]))
    else:
        yield None
        while piece := up.some(READ_SIZE):
            yield piece


def copy_request_body(req: Request, reader: Reader, up) -> None:
    """The request body as it came, its bytes never rewritten (a chunked one re-chunked piece by
    piece, trailers dropped)."""
    if req.get(b"transfer-encoding"):
        for piece in _chunked(reader):
            send_piece(up, piece, True)
        up.sendall(b"0\r\n\r\n")
    else:
        for piece in _sized(reader, int(req.get(b"content-length") or 0)):
            up.sendall(piece)


_HOST = re.compile(r"^(?:\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)$")


def absolute_target(target: str) -> tuple:
    """http://host[:port]/path?q → ((host, port), '/path?q'); anything else is refused."""
    if not target.lower().startswith("http://"):
        raise ValueError("only http:// absolute targets and CONNECT are proxied")
    authority, slash, path = target[7:].partition("/")
    text = authority.rpartition("@")[2]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or (host.count(":") and not host.startswith("[")):
        host, port = text, "80"
    host, port = host.strip("[]").lower(), int(port)
    if not _HOST.match(f"[{host}]" if ":" in host else host) or not 0 < port < 65536:
        raise ValueError("not a host[:port] in the absolute target")
    return (host, port), "/" + path if slash else "/"


def connect_target(text: str) -> tuple:
    """CONNECT's host:port, strictly (a name, an IPv4 or a bracketed IPv6, a port 1-65535); else ValueError."""
    host, sep, port = text.lower().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not _HOST.match(host):
        raise ValueError("not a host:port CONNECT target")
    return host.strip("[]"), int(port)


def authorities(dest, default: int) -> set:
    """The spellings of host:port a request on a connection to `dest` may name (port left out only when default)."""
    host, port = dest
    shown = f"[{host}]" if ":" in host else host
    return {f"{shown}:{port}"} | ({shown} if port == default else set())


def misdirected(req: Request, scheme: str, dest, target: str) -> tuple:
    """(origin-form target, status, why): status 0 when the request names only `dest` (its Host header and an
    absolute-form target), 421 when it names another site, 400 when it cannot be read one way only (a raw
    byte above 0x7F in the target too)."""
    raw = next((c for c in target if c > "\x7f"), "")
    if raw:                      # a server that reads it as UTF-8 may see a full-width '．' as '.'
        return "", 400, (f"its target holds the raw byte 0x{ord(raw):02X}, which servers read two ways: "
                         f"send every byte above 0x7F percent-encoded (%{ord(raw):02X})")
    allowed = authorities(dest, 443 if scheme == "https" else 80)
    hosts = [v.decode("latin-1").lower() for k, v in req.headers if k.lower() == b"host"]
    if len(hosts) > 1:
        return target, 400, "two Host headers"
    if hosts and hosts[0] not in allowed:
        return target, 421, "its Host header names another site"
    if target.startswith("/") or (target == "*" and req.method == "OPTIONS"):
        return target, 0, ""
    named, sep, rest = target.partition("://")
    authority, slash, path = rest.partition("/")
    if not sep or "@" in authority or any(c in authority for c in "?#\\"):
        return "", 400, "its target is neither a path nor an absolute URL"
    if named.lower() != scheme or authority.lower() not in allowed:
        return "/" + path, 421, "its absolute-form target names another site"
    return "/" + path if slash else "/", 0, ""


_PERCENT = re.compile(r"%(?![0-9a-fA-F]{2})")
_ENCODED = (("%25", "a double-encoded character (%25..)"), ("%2e", "an encoded dot (%2e)"),
            ("%2f", "an encoded slash (%2f)"), ("%5c", "an encoded backslash (%5c)"), ("\\", "a backslash"),
            ("#", "a '#'"), ("%00", "an encoded NUL"))


def checked_path(raw: str) -> tuple:
    """(the decoded path, '') or ('', why not): forms two servers could read two ways are refused, not
    normalised — dot segments (also '..;' and encoded), encoded dots, slashes, backslashes, double encoding."""
    from urllib.parse import unquote_to_bytes
    if not raw.startswith("/"):
        return "", "not a path"
    for form, why in _ENCODED:
        if form in raw.lower():
            return "", why
    if _PERCENT.search(raw):
        return "", "a malformed %-escape"
    try:
        plain = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return "", "bytes that are not UTF-8 once decoded (an overlong form)"
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in plain):
        return "", "a control character"
    if not plain.isascii():
        import unicodedata
        if any(c in "./\\%;" for c in unicodedata.normalize("NFKC", "".join(c for c in plain if ord(c) > 127))):
            return "", "a character that normalises to '.', '/', '\\', '%' or ';'"
    if any(seg.split(";")[0] in (".", "..") for seg in plain.split("/")):
        return "", "a dot segment ('.', '..', '..;')"
    return plain, ""


_REASONS = {400: "Bad Request", 421: "Misdirected Request", 502: "Bad Gateway"}


def refuse(client, status: int, text: str) -> None:
    """A short plain-text answer from the proxy itself, then the connection is closed."""
    body = text.encode("utf-8", "replace") + b"\n"
    try:
        client.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (status, _REASONS[status].encode(), len(body), body))
    except OSError:
        pass
