"""Host-bound secrets (inject: proxy): real curl and Python clients through recall's proxy to a local HTTPS stand-in."""
import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("cryptography")
pytestmark = pytest.mark.extras

from tests.conftest import CANARY, REPO, run_recall  # noqa: E402
from tests.standin_https import BOMB, StandIn, big_body  # noqa: E402
from tests.world import build  # noqa: E402

FORMS = [CANARY, CANARY[::-1], base64.b64encode(CANARY.encode()).decode(),
         base64.b32encode(CANARY.encode()).decode()]


@pytest.fixture
def api(tmp_path):
    with StandIn(tmp_path / "certs", CANARY) as server:
        yield server


def write_world(tmp_path, monkeypatch, api, extra: str = "", inventory: str | None = None) -> Path:
    w = build(tmp_path, secrets=f"""\
- id: jira-api-token
  service: jira
  inject: proxy
  url: https://127.0.0.1:{api.port}/
  ca: {api.ca}
  env: JIRA_API_TOKEN
  value: "{CANARY}"
{extra}""", inventory=inventory)
    monkeypatch.setenv("RECALL_CONFIG", str(w.config))
    return w.secrets


@pytest.fixture
def world(tmp_path, monkeypatch, api):
    secrets = write_world(tmp_path, monkeypatch, api)
    r = run_recall("secret", "sync")
    assert r.returncode == 0, r.stderr
    return secrets


def clean(r) -> subprocess.CompletedProcess:
    for text in (r.stdout, r.stderr):
        for form in FORMS:
            assert form not in text, "the value reached the child's output"
    assert "Traceback" not in r.stderr, r.stderr
    return r


def sh(script: str, *args, secret="jira-api-token"):
    return clean(run_recall("secret", "exec", secret, "--", "sh", "-c", script, *args))


def test_the_jira_example_works_unchanged_and_only_the_service_receives_the_value(world, api):
    r = sh(f'curl -sS -H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/myself')
    assert (r.returncode, r.stdout) == (0, '{"name": "me"}\n'), r.stderr
    assert [s["auth"] for s in api.seen] == [f"Bearer {CANARY}"]
    log = run_recall("secret", "log", "jira-api-token").stdout
    assert f"substituted  GET https://127.0.0.1:{api.port}/myself" in log
    assert CANARY not in log


def test_basic_auth_from_curl_u_is_rewritten_too(world, api):
    r = sh(f'curl -sS -u "me@example.com:$JIRA_API_TOKEN" https://127.0.0.1:{api.port}/echo')
    assert r.returncode == 0
    assert api.seen[-1]["auth"] == "Basic " + base64.b64encode(f"me@example.com:{CANARY}".encode()).decode()


def test_the_child_holds_only_a_placeholder_whatever_it_does(world):
    script = ('printf %s "$JIRA_API_TOKEN" | rev; echo; printf %s "$JIRA_API_TOKEN" | base32; env; '
              'tr "\\0" "\\n" < /proc/self/environ; ulimit -c unlimited; '
              'exit $(printf %d "\'$(printf %s "$JIRA_API_TOKEN" | cut -c1)")')
    r = sh(script)
    placeholder = next(line.split("=", 1)[1] for line in r.stdout.splitlines() if line.startswith("JIRA_API_TOKEN="))
    assert placeholder.startswith("recall-ph-jira-api-token-") and len(placeholder) > 30
    assert placeholder[::-1] in r.stdout
    assert r.returncode == ord("r")            # the exit-code channel: the placeholder's first byte
    again = sh('printf %s "$JIRA_API_TOKEN"')
    assert again.stdout.startswith("recall-ph-jira-api-token-") and again.stdout != placeholder   # fresh per run


def test_another_host_or_port_gets_only_the_placeholder_and_the_refusal_is_logged(world, api, tmp_path):
    with StandIn(tmp_path / "other", CANARY, certs=api.certs) as other, \
            StandIn(tmp_path / "plain", CANARY, tls=False) as plain:
        r = sh('for u in "$@"; do curl -sS -o /dev/null -w "%{http_code} " -H "Authorization: Bearer $JIRA_API_TOKEN" "$u"; done',
               "sh", f"https://localhost:{api.port}/myself", f"https://127.0.0.1:{other.port}/myself",
               f"http://127.0.0.1:{plain.port}/myself")
        assert r.stdout == "401 401 401 ", r.stderr
        for seen in (api.seen, other.seen, plain.seen):
            assert len(seen) == 1 and seen[0]["auth"].startswith("Bearer recall-ph-jira-api-token-")
    log = run_recall("secret", "log", "jira-api-token").stdout
    assert log.count(f"refused: bound to https://127.0.0.1:{api.port}") == 3
    assert f"GET http://127.0.0.1:{plain.port}/myself" in log


