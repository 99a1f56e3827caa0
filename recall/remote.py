"""Remote notes: install the core on a host over ssh, and search / read / index there."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .errors import NotFound, RecallError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_TIMEOUT = 60.0      # seconds for each ssh step of an install

# Runs on the remote box with its python3: unpack the tar from stdin in a folder of its own beside the
# old copy, then swap. A 'recall' folder or 'recall.py' there that is not a copy of recall (a notes
# folder named recall, given --path ~) is never replaced: exit 3, nothing changed.
_UNPACK = r"""
import io, os, shutil, sys, tarfile, tempfile
dest = os.path.expanduser(sys.argv[1])
pkg, launcher = os.path.join(dest, "recall"), os.path.join(dest, "recall.py")

def copy_of_recall(folder):
    if os.path.islink(folder) or not os.path.isfile(os.path.join(folder, "__init__.py")):
        return False
    for top, dirs, files in os.walk(folder):
        cache = os.path.basename(top) == "__pycache__"
        if any(os.path.islink(os.path.join(top, n)) for n in dirs + files) or \
                any(not n.endswith(".pyc" if cache else ".py") for n in files):
            return False
    return True

def launcher_of_recall(path):
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return b"from recall.cli import run" in f.read(4096)

for path, ours in ((pkg, copy_of_recall), (launcher, launcher_of_recall)):
    if os.path.lexists(path) and not ours(path):
        sys.stderr.write(path + " is there and is not a copy of recall\n")
        sys.exit(3)
os.makedirs(dest, exist_ok=True)
work = tempfile.mkdtemp(prefix=".recall-install-", dir=dest)
try:
    with tarfile.open(fileobj=io.BytesIO(sys.stdin.buffer.read()), mode="r:gz") as tar:
        tar.extractall(os.path.join(work, "new"))
    if os.path.lexists(pkg):
        os.rename(pkg, os.path.join(work, "old"))
    os.rename(os.path.join(work, "new", "recall"), pkg)
    os.replace(os.path.join(work, "new", "recall.py"), launcher)
finally:
    shutil.rmtree(work, ignore_errors=True)
print(dest)
"""


@dataclass
class InstallReport:
    host: str
    path: str
    files: int
    python: str
    updated: bool


def ssh_argv(host: str, ssh_config: str = "", timeout: float = 10.0, options: tuple = ()) -> list:
    if not host or host.startswith("-"):    # a leading '-' would be read by ssh as an option
        raise RecallError(f"'{host}' is not a host ssh can connect to", "give a host name or an inventory host id")
    argv = ["ssh"]
    if ssh_config:
        argv += ["-F", ssh_config]
    return argv + ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(timeout))}", *options, host]


MAX_ANSWER = 64 << 20       # bytes of a remote's answer read; a longer one is refused, its ssh ended


def _run(argv: list, *, data: bytes | None = None, timeout: float, label: str = "the host"):
    """argv run to its end within `timeout`: its stdin held open until then (`data` written first), so
    the remote's guard sees the session end; stdout read up to MAX_ANSWER, stderr's last 64 KiB kept."""
    import threading
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise RecallError("ssh is not installed here") from None
    except ValueError:         # a NUL in a word: no command line carries one
        raise RecallError(f"{label}: a NUL character cannot be sent over ssh", "leave it out") from None
    out, err, over = bytearray(), bytearray(), []

    def drain(fd: int, into: bytearray, keep: int) -> None:
        while chunk := os.read(fd, 1 << 16):
            into += chunk
            if fd == proc.stdout.fileno() and len(into) > keep:
                over.append(True)
                proc.kill()
                return
            del into[:max(0, len(into) - keep)]

    def feed() -> None:
        with contextlib.suppress(OSError):
            proc.stdin.write(data)
            proc.stdin.close()       # the end of `data`: what the remote reads to its end

    readers = [threading.Thread(target=drain, args=(proc.stdout.fileno(), out, MAX_ANSWER), daemon=True),
               threading.Thread(target=drain, args=(proc.stderr.fileno(), err, 1 << 16), daemon=True)]
    for t in readers + ([threading.Thread(target=feed, daemon=True)] if data is not None else []):
        t.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise RecallError(f"{label} did not answer within {timeout:g}s") from None
    finally:
        proc.kill()        # no-op once it ended; its stdin closed below ends the remote command too
        proc.wait()
        for t in readers:
            t.join(5)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                f.close()
    if over:
        raise RecallError(f"{label} answered more than {MAX_ANSWER >> 20} MB; nothing of it was used")
    return subprocess.CompletedProcess(argv, proc.returncode, bytes(out), bytes(err))


# The checkout's recall.py, word for word (a test holds them equal): an installed recall has no file
# beside its package to copy, so the bundle writes this one.
LAUNCHER = '''#!/usr/bin/env python3
"""Launcher: `python3 path/to/recall.py ...` works from any folder, with nothing installed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from recall.cli import run  # noqa: E402

