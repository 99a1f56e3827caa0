"""The per-run CA of the host-bound proxy: key in memory only, its certificate a public PEM, leaf certs per host."""
from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
import threading

from .errors import MissingExtra, RecallError


def _crypto():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise MissingExtra("crypto", "host-bound secrets (inject: proxy)") from None
    return x509, hashes, serialization, ec, NameOID, ExtendedKeyUsageOID


class EphemeralCA:
    """A CA made for one run. Its key never leaves this process's memory; `cert_path` (public) lives
    in a 0700 folder that `close` removes; leaf certificates are made on first use, one per host."""

    def __init__(self):
        x509, hashes, serialization, ec, NameOID, _ = _crypto()
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())   # one key for every leaf of this run
        now = datetime.datetime.now(datetime.timezone.utc)
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "recall host-bound proxy (this run only)")])
        self._cert = (x509.CertificateBuilder().subject_name(self._name).issuer_name(self._name)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5))
                      .not_valid_after(now + datetime.timedelta(days=2))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False,
                                                   encipher_only=False, decipher_only=False), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.pem = self._cert.public_bytes(serialization.Encoding.PEM)
        self._dir = tempfile.mkdtemp(prefix="recall-proxy-")        # 0700 by mkdtemp
        self.cert_path = os.path.join(self._dir, "ca.pem")
        fd = os.open(self.cert_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(self.pem)
        self._contexts: dict = {}
        self._lock = threading.Lock()

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a leaf for `host` signed by this CA (cached)."""
        host = host.lower()
        with self._lock:
            ctx = self._contexts.get(host)
            if ctx is None:
                ctx = self._contexts[host] = self._context_for(host)
            return ctx

    def _context_for(self, host: str) -> ssl.SSLContext:
        x509, hashes, serialization, ec, NameOID, EKU = _crypto()
        try:
            alt = x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
        except ValueError:
            alt = x509.DNSName(host)
        now = datetime.datetime.now(datetime.timezone.utc)
        leaf = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
                .issuer_name(self._name).public_key(self._leaf_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([EKU.SERVER_AUTH]), critical=False)
                .sign(self._key, hashes.SHA256()))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.set_alpn_protocols(["http/1.1"])          # the proxy speaks HTTP/1.1 to the child
        key_pem = self._leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption())
        _load_chain_from_memory(ctx, leaf.public_bytes(serialization.Encoding.PEM) + self.pem, key_pem)
        return ctx

    def close(self) -> None:
        """Remove the CA file and its folder (the key goes with this object)."""
        for path in (self.cert_path, self._dir):
            try:
                (os.rmdir if path == self._dir else os.unlink)(path)
            except OSError:
                pass


def _load_chain_from_memory(ctx: ssl.SSLContext, chain: bytes, key: bytes) -> None:
    """ssl loads a key only from a file: write it to an anonymous memory file (never a disk path)."""
    fd = os.memfd_create("recall-leaf", 0) if hasattr(os, "memfd_create") else None
    if fd is None:          # no anonymous memory file here: refuse rather than write a key to disk
        raise RecallError("host-bound secrets (inject: proxy) need Linux here (memfd_create)",
                          "use inject: env for this secret on this platform")
    try:
        os.write(fd, key + chain)
        path = f"/proc/self/fd/{fd}"
        ctx.load_cert_chain(path, path)
    finally:
        os.close(fd)