def test_paths_and_query_are_bound_narrowly(tmp_path, monkeypatch, api):
    write_world(tmp_path, monkeypatch, api, extra=f"""\
- id: query-token
  inject: proxy
  url: https://127.0.0.1:{api.port}
  ca: {api.ca}
  paths: [/query]
  in_query: true
  value: "q-{CANARY}"
""")
    api.server.token = f"q-{CANARY}"
    assert run_recall("secret", "sync").returncode == 0
    r = sh(f'curl -sS "https://127.0.0.1:{api.port}/query?token=$QUERY_TOKEN"; '
           f'curl -sS -o /dev/null -H "Authorization: Bearer $QUERY_TOKEN" https://127.0.0.1:{api.port}/echo',
           secret="query-token")
    assert r.stdout == "query ok\n", r.stderr
    assert api.seen[0]["query"] == f"token=q-{CANARY}"
    assert api.seen[1]["auth"].startswith("Bearer recall-ph-query-token-")       # /echo is not under paths:
    r = sh(f'curl -sS "https://127.0.0.1:{api.port}/query?token=$JIRA_API_TOKEN"')   # in_query not set
    assert r.stdout == "query refused\n"
    assert "refused: not in a header (in_query is not set)" in run_recall("secret", "log").stdout


def test_a_response_echoing_the_value_comes_back_masked(world, api):
    r = sh(f'curl -sS -D - -H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/echo')
    assert "X-Echo: Bearer [recall:jira-api-token]" in r.stdout
    assert "you sent Bearer [recall:jira-api-token]" in r.stdout
    assert api.seen[0]["auth"] == f"Bearer {CANARY}"


def test_a_range_request_never_cuts_the_echoed_value_into_pieces_the_mask_cannot_see(world, api):
    start = len("you sent Bearer ")
    pieces = {CANARY[i:i + 6] for i in range(len(CANARY) - 5)}
    for first in range(start - 3, start + len(CANARY) - 5, 6):      # six bytes at a time, the whole value in turn
        r = sh(f'curl -sS -r {first}-{first + 5} -H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/echo')
        assert not [p for p in pieces if p in r.stdout], r.stdout
        assert "[recall:jira-api-token]" in r.stdout           # the service's whole answer, masked
    assert not [s for s in api.seen if "Range" in s["headers"]]


def test_a_compressed_echo_is_masked_too_and_an_unreadable_coding_is_refused(world, api):
    r = sh(f'curl -sS --compressed -H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/gzip; '
           f'curl -sS --compressed -H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/raw-deflate; '
           f'curl -sS -o /dev/null -w "%{{http_code}}\\n" -H "Authorization: Bearer $JIRA_API_TOKEN" '
           f'https://127.0.0.1:{api.port}/br')
    assert r.stdout == "you sent Bearer [recall:jira-api-token]\n" * 2 + "502\n", (r.stdout, r.stderr)
    assert "a response in br encoding was not passed on" in r.stderr


def test_gzip_named_by_a_second_header_line_or_as_a_transfer_coding_never_reaches_the_child(world, api, tmp_path):
    """The proxy read only the last Content-Encoding line and dropped a gzip transfer coding: the child got
    the echoed value still compressed, unmasked, and `gunzip | rev` printed it."""
    r = sh('for p in two-codings gzip-transfer; do curl -sS -o "$0/$p" -w "%{http_code}\\n" '
           f'-H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/$p; '
           'gunzip < "$0/$p" 2>/dev/null | rev; done', str(tmp_path))
    assert [s["auth"] for s in api.seen] == [f"Bearer {CANARY}"] * 2
    assert r.stdout == "502\n502\n", r.stdout
    for name in ("two-codings", "gzip-transfer"):
        assert (tmp_path / name).read_text() == "recall proxy: the response's content encoding cannot be masked\n"
    assert "a response in gzip, identity encoding was not passed on" in r.stderr
    assert "a response in gzip, chunked encoding was not passed on" in r.stderr


def test_an_event_stream_gets_each_event_while_the_service_waits_for_the_next(world, api):
    """The masker's held tail went out only with the next bytes: a watch or an event stream through the
    proxy showed each event one event late (here: never, until the service gave up waiting)."""
    base = f"https://127.0.0.1:{api.port}"
    r = sh(f'curl -sSN {base}/events | {{ IFS= read -r first; echo "$first"; curl -sS {base}/nudge; cat; }}')
    assert r.stdout.split("\n") == ["data: event 0", "nudged", "", "data: event 1 after the nudge", "", ""], r.stdout


