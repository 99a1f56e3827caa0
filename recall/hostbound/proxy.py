"""The loopback egress proxy: CONNECT with TLS interception, placeholders swapped for values only where bound."""
from __future__ import annotations

import base64
import hmac
import os
import socket
import threading
from contextlib import suppress

from . import http1

IDLE = 300.0           # seconds a connection (child or upstream) may stay silent
_NO_BODY = (204, 304)
_PLACES = {"header": "refused: not in the Authorization header",
           "query": "refused: not in a header (in_query is not set)", "path": "refused: not in a header"}
_HOP = {b"proxy-authorization", b"proxy-connection", b"keep-alive", b"te", b"trailer", b"upgrade",
        b"transfer-encoding", b"content-length", b"expect", b"accept-encoding", b"connection",
        b"range", b"if-range"}      # not hop-by-hop, but a slice of an echoed value is a piece no mask knows


class Binding:
    """One placeholder: the value it stands for, and the only requests that may carry it."""

    def __init__(self, secret_id: str, placeholder: str, value: str, host: str, port: int, paths, query: bool):
        self.secret_id, self.placeholder, self.value = secret_id, placeholder.encode(), value.encode()
        self.host, self.port, self.paths, self.query = host.lower(), int(port), list(paths), query

    def refusal(self, scheme: str, host: str, port: int, path: str) -> str:
        """'' when a request to scheme://host:port/path may carry the value, else why not."""
        if scheme != "https" or host.lower() != self.host or port != self.port:
            return f"refused: bound to https://{self.host}:{self.port}"
        if self.paths:
            plain, why = http1.checked_path(path)
            if why:
                return f"refused: the path holds {why}"
            if not any(plain == p or plain.startswith(p if p.endswith("/") else p + "/") for p in self.paths):
                return "refused: path outside paths:"
        return ""

    def in_basic(self, value: bytes) -> bool:
        """Whether `value` is Basic credentials holding this placeholder once decoded."""
        if value[:6].lower() != b"basic ":
            return False
        try:
            return self.placeholder in base64.b64decode(value[6:].strip(), validate=True)
        except ValueError:
            return False