if __name__ == "__main__":
    run()
'''


def _bundle() -> tuple:
    """(the zero-dependency core as a gzip tar: the launcher and every .py of the recall package,
    its file count), from a checkout or an installed recall alike."""
    paths = []
    for folder, dirs, files in os.walk(os.path.join(REPO, "recall")):
        dirs[:] = sorted(d for d in dirs if os.path.isfile(os.path.join(folder, d, "__init__.py")))
        paths += [os.path.relpath(os.path.join(folder, n), REPO) for n in sorted(files) if n.endswith(".py")]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        launcher = tarfile.TarInfo("recall.py")
        launcher.size, launcher.mode, launcher.mtime = len(LAUNCHER.encode()), 0o755, int(time.time())
        tar.addfile(launcher, io.BytesIO(LAUNCHER.encode()))
        for rel in paths:
            tar.add(os.path.join(REPO, rel), arcname=rel.replace(os.sep, "/"))
    return buf.getvalue(), len(paths) + 1


def shell_path(path: str) -> str:
    """A configured path as one word for the remote shell: a leading ~ or ~user expands there, the rest is quoted."""
    m = re.fullmatch(r"~([A-Za-z0-9._-]*)(/.*)?", path, re.S)
    if not m:
        return shlex.quote(path)
    head = f"~{m.group(1)}" if m.group(1) else '"$HOME"'
    rest = (m.group(2) or "").lstrip("/")
    return head + ("/" + shlex.quote(rest) if rest else "")


def ssh_target(cfg, host: str) -> tuple:
    """(destination, ssh options) for HOST. An inventory entry HOST names (`id`, `user@id`, or the host its
    `url: ssh://…` names) goes through its prerequisites first; named by its id, its `url:
    ssh://[user@]host[:port]` says where to connect. Anything else goes to ssh as it is."""
    if not cfg.inventory:
        return host, ()
    from urllib.parse import unquote, urlsplit

    from . import inventory
    entries = inventory.load_inventory(cfg)
    name = host.rsplit("@", 1)[-1]
    try:
        entry, by_id = inventory.get_entry(entries, name), True
    except NotFound:
        entry, by_id = next((e for e in entries if _ssh_host(e) == name.lower()), None), False
    if entry is None:
        return host, ()
    inventory.ensure_prerequisites(entries, entry)
    if not by_id or not entry.url.lower().startswith("ssh://"):
        return host, ()
    url = urlsplit(entry.url)
    try:
        port = url.port
    except ValueError:
        port = -1
    if not url.hostname or port == -1:
        raise RecallError(f"{entry.file}:{entry.line}: inventory entry '{entry.id}' has url {entry.url!r}, "
                          "which ssh cannot use", "write it as ssh://[user@]host[:port]")
    dest = f"{unquote(url.username)}@{url.hostname}" if url.username else url.hostname
    return dest, ("-p", str(port)) if port else ()


def _ssh_host(entry):
    """The host an entry's `url: ssh://…` names; None for another url, or one ssh cannot use (said when
    it is used by its id)."""
    from urllib.parse import urlsplit
    try:
        return (urlsplit(entry.url).hostname or "") if entry.url.lower().startswith("ssh://") else None
    except ValueError:
        return None


def install(cfg, host: str, path: str, ssh_config: str) -> InstallReport:
    """Copy the core to HOST:PATH (replacing an older copy) and check `recall.py doctor` there;
    a host that is an inventory entry goes through its prerequisites first and may name its ssh url."""
    dest, options = ssh_target(cfg, host)
    base = ssh_argv(dest, ssh_config, INSTALL_TIMEOUT, options)
    where = shell_path(path)
    probe = _run(base + [f"python3 -V 2>&1; test -f {where}/recall.py && echo present || echo absent"],
                 timeout=INSTALL_TIMEOUT)
    if probe.returncode == 255:
        raise RecallError(f"cannot reach {host} over ssh: {_last(probe.stderr)}")
    out = probe.stdout.decode("utf-8", "replace")
    version = re.search(r"Python (\d+)\.(\d+)(?:\.\d+)?", out)
    if version is None:
        raise RecallError(f"{host} has no python3 on the PATH of an ssh session", "install Python ≥ 3.9 there")
    if (int(version[1]), int(version[2])) < (3, 9):
        raise RecallError(f"{host} has Python {version[0].split()[1]}; recall needs Python ≥ 3.9 there",
                          "install a newer python3 first on the PATH of an ssh session")
    updated = out.strip().splitlines()[-1] == "present"
    data, count = _bundle()
    r = _run(base + [f"python3 -c {shlex.quote(_UNPACK)} {where}"], data=data, timeout=INSTALL_TIMEOUT)
    if r.returncode == 3:
        raise RecallError(f"{host}:{_last(r.stderr)}; nothing was changed",
                          "give --path a folder of its own (recall puts recall.py and recall/ in it)")
    if r.returncode != 0:
        raise RecallError(f"copying recall to {host}:{path} failed: {_last(r.stderr)}",   # its python3 was checked
                          "--path names a folder for recall.py and recall/, one this user can create or write")
    installed = r.stdout.decode().strip().splitlines()[-1]
    r = _run(base + [f"python3 {shlex.quote(installed)}/recall.py --json doctor"], timeout=INSTALL_TIMEOUT)
    try:
        checks = {c["name"]: c for c in json.loads(r.stdout.decode() or "[]")}
    except ValueError:
        raise RecallError(f"the copy on {host} fails its doctor check: {_last(r.stderr)}") from None
    if not checks.get("python", {}).get("ok"):
        raise RecallError(f"{host} has {checks.get('python', {}).get('detail', 'no python3')}",
                          "recall needs Python ≥ 3.9 there")
    return InstallReport(host, installed, count, checks["python"]["detail"].split()[0], updated)


def _last(stderr: bytes) -> str:
    lines = [l for l in stderr.decode("utf-8", "replace").splitlines() if l.strip()]
    return lines[-1].strip() if lines else "no message"


# Runs the remote recall (argv after -c's script) and ends it when the ssh session does: its stdin
# (held open by this side until ssh ends) reaches its end, e.g. this side gave up after its timeout.
_GUARD = r"""
import os, signal, subprocess, sys, threading
child = subprocess.Popen([sys.executable] + sys.argv[1:], stdin=subprocess.DEVNULL, start_new_session=True)
def gone():
    while os.read(0, 65536):
        pass
    os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
threading.Thread(target=gone, daemon=True).start()
code = child.wait()
os._exit(code if code >= 0 else 128 - code)
"""


def _remote_cmd(rem, *args: str) -> str:
    """The remote shell's command line, recall under the guard: only the configured recall path and
    config expand ~ there; every other word (a query, a note path) is quoted, so the remote shell
    runs nothing in it."""
    words = ["python3", "-c", shlex.quote(_GUARD), shell_path(f"{rem.path.rstrip('/')}/recall.py")]
    if rem.config:
        words += ["--config", shell_path(rem.config)]
    return " ".join(words + [shlex.quote(str(a)) for a in args])


def version_of(cfg, rem, timeout: float) -> tuple:
    """(ssh's exit code, what `recall --version` printed there, stderr's last line): doctor's probe."""
    dest, options = ssh_target(cfg, rem.host)
    r = _run(ssh_argv(dest, rem.ssh_config, timeout, options) + [_remote_cmd(rem, "--version")],
             timeout=timeout, label=rem.host)
    return r.returncode, r.stdout.decode("utf-8", "replace").strip(), _last(r.stderr)


def get_remote(cfg, name: str):
    for rem in cfg.remotes:
        if rem.name == name:
            return rem
    raise NotFound(f"no remote named '{name}'", "remotes: " + ", ".join(r.name for r in cfg.remotes) if cfg.remotes
                   else "add a 'remotes:' list to the config")


# The fields of a remote's answer recall uses, and their JSON types: an answer without a required one
# (a hit needs only its relpath), or with one of another type, is not recall's — one line, never a traceback.
_NUMBER = (int, float)
HIT = {"relpath": str, "path": str, "line": int, "end_line": int, "breadcrumb": str, "snippet": str,
       "highlights": list, "score": _NUMBER, "date": str}
READ = {"relpath": str, "path": str, "start_line": int, "end_line": int, "range_end": int, "text": str,
        "next_offset": (int, type(None)), "total_lines": int}
INDEX = {"new": int, "changed": int, "removed": int, "unchanged": int, "chunks": int, "seconds": _NUMBER}


def _shaped(rem, data, types: dict, required=None) -> dict:
    """`data` when it is an object holding every `required` field (default: all of `types`), each
    present one of its type; else RecallError."""
    if isinstance(data, dict) and all(k in data for k in (required or types)) \
            and all(isinstance(data[k], kind) for k, kind in types.items() if k in data):
        return data
    raise _not_recall(rem)


def _not_recall(rem) -> RecallError:
    return RecallError(f"remote '{rem.name}' answered something that is not recall's JSON",
                       f"'recall remote install {rem.host} --path {rem.path}' puts this recall there again")


def _hits(rem, data, n: int) -> list:
    """The remote's first `n` hits, each checked; its highlights kept only where they point into the snippet."""
    found = _shaped(rem, data, {"hits": list})["hits"][:n]
    hits = [_shaped(rem, h, HIT, required=("relpath",)) for h in found]
    for h in hits:
        h["highlights"] = _spans(h.get("highlights", []), h.get("snippet", ""))
    return hits


def _spans(spans: list, text: str) -> list:
    """The [start, end] pairs of `spans` that mark `text` in order; the rest dropped."""
    out, at = [], 0
    for span in spans:
        if isinstance(span, list) and len(span) == 2 and all(type(i) is int for i in span) \
                and at <= span[0] <= span[1] <= len(text):
            out.append(span)
            at = span[1]
    return out


def run_json(cfg, rem, args: list, timeout: float | None = None):
    dest, options = ssh_target(cfg, rem.host)
    r = _run(ssh_argv(dest, rem.ssh_config, rem.timeout, options) + [_remote_cmd(rem, "--json", *args)],
             timeout=timeout or rem.timeout, label=f"remote '{rem.name}'")
    if r.returncode != 0:
        raise RecallError(f"remote '{rem.name}': {_last(r.stderr).removeprefix('recall: ')}")
    try:
        return json.loads(r.stdout.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        raise _not_recall(rem) from None


def ask_remotes(cfg, query: str, n: int, mode: str):
    """Start asking every configured remote in the background (search.search takes this as
    `ask_remotes`): `merge(result)` waits for them and merges their hits; None when there are none."""
    if not cfg.remotes:
        return None
    from .extras import before_threads
    before_threads()
    pool = ThreadPoolExecutor(max_workers=1)
    job = pool.submit(search_remotes, cfg, query, n, mode)
    pool.shutdown(wait=False)

    def merge(result) -> None:
        remote_hits, notices = job.result()
        federate(result, remote_hits, n)
        result.notices += notices
    return merge


def search_remotes(cfg, query: str, n: int, mode: str) -> tuple:
    """({remote name: [hit dicts]}, [notices]) — every remote asked in parallel, each bounded by its timeout."""
    def ask(rem):
        try:
            data = run_json(cfg, rem, ["search", "--local", "-n", str(n), "--mode", mode, "--",
                                       query.replace("\0", " ")])      # no word holds a NUL
            return rem.name, _hits(rem, data, n), None
        except RecallError as exc:
            return rem.name, [], str(exc)

    with ThreadPoolExecutor(max_workers=min(8, len(cfg.remotes))) as pool:
        answers = list(pool.map(ask, cfg.remotes))
    if any(found for _, found, _ in answers):
        answers = _redacted(cfg, answers)
    hits, notices = {}, []
    for name, found, problem in answers:
        if problem:
            notices.append(problem if problem.startswith("remote") else f"remote '{name}': {problem}")
        for h in found:
            h["source"] = name
            h["relpath"] = f"{name}:{h['relpath']}"
            h["highlights"] = _spans(h["highlights"], h.get("snippet", ""))    # the redactor may have moved them
        hits[name] = found
    return hits, notices


def _redacted(cfg, answers: list) -> list:
    """Remote hits pass the local redactor too (this vault may hold what the remote's does not);
    a local vault that cannot be opened refuses them (vault.redactor fails closed)."""
    from . import db
    from .vault.redact import redact_hits
    from .vault.store import redactor
    with contextlib.closing(db.connect(cfg.db_path)) as con:
        redact = redactor(con, cfg)
    return [(name, redact_hits(found, redact), problem) for name, found, problem in answers]


def read_remote(cfg, name: str, target: str, *, max_chars: int, offset: int) -> dict:
    """The remote's read of `target`: the fields of a read (notes.read.ReadResult), the source aside."""
    rem = get_remote(cfg, name)
    data = _shaped(rem, run_json(cfg, rem, ["read", target, "--max-chars", str(max_chars), "--offset", str(offset)]),
                   READ)
    return {k: data[k] for k in READ}


def index_remote(cfg, name: str, full: bool = False) -> dict:
    rem = get_remote(cfg, name)
    return _shaped(rem, run_json(cfg, rem, ["index"] + (["--full"] if full else []), timeout=max(rem.timeout, 3600)),
                   INDEX)


def federate(result, remote_hits: dict, n: int) -> None:
    """Merge remote hit lists into result.hits by reciprocal rank fusion (remote hits show NAME:relpath)."""
    from .notes.fusion import rrf
    from .notes.search import Hit
    if not any(remote_hits.values()):
        return
    pool = {("local", i): h for i, h in enumerate(result.hits)}
    lists = {"local": [("local", i) for i in range(len(result.hits))]}
    for name, hits in remote_hits.items():
        lists[name] = [(name, i) for i in range(len(hits))]
        for i, h in enumerate(hits):
            pool[(name, i)] = Hit(remote=True, **{k: h.get(k, [] if k == "highlights" else "" if k not in
                                                           ("line", "end_line", "score") else 0) for k in Hit.PUBLIC})
    fused = rrf(lists)
    result.hits = []
    for key in sorted(fused, key=lambda key: -fused[key][0])[:n]:
        pool[key].score = fused[key][0]
        result.hits.append(pool[key])