def test_a_response_head_ended_by_bare_line_feeds_is_read_and_masked(world, api):
    """The proxy waited for CRLF CRLF: a server ending its lines in LF alone (curl reads it) left the
    child waiting 5 minutes for nothing."""
    r = sh(f'curl -sS -D - --max-time 20 -H "Authorization: Bearer $JIRA_API_TOKEN" '
           f'https://127.0.0.1:{api.port}/bare-lf https://127.0.0.1:{api.port}/myself')
    assert r.returncode == 0, r.stderr
    assert "X-Echo: Bearer [recall:jira-api-token]\n" in r.stdout
    assert "\n\nyou sent Bearer [recall:jira-api-token]\nHTTP/1.1 200 OK\n" in r.stdout, r.stdout
    assert r.stdout.endswith('\n\n{"name": "me"}\n'), r.stdout              # the same tunnel goes on
    assert [s["auth"] for s in api.seen] == [f"Bearer {CANARY}"] * 2


def test_keep_alive_chunked_concurrent_and_a_10_mb_download_pass_intact(world, api, tmp_path):
    upload = tmp_path / "upload.bin"
    upload.write_bytes(os.urandom(300_000))
    want = hashlib.sha256(big_body()).hexdigest()
    base = f"https://127.0.0.1:{api.port}"
    r = sh(f'curl -sS -H "Authorization: Bearer $JIRA_API_TOKEN" {base}/myself {base}/myself; '
           f'curl -sS {base}/big | sha256sum; curl -sS {base}/chunked | tail -n 1; '
           f'curl -sS -H "Transfer-Encoding: chunked" --data-binary @{upload} {base}/upload; '
           f'for i in 1 2 3 4 5 6 7 8; do curl -sS -H "Authorization: Bearer $JIRA_API_TOKEN" {base}/myself & done; wait; '
           f'curl -sS -0 {base}/chunked | wc -l')            # an HTTP/1.0 client reads until close
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ['{"name": "me"}'] * 2
    assert lines[2] == f"{want}  -"
    assert lines[3] == "line 49"
    assert lines[4] == hashlib.sha256(upload.read_bytes()).hexdigest()
    assert lines[5:13] == ['{"name": "me"}'] * 8
    assert lines[13].strip() == "50"
    assert api.seen[0]["conn"] == api.seen[1]["conn"]          # one connection for both: keep-alive
    assert sum(s["auth"] == f"Bearer {CANARY}" for s in api.seen) == 10
    assert api.seen[4]["body"] == upload.read_bytes()


def test_python_clients_honour_the_proxy(world, api):
    code = (f"import os, urllib.request\n"
            f"req = urllib.request.Request('https://127.0.0.1:{api.port}/myself', "
            f"headers={{'Authorization': 'Bearer ' + os.environ['JIRA_API_TOKEN']}})\n"
            f"print(urllib.request.urlopen(req).read().decode().strip())\n")
    libs = [lib for lib in ("requests", "httpx") if importlib.util.find_spec(lib)]    # urllib runs always
    for lib in libs:
        code += (f"import {lib}\nprint({lib}.get('https://127.0.0.1:{api.port}/myself', "
                 f"headers={{'Authorization': 'Bearer ' + os.environ['JIRA_API_TOKEN']}}).text.strip())\n")
    r = clean(run_recall("secret", "exec", "jira-api-token", "--", sys.executable, "-c", code))
    assert r.stdout == '{"name": "me"}\n' * (1 + len(libs)), r.stderr
    assert [s["auth"] for s in api.seen] == [f"Bearer {CANARY}"] * (1 + len(libs))


def test_other_local_users_cannot_use_the_proxy_without_the_run_credential(world, api):
    r = sh('curl -sS -o /dev/null -w "%{http_code}" -x "http://127.0.0.1:${HTTPS_PROXY##*:}" '
           f'-H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/myself; '
           'curl -sS -o /dev/null -w " %{http_code}" -x "http://127.0.0.1:${HTTPS_PROXY##*:}" '
           f'http://127.0.0.1:{api.port}/myself')
    assert r.stdout == "000 407" and "CONNECT tunnel failed, response 407" in r.stderr, (r.stdout, r.stderr)
    assert api.seen == []


