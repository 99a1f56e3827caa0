"""A local HTTPS stand-in for a token API (its own test CA), recording what each request carried."""
from __future__ import annotations

import datetime
import hashlib
import ipaddress
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

BIG = 10 * 1024 * 1024


def big_body() -> bytes:
    block = hashlib.sha256(b"recall").digest() * 2048          # 64 KiB, not compressible to nothing
    return (block * (BIG // len(block) + 1))[:BIG]


BOMB = 128 * 1024 * 1024
_BOMB: list = []


def gzip_bomb() -> bytes:
    """BOMB zero bytes gzipped (~130 KB on the wire), made once."""
    if not _BOMB:
        import zlib
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        block = bytes(1024 * 1024)
        _BOMB.append(b"".join(z.compress(block) for _ in range(BOMB // len(block))) + z.flush())
    return _BOMB[0]


def make_test_ca(folder: Path) -> tuple:
    """(ca.pem path, server cert path, server key path) for 127.0.0.1 and localhost, made here."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "recall test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: bytes, headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _record(self, body=b""):
        parts = urlsplit(self.path)
        self.server.seen.append({"path": parts.path, "query": parts.query, "auth": self.headers.get("Authorization", ""),
                                 "port": self.server.server_address[1], "body": body,
                                 "conn": id(self.connection), "host": self.headers.get("Host", ""),
                                 "headers": dict(self.headers.items())})
        return parts

    def do_GET(self):
        parts = self._record()
        auth = self.headers.get("Authorization", "")
        token = self.server.token
        if parts.path == "/myself":
            ok = auth == f"Bearer {token}"
            self._send(200 if ok else 401, b'{"name": "me"}\n' if ok else b'{"error": "unauthorized"}\n')
        elif parts.path == "/echo":             # a careless API that echoes the credential (and honours Range)
            body, got = f"you sent {auth}\n".encode(), re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            if got:
                first, last = int(got[1]), min(int(got[2]), len(body) - 1)
                self._send(206, body[first:last + 1], [("Content-Range", f"bytes {first}-{last}/{len(body)}")])
            else:
                self._send(200, body, [("X-Echo", auth)])
        elif parts.path == "/gzip":             # compressed even though the request asked for identity
            import gzip
            self._send(200, gzip.compress(f"you sent {auth}\n".encode()), [("Content-Encoding", "gzip")])
        elif parts.path == "/split":            # the echoed credential cut across two chunks, sent apart
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (f"you sent {auth[:12]}".encode(), f"{auth[12:]}\n".encode()):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif parts.path in ("/two-codings", "/gzip-transfer"):     # gzip a client reads, said two ways
            import gzip
            body = gzip.compress(f"you sent {auth}\n".encode())
            self.send_response(200)
            if parts.path == "/two-codings":            # a second line, not the last one, names the gzip
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Encoding", "identity")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:                                       # a transfer coding under the chunks
                self.send_header("Transfer-Encoding", "gzip, chunked")
                self.end_headers()
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        elif parts.path == "/events":           # an event stream: the next event only once the child asks
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(2):
                piece = b"data: event 0\n\n" if i == 0 else b"data: event 1 %s\n\n" % (
                    b"after the nudge" if self.server.nudge.wait(30) else b"unasked, 30 s later")
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif parts.path == "/nudge":
            self.server.nudge.set()
            self._send(200, b"nudged\n")
        elif parts.path == "/bare-lf":          # lines ended by LF alone, the connection kept open
            body = f"you sent {auth}\n".encode()
            self.wfile.write(b"HTTP/1.1 200 OK\nX-Echo: %s\nContent-Length: %d\n\n%s" % (auth.encode(), len(body), body))
        elif parts.path == "/raw-deflate":      # 'deflate' without the zlib header, as some servers send it
            import zlib
            z = zlib.compressobj(9, zlib.DEFLATED, -15)
            self._send(200, z.compress(f"you sent {auth}\n".encode()) + z.flush(), [("Content-Encoding", "deflate")])
        elif parts.path == "/bomb":
            self._send(200, gzip_bomb(), [("Content-Encoding", "gzip")])
        elif parts.path == "/br":
            self._send(200, b"\x1b\x00 not really brotli", [("Content-Encoding", "br")])
        elif parts.path == "/query":
            ok = parse_qs(parts.query).get("token") == [token]
            self._send(200 if ok else 401, b"query ok\n" if ok else b"query refused\n")
        elif parts.path == "/big":
            self._send(200, big_body(), [("Content-Type", "application/octet-stream")])
        elif parts.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(50):
                piece = f"line {i}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self._send(404, b"no such path\n")

    def do_POST(self):
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if not size:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._record(body)
        self._send(200, hashlib.sha256(body).hexdigest().encode() + b"\n")


class StandIn:
    """`with StandIn(folder, token) as s:` an HTTPS server on 127.0.0.1:s.port with s.ca its CA file."""

    def __init__(self, folder: Path, token: str, tls: bool = True, certs=None):
        self.ca, cert, key = certs or make_test_ca(folder)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.seen, self.server.token, self.server.nudge = [], token, threading.Event()
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(cert), str(key))
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.certs = (self.ca, cert, key)
        self.port = self.server.server_address[1]
        self.seen = self.server.seen

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True, kwargs={"poll_interval": 0.05}).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