class HostBoundProxy:
    """A 127.0.0.1 proxy for one child: a random port, a per-run credential, threads of this process;
    `release`: seconds a response may pause before the masker's held tail goes out (exec's rule)."""

    def __init__(self, bindings: list, masker, ca, trust_files=(), release: float = 0.5):
        self.bindings, self.masker, self.ca, self.release = bindings, masker, ca, release
        for path in trust_files:
            if not os.access(path, os.R_OK):
                raise ValueError(f"{path} cannot be read")
        self._upstream_tls = None           # the system trust store loads in a thread: off the start-up path
        self._trust_ready = threading.Event()
        threading.Thread(target=self._load_trust, args=(list(trust_files),), name="recall-proxy-trust",
                         daemon=True).start()
        self.requests = 0
        self.events: list = []          # (secret id, verdict, method, scheme, host, port, path)
        self.problems: list = []        # one line each: a TLS handshake the child refused, an upstream error
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._socks: set = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        secret = os.urandom(18).hex()
        self._auth = b"Basic " + base64.b64encode(b"recall:" + secret.encode())
        self.url = f"http://recall:{secret}@127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="recall-proxy", daemon=True).start()

    def _load_trust(self, trust_files: list) -> None:
        import ssl  # here, in a thread: ssl and the trust store stay off start-up
        try:
            ctx = ssl.create_default_context()              # the system trust store
            for path in trust_files:
                ctx.load_verify_locations(path)             # plus the secrets' own ca: files
            ctx.set_alpn_protocols(["http/1.1"])
            self._upstream_tls = ctx
        except (OSError, ValueError) as exc:         # ssl.SSLError is an OSError
            self._note("problem", f"the ca: file of a host-bound secret cannot be loaded ({_short(exc)})")
        finally:
            self._trust_ready.set()

    def close(self) -> None:
        """Stop listening and cut every open connection."""
        self._closed.set()
        with suppress(OSError):         # close() alone leaves a thread's accept() listening (recall mcp lives on)
            self._listener.shutdown(socket.SHUT_RDWR)
        with suppress(OSError):
            self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _note(self, what: str, *items) -> None:
        with self._lock:
            if what == "event":
                self.events.append(items)
            elif items[0] not in self.problems and len(self.problems) < 20:
                self.problems.append(items[0])

    def _track(self, sock, add: bool = True) -> None:
        with self._lock:
            (self._socks.add if add else self._socks.discard)(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            conn = None
            try:
                conn, _ = self._listener.accept()
                if not self._closed.is_set():
                    threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
                    continue
            except (OSError, RuntimeError) as exc:      # no descriptor or thread left (EMFILE): not for good
                if not self._closed.is_set():
                    self._note("problem", f"the proxy could not take a connection ({_short(exc)})")
                    self._closed.wait(0.05)
            if conn is not None:
                conn.close()

    def _serve(self, conn) -> None:
        conn.settimeout(IDLE)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)      # small writes go out at once
        self._track(conn)
        try:
            reader = http1.Reader(conn)
            head = reader.until(b"\r\n\r\n")
            if head is None:
                return
            req = http1.Request(head)
            if not hmac.compare_digest(req.get(b"proxy-authorization"), self._auth):
                conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic "
                             b"realm=\"recall\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            if req.method != "CONNECT":
                reader.buf[:0] = head           # a plain-http request: _exchange reads it again
                self._exchange(conn, reader, "http", None)
                return
            try:
                host, port = http1.connect_target(req.target.decode("latin-1"))
            except ValueError:
                http1.refuse(conn, 400, "recall proxy: CONNECT needs host:port")
                return
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            try:
                tls = self.ca.server_context(host).wrap_socket(conn, server_side=True)
            except OSError as exc:
                self._note("problem", f"the child refused the proxy's TLS certificate for {host} ({_short(exc)}): "
                                      "it must trust the CA file in SSL_CERT_FILE")
                return
            self._track(tls)
            conn = tls
            self._exchange(tls, http1.Reader(tls), "https", (host, port))
        except (OSError, ValueError):
            pass
        except Exception as exc:        # a bug: one line, never a traceback on the child's terminal
            self._note("problem", f"the proxy dropped a connection ({type(exc).__name__})")
        finally:
            self._track(conn, False)
            with suppress(OSError):
                conn.close()

    def _exchange(self, client, reader, scheme: str, dest) -> None:
        """Requests from one child connection, each to its upstream (kept alive while it can be)."""
        upstream = None                 # (dest, sock, reader)
        try:
            while (head := reader.until(b"\r\n\r\n")) is not None:
                req = http1.Request(head)
                target, where = req.target.decode("latin-1"), dest
                if scheme == "http":
                    if not hmac.compare_digest(req.get(b"proxy-authorization"), self._auth):
                        return
                    where, target = http1.absolute_target(target)
                with self._lock:
                    self.requests += 1
                target, status, why = http1.misdirected(req, scheme, where, target)
                if status:                      # never forwarded: a shared front could route it to another site
                    self._misdirected(client, req, head, scheme, where, target, status, why)
                    return
                if upstream is not None and upstream[0] != where:
                    upstream[1].close()
                    upstream = None
                out_head = self._rewrite(req, scheme, where, target)
                if req.get(b"expect").lower() == b"100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                bodiless = not req.get(b"content-length").strip(b"0") and not req.get(b"transfer-encoding")
                while True:          # a kept-alive upstream the server closed: once more, afresh
                    fresh = upstream is None
                    if fresh:
                        try:
                            upstream = (where, *self._connect(scheme, where))
                        except (OSError, ValueError) as exc:
                            self._note("problem", f"{scheme}://{where[0]}:{where[1]}: {_short(exc)}")
                            http1.refuse(client, 502, f"recall proxy: cannot reach {where[0]}:{where[1]} "
                                                      f"({_short(exc)})")
                            return
                    try:
                        try:
                            upstream[1].sendall(out_head)
                        except (BrokenPipeError, ConnectionResetError):
                            raise http1.NoResponse("upstream closed") from None
                        http1.copy_request_body(req, reader, upstream[1])
                        keep_up, keep_client = self._relay_response(req, upstream[2], client)
                        break
                    except http1.NoResponse:         # raised only before anything reached the child
                        upstream[1].close()
                        upstream = None
                        if fresh or not bodiless:
                            raise
                if not keep_up:
                    upstream[1].close()
                    upstream = None
                if not keep_client:
                    return
        finally:
            if upstream is not None:
                upstream[1].close()

    def _connect(self, scheme: str, where) -> tuple:
        sock = socket.create_connection(where, timeout=IDLE)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            try:
                self._trust_ready.wait()
                if self._upstream_tls is None:
                    raise ValueError("no trust store to verify the service with")
                sock = self._upstream_tls.wrap_socket(sock, server_hostname=where[0])
            except BaseException:
                sock.close()
                raise
        self._track(sock)
        return sock, http1.Reader(sock)

    def _rewrite(self, req: http1.Request, scheme: str, where, target: str) -> bytes:
        """The request head as sent upstream: placeholders replaced only where bound, hop headers dropped."""
        path, sep, query = target.partition("?")
        lines, chunked = [], False
        for name, value in req.headers:
            low = name.lower()
            if low == b"transfer-encoding":
                chunked = True                  # Request allows only 'chunked' here, and no Content-Length
            if low in _HOP and low != b"content-length":
                continue
            place = "authorization" if low == b"authorization" else "header"
            lines.append(name + b": " + self._swap(value, req.method, scheme, where, path, place))
        if not req.get(b"host"):                # an HTTP/1.0 request: the site its connection is for
            lines.insert(0, b"Host: " + min(http1.authorities(where, 443 if scheme == "https" else 80),
                                            key=len).encode("latin-1"))
        if chunked:
            lines.append(b"Transfer-Encoding: chunked")
        lines.append(b"Accept-Encoding: identity")      # a compressed body could not be masked
        if query:
            query = self._swap(query.encode("latin-1"), req.method, scheme, where, path, "query").decode("latin-1")
        self._swap(path.encode("latin-1"), req.method, scheme, where, path, "path")      # a path never carries it
        line = f"{req.method} {path}{sep}{query} HTTP/1.1".encode("latin-1")
        return b"\r\n".join([line, *lines]) + b"\r\n\r\n"

    def _swap(self, text: bytes, method: str, scheme: str, where, path: str, place: str) -> bytes:
        """`text` (an Authorization value, another header's, the query, the path) with each placeholder that may
        be replaced there replaced, and one event per placeholder found."""
        for b in self.bindings:
            basic = place == "authorization" and b.in_basic(text)
            if b.placeholder not in text and not basic:
                continue
            allowed = place == "authorization" or (place == "query" and b.query)
            why = b.refusal(scheme, where[0], where[1], path) or ("" if allowed else _PLACES[place])
            self._note("event", b.secret_id, why or "substituted", method, scheme, where[0], where[1], path)
            if why:
                continue
            if basic:
                raw = base64.b64decode(text[6:].strip()).replace(b.placeholder, b.value)
                text = text[:6] + base64.b64encode(raw)
            elif place == "query":
                from urllib.parse import quote
                text = text.replace(b.placeholder, quote(b.value.decode(), safe="").encode())
            else:
                text = text.replace(b.placeholder, b.value)
        return text

    def _misdirected(self, client, req: http1.Request, head: bytes, scheme: str, where, target: str,
                     status: int, why: str) -> None:
        """Answer 421/400 and close: nothing of the request goes upstream. Each placeholder it held is logged
        as refused; the answer names no value nor header."""
        path = target.partition("?")[0]
        for b in self.bindings:
            basic = any(k.lower() == b"authorization" and b.in_basic(v) for k, v in req.headers)
            if b.placeholder in head or basic:
                self._note("event", b.secret_id, f"refused: {why} ({status}, not forwarded)", req.method, scheme,
                           where[0], where[1], path)
        self._note("problem", f"a request on the connection to {where[0]}:{where[1]} was refused ({status}): {why}")
        http1.refuse(client, status, f"recall proxy: this connection is for {where[0]}:{where[1]} and {why}; "
                                     "nothing was forwarded")

    def _relay_response(self, req: http1.Request, up: http1.Reader, client) -> tuple:
        """Stream one response to the child, headers and body masked, re-framed as chunked."""
        while True:
            try:
                head = up.until(http1.RESPONSE_END)     # a server ending lines in bare LF: read, not waited on
            except ConnectionResetError:
                head = None
            if head is None:
                raise http1.NoResponse("upstream closed without a response")
            status = int(head.split(b" ", 2)[1])
            if status >= 200 or status == 101:
                break                               # 1xx (100 Continue, 103) were answered already
        lines = [line.rstrip(b"\r") for line in head.rstrip(b"\r\n").split(b"\n")]
        headers = [http1.split_header(line) for line in lines[1:] if line]
        get = http1.joined(headers)
        has_body = req.method != "HEAD" and status not in _NO_BODY and status >= 200
        keep_client = req.version == b"HTTP/1.1" and req.get(b"connection").lower() != b"close"
        coding = get.get(b"content-encoding", b"").strip().lower() if has_body else b""
        framing = get.get(b"transfer-encoding", b"").strip().lower() if has_body else b""
        if coding not in (b"", b"identity", b"gzip", b"x-gzip", b"deflate") or framing not in (b"", b"chunked"):
            # asked for identity, sent something we cannot read (two codings, a gzip transfer coding): it could
            # hide an echoed value
            shown = (coding if framing in (b"", b"chunked") else framing).decode("latin-1")[:20]
            self._note("problem", f"a response in {shown} encoding was not passed on "
                                  "(it could not be checked for the value)")
            http1.refuse(client, 502, "recall proxy: the response's content encoding cannot be masked")
            return False, False
        compressed = coding not in (b"", b"identity")
        dropped = (b"transfer-encoding", b"content-length", b"connection", b"keep-alive") + (
            (b"content-encoding",) if compressed else ())
        out = [lines[0]] + [k + b": " + v for k, v in headers if k.lower() not in dropped]
        chunked = req.version == b"HTTP/1.1"          # an HTTP/1.0 child reads the body until close
        if has_body and chunked:
            out.append(b"Transfer-Encoding: chunked")
        elif not has_body and b"content-length" in get:
            out.append(b"Content-Length: " + get[b"content-length"])
        if not keep_client:
            out.append(b"Connection: close")
        client.sendall(self.masker.mask(b"\r\n".join(out) + b"\r\n\r\n"))
        keep_up = b"close" not in (t.strip() for t in get.get(b"connection", b"").lower().split(b","))
        if not has_body:
            return keep_up, keep_client
        stream = self.masker.stream()
        inflate = None                  # made from the first piece (masked as plain bytes)
        # a paused response (an event stream, a watch) gets its held tail now, not with the next event
        up.pause = (self.release, lambda: stream.holding,
                    lambda: http1.send_piece(client, stream.release(), chunked))
        try:
            for piece in http1.response_body(up, get):
                if piece is None:                       # read until close: the upstream cannot be reused
                    keep_up = False
                    continue
                if compressed and inflate is None:
                    inflate = _inflater(coding, piece)
                for data in (_inflated(inflate, piece) if inflate else (piece,)):
                    http1.send_piece(client, stream.feed(data), chunked)
        finally:
            up.pause = None
        http1.send_piece(client, stream.feed(inflate.flush()) if inflate else b"", chunked)
        http1.send_piece(client, stream.flush(), chunked)
        if chunked:
            client.sendall(b"0\r\n\r\n")
        return keep_up, keep_client


def _inflater(coding: bytes, first: bytes):
    """gzip or zlib, told by its header; a 'deflate' body sent without the zlib header (curl and urllib3
    read one) as raw deflate."""
    import zlib
    headed = first[:2] == b"\x1f\x8b" or (len(first) > 1 and first[0] & 0x0F == 8 and
                                          (first[0] << 8 | first[1]) % 31 == 0)
    return zlib.decompressobj(47 if headed or coding != b"deflate" else -15)


def _inflated(inflate, piece: bytes):
    """The plain bytes of one compressed piece, READ_SIZE at a time: a small bomb is streamed, never held whole."""
    while data := inflate.decompress(piece, http1.READ_SIZE):
        yield data
        piece = inflate.unconsumed_tail


def _short(exc: BaseException) -> str:
    text = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())[:160]