def test_a_client_that_ignores_the_proxy_gets_401_and_recall_says_so(world, api):
    r = sh(f'curl -sS --noproxy "*" --cacert {api.ca} -H "Authorization: Bearer $JIRA_API_TOKEN" '
           f'https://127.0.0.1:{api.port}/myself')
    assert r.stdout == '{"error": "unauthorized"}\n'
    assert "made no request through the proxy" in r.stderr
    assert all(s["auth"].startswith("Bearer recall-ph-") for s in api.seen)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def test_the_proxy_is_gone_when_the_child_exits(world):
    r = sh('echo "$HTTPS_PROXY" | sed "s/.*://"; echo "$SSL_CERT_FILE"')
    port, ca_file = r.stdout.split()
    assert not _listening(int(port))
    assert not os.path.exists(ca_file) and not os.path.exists(os.path.dirname(ca_file))


def test_a_long_lived_recall_stops_listening_when_the_run_ends(world, api):
    """`recall mcp` lives on after a run: close() alone left the proxy's accept() waiting, so its port still
    took connections (and the run's credential and bindings) after the child was gone."""
    import io

    from recall import api as library
    out = io.BytesIO()
    ans = library.secret_exec("jira-api-token", ["sh", "-c", 'echo "${HTTPS_PROXY##*:}"'], out=out, err=io.BytesIO())
    assert ans.code == 0
    assert not _listening(int(out.getvalue()))


FLOOD = r"""
import os, resource, socket, sys, urllib.request
from urllib.parse import urlsplit
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
proxy, port = urlsplit(os.environ["HTTPS_PROXY"]), int(sys.argv[1])
tunnels = []
for _ in range(200):           # more than recall may hold open (128): its accept() fails with EMFILE
    tunnels.append(socket.create_connection((proxy.hostname, proxy.port)))     # each held, saying nothing
for s in tunnels:
    s.close()
req = urllib.request.Request(f"https://127.0.0.1:{port}/myself", headers={"Authorization": "Bearer " + os.environ["JIRA_API_TOKEN"]})
print(urllib.request.urlopen(req, timeout=30).read().decode().strip())
"""


def test_a_child_that_opens_more_connections_than_recall_may_hold_is_served_once_they_close(world, api):
    """An accept() that failed for want of a file descriptor ended the proxy's accept loop: every later
    request of the run hung until the client gave up."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip("needs a hard limit of 1024 descriptors")
    r = clean(subprocess.run([sys.executable, str(REPO / "recall.py"), "secret", "exec", "jira-api-token", "--",
                              sys.executable, "-c", FLOOD, str(api.port)], capture_output=True, text=True, timeout=120,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))))
    assert (r.returncode, r.stdout) == (0, '{"name": "me"}\n'), r.stderr
    # what the proxy says of the 200 it dropped depends on how far each got (EMFILE, a reset): a line each
    assert all(line.startswith("recall: the ") for line in r.stderr.splitlines()), r.stderr
    assert api.seen[-1]["auth"] == f"Bearer {CANARY}"


def test_no_port_is_left_after_kill_9_of_recall(world, tmp_path):
    out = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, str(REPO / "recall.py"), "secret", "exec", "jira-api-token", "--",
                             "sh", "-c", f'echo "$$ ${{HTTPS_PROXY##*:}} $SSL_CERT_FILE" > {out}.tmp; mv {out}.tmp {out}; '
                             'exec sleep 30'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        deadline = time.monotonic() + 20
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child, port, ca_file = out.read_text().split()
        child, port = int(child), int(port)
        assert _listening(port)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert not _listening(port)
        assert os.path.exists(ca_file)          # only the public CA file outlives a kill -9 …
        sh("true")
        assert not os.path.exists(os.path.dirname(ca_file))     # … until the next run sweeps it
    finally:
        if proc.poll() is None:
            proc.kill()
        if child is not None:
            with contextlib.suppress(ProcessLookupError):      # its watcher may have ended it already
                os.kill(child, signal.SIGKILL)


def test_access_exec_uses_the_proxy_for_linked_host_bound_secrets(tmp_path, monkeypatch, api):
    write_world(tmp_path, monkeypatch, api, inventory=f"""\
- id: jira
  kind: service
  url: https://127.0.0.1:{api.port}/
  secrets: [jira-api-token]
  verify: 'curl -sS -H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/myself'
