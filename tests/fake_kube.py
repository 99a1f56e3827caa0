"""A tiny Kubernetes API server over TLS on 127.0.0.1 — enough for `kubectl get nodes` — and a
kubeconfig pointing at it. Modes: "ok" answers; "unauthorized" answers 401 to everything."""
from __future__ import annotations

import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RESOURCES = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
    {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": ["get", "list"],
     "shortNames": ["no"]},
    {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["get", "list"],
     "shortNames": ["po"]}]}
NODES = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": [
    {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "node-a", "creationTimestamp": "2026-01-01T00:00:00Z"},
     "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.0"}}}]}


def make_cert(root: Path) -> tuple:
    """A self-signed certificate for 127.0.0.1 with a P-256 key (generating an RSA key was most of a test's setup)."""
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="kube-", dir=root))
    cert, key = folder / "kube.crt", folder / "kube.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


class _Handler(BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *args):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.server.mode == "unauthorized":
            return self._send(401, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                    "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        path = self.path.split("?")[0]
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
        if path == "/apis":
            return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if path == "/api/v1":
            return self._send(200, RESOURCES)
        if path == "/api/v1/nodes":
            return self._send(200, NODES)
        if path == "/version":
            return self._send(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0"})
        return self._send(404, {"kind": "Status", "status": "Failure", "code": 404, "message": "not found"})


class FakeKube:
    def __init__(self, root: Path, mode: str = "ok"):
        self.cert, key = make_cert(root)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.mode = mode
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(key))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def kubeconfig(path: Path, contexts: dict) -> Path:
    """contexts: {name: (port, ca file)}; each gets a cluster at https://127.0.0.1:PORT and a token user."""
    lines = ["apiVersion: v1", "kind: Config", "clusters:"]
    for name, (port, ca) in contexts.items():
        lines += [f"- name: {name}", "  cluster:", f"    server: https://127.0.0.1:{port}",
                  f"    certificate-authority: {ca}"]
    lines.append("users:")
    lines += ["- name: tester", "  user:", "    token: kube-test-token-0000"]
    lines.append("contexts:")
    for name in contexts:
        lines += [f"- name: {name}", "  context:", f"    cluster: {name}", "    user: tester"]
    path.write_text("\n".join(lines) + "\n")
    return path
