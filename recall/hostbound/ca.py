"""The per-run CA of the host-bound proxy: key in memory only, its certificate a public PEM, leaf certs per host."""
from __future__ import annotations

import base64
import os
import tempfile
import threading
import time

from ..errors import MissingExtra, RecallError

# Certificates are written as DER here (a few dozen lines) rather than with cryptography.x509:
# its import costs more than the rest of `secret exec` start-up together.
_EC_KEY, _P256, _ECDSA_SHA256 = "1.2.840.10045.2.1", "1.2.840.10045.3.1.7", "1.2.840.10045.4.3.2"
_CN, _BASIC, _KEY_USAGE, _SAN, _EKU = "2.5.4.3", "2.5.29.19", "2.5.29.15", "2.5.29.17", "2.5.29.37"
_SKI, _AKI, _SERVER_AUTH = "2.5.29.14", "2.5.29.35", "1.3.6.1.5.5.7.3.1"


def _ec():
    try:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        raise MissingExtra("crypto", "host-bound secrets (inject: proxy)") from None
    return ec, hashes


def _tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    if n < 128:
        return bytes([tag, n]) + body
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + body


def _seq(*parts: bytes) -> bytes:
    return _tlv(0x30, b"".join(parts))


def _int(n: int) -> bytes:
    return _tlv(0x02, n.to_bytes(n.bit_length() // 8 + 1, "big"))


def _oid(text: str) -> bytes:
    arcs = [int(a) for a in text.split(".")]
    out = bytearray([40 * arcs[0] + arcs[1]])
    for arc in arcs[2:]:
        chunk = [arc & 0x7F]
        while arc > 0x7F:
            arc >>= 7
            chunk.append(0x80 | (arc & 0x7F))
        out += bytes(reversed(chunk))
    return _tlv(0x06, bytes(out))


def _bits(data: bytes, unused: int = 0) -> bytes:
    return _tlv(0x03, bytes([unused]) + data)


def _name(cn: str) -> bytes:
    return _seq(_tlv(0x31, _seq(_oid(_CN), _tlv(0x0C, cn.encode("utf-8")))))


def _ext(oid: str, value: bytes, critical: bool = False) -> bytes:
    return _seq(_oid(oid), *([_tlv(0x01, b"\xff")] if critical else []), _tlv(0x04, value))


def _point(key) -> bytes:
    nums = key.public_key().public_numbers()
    return b"\x04" + nums.x.to_bytes(32, "big") + nums.y.to_bytes(32, "big")


def _cert(key, signer, subject: bytes, issuer: bytes, days: float, extensions: list) -> bytes:
    """A signed X.509 v3 certificate (DER) for `key`, signed by `signer` (both P-256)."""
    ec, hashes = _ec()
    now = time.time()
    spki = _seq(_seq(_oid(_EC_KEY), _oid(_P256)), _bits(_point(key)))
    validity = _seq(*(_tlv(0x17, time.strftime("%y%m%d%H%M%SZ", time.gmtime(t)).encode())
                      for t in (now - 300, now + days * 86400)))
    tbs = _seq(_tlv(0xA0, _int(2)), _int(int.from_bytes(os.urandom(16), "big") >> 1),
               _seq(_oid(_ECDSA_SHA256)), issuer, validity, subject, spki, _tlv(0xA3, _seq(*extensions)))
    signature = signer.sign(tbs, ec.ECDSA(hashes.SHA256()))
    return _seq(tbs, _seq(_oid(_ECDSA_SHA256)), _bits(signature))


def _pem(kind: str, der: bytes) -> bytes:
    body = base64.b64encode(der)
    lines = b"\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return b"-----BEGIN %s-----\n%s\n-----END %s-----\n" % (kind.encode(), lines, kind.encode())


class EphemeralCA:
    """A CA made for one run. Its key never leaves this process's memory; `cert_path` (public) lives
    in a 0700 folder that `close` removes; leaf certificates are made on first use, one per host."""

    def __init__(self):
        ec, _ = _ec()
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key = None            # made with the first leaf, in the proxy's thread
        self._issuer = _name("recall host-bound proxy (this run only)")
        self._ca_id = os.urandom(20)       # the subject key id: any unique bytes (no hashlib on the start-up path)
        der = _cert(self._key, self._key, self._issuer, self._issuer, 2, [
            _ext(_BASIC, _seq(_tlv(0x01, b"\xff"), _int(0)), critical=True),
            _ext(_KEY_USAGE, _bits(b"\x86", 1), critical=True),          # keyCertSign, cRLSign, digitalSignature
            _ext(_SKI, _tlv(0x04, self._ca_id))])
        self.pem = _pem("CERTIFICATE", der)
        _sweep_left_behind()
        self._dir = tempfile.mkdtemp(prefix=f"recall-proxy-{os.getpid()}-")        # 0700 by mkdtemp
        self.cert_path = os.path.join(self._dir, "ca.pem")
        with open(os.open(self.cert_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
            fh.write(self.pem)
        self._contexts: dict = {}
        self._lock = threading.Lock()

    def server_context(self, host: str):
        """A TLS server context presenting a leaf for `host` signed by this CA (cached)."""
        host = host.lower()
        with self._lock:
            if host not in self._contexts:
                self._contexts[host] = self._context_for(host)
            return self._contexts[host]

    def _context_for(self, host: str):
        import ipaddress
        import ssl  # in the proxy's thread, not on `secret exec` start-up
        ec, _ = _ec()
        if self._leaf_key is None:
            self._leaf_key = ec.generate_private_key(ec.SECP256R1())   # one key for every leaf of this run
        try:
            alt = _tlv(0x87, ipaddress.ip_address(host.strip("[]")).packed)
        except ValueError:
            alt = _tlv(0x82, host.encode("idna"))
        der = _cert(self._leaf_key, self._key, _name(host[:64]), self._issuer, 1, [
            _ext(_BASIC, _seq(), critical=True),
            _ext(_KEY_USAGE, _bits(b"\x80", 7), critical=True),         # digitalSignature
            _ext(_EKU, _seq(_oid(_SERVER_AUTH))),
            _ext(_SAN, _seq(alt)),
            _ext(_AKI, _seq(_tlv(0x80, self._ca_id)))])
        nums = self._leaf_key.private_numbers()
        key_der = _seq(_int(1), _tlv(0x04, nums.private_value.to_bytes(32, "big")), _tlv(0xA0, _oid(_P256)),
                       _tlv(0xA1, _bits(_point(self._leaf_key))))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.set_alpn_protocols(["http/1.1"])          # the proxy speaks HTTP/1.1 to the child
        _load_chain_from_memory(ctx, _pem("CERTIFICATE", der) + self.pem, _pem("EC PRIVATE KEY", key_der))
        return ctx

    def close(self) -> None:
        """Remove the CA file and its folder (the key goes with this object)."""
        for path in (self.cert_path, self._dir):
            try:
                (os.rmdir if path == self._dir else os.unlink)(path)
            except OSError:
                pass


def _sweep_left_behind() -> None:
    """Remove the CA folders of runs that were killed (kill -9) before `close`: ours, their pid gone."""
    from ..db.pids import alive
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith("recall-proxy-")]
    except OSError:
        return
    for name in names:
        pid, path = name.split("-")[2], os.path.join(root, name)
        try:
            if not pid.isdigit() or os.lstat(path).st_uid != os.getuid() or alive(int(pid)):
                continue
            for leftover in os.listdir(path):
                os.unlink(os.path.join(path, leftover))
            os.rmdir(path)
        except OSError:
            continue


def _load_chain_from_memory(ctx, chain: bytes, key: bytes) -> None:
    """ssl loads a key only from a file: write it to an anonymous memory file (never a disk path)."""
    if not hasattr(os, "memfd_create"):     # refuse rather than write a key to disk
        raise RecallError("host-bound secrets (inject: proxy) need Linux here (memfd_create)",
                          "use inject: env for this secret on this platform")
    fd = os.memfd_create("recall-leaf", 0)
    try:
        os.write(fd, key + chain)
        path = f"/proc/self/fd/{fd}"
        ctx.load_cert_chain(path, path)
    finally:
        os.close(fd)