""")
    assert run_recall("secret", "sync").returncode == 0
    r = clean(run_recall("access", "exec", "jira", "--", 'printf %s "$JIRA_API_TOKEN" | rev; echo; '
                         f'curl -sS -H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/myself'))
    assert r.stdout.splitlines()[1:] == ['{"name": "me"}'], (r.stdout, r.stderr)
    assert r.stdout.splitlines()[0].endswith("-nekot-ipa-arij-hp-llacer")
    assert api.seen[-1]["auth"] == f"Bearer {CANARY}"
    assert "substituted  GET" in run_recall("secret", "log", "jira-api-token").stdout


def test_secret_show_says_where_the_value_goes(world, api):
    r = run_recall("secret", "show", "jira-api-token")
    assert f"host-bound: sent only to https://127.0.0.1:{api.port} by recall's proxy" in r.stdout
    shown = json.loads(run_recall("--json", "secret", "show", "jira-api-token").stdout)     # as MCP returns it
    assert shown["inject"] == "proxy" and shown["host_bound"].startswith(f"sent only to https://127.0.0.1:{api.port}")


@pytest.mark.parametrize("text, message", [
    ("  inject: proxy\n  value: x1\n", "inject: proxy, which needs url: https://HOST[:PORT]/"),
    ("  inject: proxy\n  url: http://127.0.0.1/\n  value: x1\n", "needs url: https://"),
    ("  url: https://h.example/\n  paths: [/api]\n  value: x1\n", "'paths' applies only to inject: proxy"),
    ("  inject: proxy\n  url: https://h.example/\n  paths: [api]\n  value: x1\n", "paths must be a list"),
    ("  inject: proxy\n  url: https://h.example/\n  ca: nope.pem\n  value: x1\n", "ca: no readable file"),
])
def test_the_schema_refuses_with_file_and_line(tmp_path, monkeypatch, text, message):
    w = build(tmp_path, secrets="- id: t\n" + text)
    monkeypatch.setenv("RECALL_CONFIG", str(w.config))
    r = run_recall("secret", "sync")
    assert r.returncode == 1 and message in r.stderr and f"{w.secrets}:" in r.stderr, r.stderr


def test_a_changed_binding_in_the_db_refuses_to_decrypt(world, tmp_path, api):
    import sqlite3
    db = next((tmp_path / "state").glob("*.db"))
    con = sqlite3.connect(db)
    meta = con.execute("SELECT meta FROM secrets").fetchone()[0]
    con.execute("UPDATE secrets SET meta=?", (meta.replace(f'"port": {api.port}', '"port": 9'),))
    con.commit()
    con.close()
    r = run_recall("secret", "exec", "jira-api-token", "--", "true")
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_verify_takes_the_same_path_for_check_lines(tmp_path, monkeypatch, api):
    check = f'curl -sS -H "Authorization: Bearer $JIRA_API_TOKEN" https://127.0.0.1:{api.port}/myself'
    write_world(tmp_path, monkeypatch, api, extra=f"  check: '{check}'\n", inventory=f"""\
- id: jira
  url: https://127.0.0.1:{api.port}/
  secrets: [jira-api-token]
  verify: '{check}'
""")
    assert run_recall("secret", "sync").returncode == 0
    r = clean(run_recall("verify"))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert [s["auth"] for s in api.seen] == [f"Bearer {CANARY}"] * 2
    log = run_recall("secret", "log", "jira-api-token").stdout
    assert "(verify)" in log and "(access.exec)" in log


def test_a_host_bound_secret_is_never_written_to_stdin_nor_trusted_from_a_vanished_ca(world, api):
    r = run_recall("secret", "exec", "jira-api-token", "--stdin", "--", "cat")
    assert r.returncode == 1 and "host-bound (inject: proxy): it is never written to stdin" in r.stderr
    assert r.stdout == ""
    os.rename(api.ca, str(api.ca) + ".moved")
    r = clean(run_recall("secret", "exec", "jira-api-token", "--", "true"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "ca: file" in r.stderr, r.stderr


SMUGGLER = r"""
import base64, os, socket, ssl, sys
from urllib.parse import urlsplit
proxy, port, ph = urlsplit(os.environ["HTTPS_PROXY"]), int(sys.argv[1]), os.environ["SCOPED_TOKEN"]
auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
for head in (f"GET /myself HTTP/1.1\r\nHost: x\r\nX-A: 1\nGET /echo HTTP/1.1\nAuthorization: Bearer {ph}\r\n\r\n",
             f"GET /myself HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n"
             f"Authorization: Bearer {ph}\r\n\r\n0\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n",
             f"GET /myself\x1b[2J HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {ph}\r\n\r\n",
             f"GET /myself HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-A\x0b: 1\r\nAuthorization: Bearer {ph}\r\n\r\n",
             f"GET /myself HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX(A): 1\r\nAuthorization: Bearer {ph}\r\n\r\n"):
    s = socket.create_connection((proxy.hostname, proxy.port))
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
    s.recv(4096)
    t = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"]).wrap_socket(s, server_hostname="127.0.0.1")
    t.sendall(head.encode())
    print(repr(t.recv(4096)[:12]))
"""


def test_a_request_hidden_in_a_header_ambiguous_framing_or_a_control_byte_is_dropped(tmp_path, monkeypatch, api):
    write_world(tmp_path, monkeypatch, api, extra=f"""\
- id: scoped-token
  inject: proxy
  url: https://127.0.0.1:{api.port}
  ca: {api.ca}
  paths: [/myself]
  value: "s-{CANARY}"
""")
    assert run_recall("secret", "sync").returncode == 0
    r = clean(run_recall("secret", "exec", "scoped-token", "--", sys.executable, "-c", SMUGGLER, str(api.port)))
    assert r.stdout == "b''\n" * 5, (r.stdout, r.stderr)      # the proxy closed every connection
    assert api.seen == []


def test_a_service_whose_certificate_is_not_trusted_never_gets_the_value(tmp_path, monkeypatch, api):
    secrets = write_world(tmp_path, monkeypatch, api)
    secrets.write_text(secrets.read_text().replace(f"  ca: {api.ca}\n", ""))       # the system store only
    assert run_recall("secret", "sync").returncode == 0
    r = sh(f'curl -sS -o /dev/null -w "%{{http_code}}" -H "Authorization: Bearer $JIRA_API_TOKEN" '
           f'https://127.0.0.1:{api.port}/myself')
    assert r.stdout == "502", (r.stdout, r.stderr)
    assert "CERTIFICATE_VERIFY_FAILED" in r.stderr or "certificate verify failed" in r.stderr
    assert api.seen == []


def _codes(r) -> list:
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_a_request_naming_another_site_inside_the_tunnel_gets_421_and_is_never_forwarded(world, api, tmp_path):
    out, url = tmp_path, f"https://127.0.0.1:{api.port}/myself"
    with StandIn(tmp_path / "plain", CANARY, tls=False) as plain:
        r = sh('n=0; for opt in "$@"; do n=$((n+1)); curl -sS -o "$0/$n" -w "%{http_code} " '
               '-H "Authorization: Bearer $JIRA_API_TOKEN" $opt; done', str(out),
               url, f"-H Host:127.0.0.1:{api.port} {url}", f"--request-target {url} {url}",      # controls
               f"-0 -H Host: {url}",                    # HTTP/1.0 without Host: the tunnel's site is named
               f"-H Host:evil.example {url}", f"-H Host:localhost:{api.port} {url}", f"-H Host:127.0.0.1 {url}",
               f"--request-target https://evil.example/myself {url}",
               f"--request-target http://127.0.0.1:{api.port}/myself {url}",
               f"-H Host:evil.example http://127.0.0.1:{plain.port}/myself")       # plain http, no tunnel
        assert plain.seen == []
    assert _codes(r) == ["200"] * 4 + ["421"] * 6, r.stderr
    assert [(s["path"], s["host"], s["auth"]) for s in api.seen] == [
        ("/myself", f"127.0.0.1:{api.port}", f"Bearer {CANARY}")] * 4          # the 421s reached no one
    for n in range(5, 11):
        body = (out / str(n)).read_text()
        assert "this connection is for 127.0.0.1:" in body and "nothing was forwarded" in body, body
        assert "evil" not in body and "recall-ph-" not in body and CANARY not in body
    log = run_recall("secret", "log", "jira-api-token").stdout
    assert log.count("refused: its Host header names another site (421, not forwarded)") == 4, log
    assert log.count("refused: its absolute-form target names another site (421, not forwarded)") == 2, log
    assert "was refused (421)" in r.stderr


RAW_CLIENT = r"""
import base64, http.client, os, ssl, sys
from urllib.parse import urlsplit
proxy, port = urlsplit(os.environ["HTTPS_PROXY"]), int(sys.argv[1])
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
tunnel = {"Proxy-Authorization": "Basic " + base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()}
auth = "Bearer " + os.environ["JIRA_API_TOKEN"]
for extra in ([], [("Host", "evil.example")], [("Host", f"127.0.0.1:{port}"), ("Host", "evil.example")],
              [("Proxy-Authorization", auth), ("Cookie", os.environ["JIRA_API_TOKEN"])]):
    c = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ctx)
    c.set_tunnel("127.0.0.1", port, headers=tunnel)
    c.putrequest("GET", "/myself", skip_host=any(k == "Host" for k, _ in extra))
    for k, v in extra + [("Authorization", auth)]:
        c.putheader(k, v)
    c.endheaders()
    print(c.getresponse().status)
"""


def test_python_http_client_with_another_host_or_two_hosts_is_refused(world, api):
    r = clean(run_recall("secret", "exec", "jira-api-token", "--", sys.executable, "-c", RAW_CLIENT, str(api.port)))
    assert _codes(r) == ["200", "421", "400", "200"], r.stderr
    assert [s["auth"] for s in api.seen] == [f"Bearer {CANARY}"] * 2
    headers = {k.lower(): v for k, v in api.seen[1]["headers"].items()}
    assert "proxy-authorization" not in headers                       # a hop header: never sent on
    assert headers["cookie"].startswith("recall-ph-jira-api-token-")


def test_the_placeholder_is_replaced_only_in_the_authorization_header(world, api):
    r = sh('curl -sS -o /dev/null -w "%{http_code}" -H "Authorization: Bearer $JIRA_API_TOKEN" '
           '-H "X-Api-Key: $JIRA_API_TOKEN" -H "Cookie: s=$JIRA_API_TOKEN" -A "ua $JIRA_API_TOKEN" '
           f'https://127.0.0.1:{api.port}/myself')
    assert r.stdout == "200", r.stderr
    (seen,) = api.seen
    assert seen["auth"] == f"Bearer {CANARY}"                             # the control: Authorization
    for name, before in (("X-Api-Key", ""), ("Cookie", "s="), ("User-Agent", "ua ")):
        assert seen["headers"][name].startswith(before + "recall-ph-jira-api-token-"), (name, seen["headers"])
    log = run_recall("secret", "log", "jira-api-token").stdout
    assert log.count("refused: not in the Authorization header") == 3 and log.count("substituted  GET") == 1, log


REFUSED_PATHS = ["/myself/../echo", "/myself/./echo", "/myself/%2e%2e/echo", "/myself/%2E%2e/echo",
                 "/myself/.%2e/echo", "/myself/%252e%252e/echo", "/myself/..;/echo", "/myself/.;x/echo",
                 "/myself/..%5cecho", "/myself%5c..%5cecho", "/myself/..%2fecho", "/myself/%c0%ae%c0%ae/echo",
                 "/myself/%ef%bc%8e%ef%bc%8e/echo", "/myself/%zz", "/myself%00/x"]


def test_paths_are_checked_decoded_and_every_dot_or_encoded_form_is_refused(tmp_path, monkeypatch, api):
    write_world(tmp_path, monkeypatch, api, extra=f"""\
- id: scoped-token
  inject: proxy
  url: https://127.0.0.1:{api.port}
  ca: {api.ca}
  paths: [/myself]
  value: "{CANARY}"
""")
    assert run_recall("secret", "sync").returncode == 0
    controls = ["/myself", "/myself/sub", "/my%73elf/sub"]          # under paths:, an ordinary escape decoded
    r = sh('for p in "$@"; do curl -sS --path-as-is -o /dev/null -w "%{http_code} " '
           f'-H "Authorization: Bearer $SCOPED_TOKEN" "https://127.0.0.1:{api.port}$p"; done',
           "sh", *controls, *REFUSED_PATHS, "/myselfish", secret="scoped-token")
    assert _codes(r)[:1] == ["200"], r.stderr
    got = {s["path"]: {f"Bearer {CANARY}": "value"}.get(s["auth"], s["auth"][:30]) for s in api.seen}
    assert got == {**{p: "value" for p in controls}, **{p: "Bearer recall-ph-scoped-token-" for p in REFUSED_PATHS + ["/myselfish"]}}
    log = run_recall("secret", "log", "scoped-token").stdout
    assert log.count("refused: the path holds") == len(REFUSED_PATHS) and "refused: path outside paths:" in log


RAW_TARGETS = r"""
import base64, os, socket, ssl, sys
from urllib.parse import urlsplit
proxy, port, ph = urlsplit(os.environ["HTTPS_PROXY"]), int(sys.argv[1]), os.environ["SCOPED_TOKEN"]
auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
for path in sys.argv[2:]:
    s = socket.create_connection((proxy.hostname, proxy.port))
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
    s.recv(4096)
    t = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"]).wrap_socket(s, server_hostname="127.0.0.1")
    t.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {ph}\r\n"
              "Connection: close\r\n\r\n".encode("utf-8"))
    answer = b""
    while chunk := t.recv(4096):
        answer += chunk
    print(answer.split(b" ", 2)[1].decode(), " ".join(answer.split(b"\r\n\r\n", 1)[1].decode().split()))
"""


def test_a_raw_byte_above_0x7f_in_a_request_target_is_refused_and_never_forwarded(tmp_path, monkeypatch, api):
    """Full-width dots sent as raw UTF-8 passed the paths: check (a server reading UTF-8 may take
    them for '..'); any raw byte above 0x7F is now answered 400 with the encoded form to send."""
    write_world(tmp_path, monkeypatch, api, extra=f"""\
- id: scoped-token
  inject: proxy
  url: https://127.0.0.1:{api.port}
  ca: {api.ca}
  paths: [/myself]
  value: "{CANARY}"
""")
    assert run_recall("secret", "sync").returncode == 0
    raw = ["/myself/\uff0e\uff0e/echo", "/myself/caf\u00e9", "/echo?q=\u00e9"]
    r = clean(run_recall("secret", "exec", "scoped-token", "--", sys.executable, "-c", RAW_TARGETS,
                         str(api.port), "/myself/caf%C3%A9", *raw))
    lines = r.stdout.splitlines()
    assert lines[0].split()[0] == "404", (r.stdout, r.stderr)     # the control, encoded: the service's answer
    for line, byte in zip(lines[1:], ("EF", "C3", "C3")):
        assert line.startswith(f"400 recall proxy: this connection is for 127.0.0.1:{api.port} and its target "
                               f"holds the raw byte 0x{byte}"), line
        assert f"percent-encoded (%{byte})" in line and "nothing was forwarded" in line
    assert [(s["path"], s["auth"]) for s in api.seen] == [("/myself/caf%C3%A9", f"Bearer {CANARY}")]
    log = run_recall("secret", "log", "scoped-token").stdout
    assert log.count("refused: its target holds the raw byte") == 3, log


def test_what_the_proxy_returns_is_masked_before_exec_sees_it(world, api, tmp_path):
    out, base = tmp_path, f"https://127.0.0.1:{api.port}"
    r = sh('for p in echo split gzip; do curl -sS --compressed -D "$0/$p.head" -o "$0/$p.body" '
           f'-H "Authorization: Bearer $JIRA_API_TOKEN" {base}/$p; done', str(out))
    assert r.returncode == 0, r.stderr
    assert [s["auth"] for s in api.seen] == [f"Bearer {CANARY}"] * 3     # the service got the value …
    for name in ("echo", "split", "gzip"):                                # … the child only its mask
        raw = (out / f"{name}.head").read_bytes() + (out / f"{name}.body").read_bytes()
        for form in FORMS:
            assert form.encode() not in raw, f"{name}: the proxy handed the child the value"
        assert (out / f"{name}.body").read_text() == "you sent Bearer [recall:jira-api-token]\n", name
    assert "X-Echo: Bearer [recall:jira-api-token]" in (out / "echo.head").read_text()


PEAK = "import resource, subprocess, sys; subprocess.run(sys.argv[1:]); print(resource.getrusage(-1).ru_maxrss)"


def test_a_gzip_bomb_is_inflated_piece_by_piece_not_held_whole(world, api):
    r = clean(subprocess.run([sys.executable, "-c", PEAK, sys.executable, str(REPO / "recall.py"), "secret", "exec",
                              "jira-api-token", "--", "curl", "-sS", "--compressed", "-o", "/dev/null", "-w",
                              "%{size_download}\\n", f"https://127.0.0.1:{api.port}/bomb"],
                             capture_output=True, text=True, timeout=120))
    size, peak_kb = map(int, r.stdout.split())
    assert size == BOMB, r.stderr                          # 128 MiB of zeros, from ~130 KB gzipped
    assert peak_kb < 80 * 1024, f"recall held {peak_kb // 1024} MB for a 128 MB body"


def test_a_username_of_a_host_bound_secret_is_injected_as_written_like_any_public_field(tmp_path, monkeypatch, api):
    """One rule for what is public (usernames, logins, emails, fields marked public): the child
    gets them as written, and only the password becomes a placeholder the proxy fills in."""
    write_world(tmp_path, monkeypatch, api, extra=f"""\
- id: jira-basic
  inject: proxy
  url: https://127.0.0.1:{api.port}
  ca: {api.ca}
  fields: {{username: me@example.com, password: "pw-{CANARY}", region: {{value: eu-west-1, public: true}}}}
""")
    assert run_recall("secret", "sync").returncode == 0
    r = sh(f'echo "$JIRA_BASIC_USERNAME $JIRA_BASIC_REGION"; case "$JIRA_BASIC_PASSWORD" in recall-ph-*) echo ph;; esac; '
           f'curl -sS -u "$JIRA_BASIC_USERNAME:$JIRA_BASIC_PASSWORD" https://127.0.0.1:{api.port}/echo',
           secret="jira-basic")
    assert r.stdout.splitlines()[:2] == ["me@example.com eu-west-1", "ph"], r.stderr
    assert api.seen[-1]["auth"] == "Basic " + base64.b64encode(f"me@example.com:pw-{CANARY}".encode()).decode()
