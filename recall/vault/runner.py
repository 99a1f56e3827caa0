"""The one child runner: every child that holds secrets starts here — injected env/stdin or a host-bound
session, output masked as it streams, timeouts, the audit row (`secret exec`, `access exec`, verify)."""
from __future__ import annotations

import contextlib
import contextvars
import json
import os
import selectors
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

from ..errors import RecallError
from . import audit, door
from . import store as vault
from .mask import Masker, check_maskable
from .reaper import end, kill_group, start
from .redact import public_fields, secret_parts

READ_SIZE = 64 * 1024
KEEP_HEAD, KEEP_TAIL = 4 << 20, 1 << 20   # captured output (an MCP call's, a proof's): the first, the last
TIMEOUT_CODE = 124
_DRAIN_GRACE = 1.0     # after the child exits (or is killed), pipes idle this long are abandoned
_DRAIN_MAX = 10.0      # ... and pipes a grandchild keeps writing to are abandoned after this long
_POLL = 0.1            # select wake-up to notice the child's exit while a grandchild holds the pipes
RELEASE = 0.5          # a pipe idle this long has its held-back tail masked and released (a prompt shows)
_STOP_WAIT = 5.0       # how long stop_all waits for the runs it stopped to end (their audit rows written)

# A run ends early when its caller is told to stop (an MCP client cancelled the call: `stopping`) or the
# whole process is going away (`stop_all`): its child's process group is killed, as on a timeout.
_STOP = contextvars.ContextVar("recall_stop", default=())      # the events of every enclosing `stopping`
_ENDING = threading.Event()
_RUNS = threading.Condition()
_LIVE = [0]            # runs in progress (under _RUNS)


@dataclass
class RunResult:
    """A finished child: exit code, masked output (empty when streamed), whether it timed out; access exec
    adds kubectl's context; `notes` are for the user."""
    code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    notes: list = field(default_factory=list)
    context: str = ""


@dataclass
class Prelude:
    """What a script's own setup did before its command: more values to mask (the child holds them),
    its output so far (held unmasked until now), and, when it failed, the error for its last line."""
    masks: dict
    stderr: bytes
    error: Callable[[str], RecallError] | None = None


@dataclass
class Child:
    """One child that holds secrets: what runs, what it is given, how it is masked and audited."""
    verb: str                        # audit verb: secret.exec | access.exec | verify
    target: str                      # audit target: the secret or entry id
    shown: str                       # the command as the access log shows it (masked here)
    env: dict                        # the child's whole environment
    masks: dict                      # {label id: [values]} masked in both outputs
    given: tuple = ()                # label ids whose values the child holds: their prefixes are held
    argv: list | None = None         # run as is (no shell) ...
    script: Callable[[int, int], str] | None = None   # ... or bash reading script(fd, report fd) from a pipe
    prelude: Callable | None = None  # (proc, report fd) -> Prelude, for a script's setup
    stdin: bytes | None = None
    host_bound: list = field(default_factory=list)    # inject: proxy rows: a hostbound.Session for the run
    values: dict = field(default_factory=dict)        # the vault's values (the session's bindings)
    placeholders: dict | None = None
    timeout: float | None = None
    cwd: str | None = None


class _Sink:
    """One output pipe: its mask stream, and where masked bytes go (a binary file, or captured)."""

    def __init__(self, masker: Masker, target, given):
        self.stream = masker.stream(given)
        self.target = target
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0
        self.fed_at = 0.0

    def feed(self, chunk: bytes) -> None:
        self.write(self.stream.feed(chunk))
        self.fed_at = time.monotonic()

    def write(self, data: bytes) -> None:
        if self.target is None:        # captured: the first KEEP_HEAD bytes and the last KEEP_TAIL
            room = KEEP_HEAD - len(self.head)
            self.head += data[:room]
            self.tail += data[room:] if room > 0 else data
            if len(self.tail) > 2 * KEEP_TAIL:
                self.dropped += len(self.tail) - KEEP_TAIL
                del self.tail[:-KEEP_TAIL]
        elif data:
            self.target.write(data)
            self.target.flush()

    @property
    def captured(self) -> bytes:
        """What was kept, and how much between the two was not (masked all the same, then dropped)."""
        if not self.dropped:
            return bytes(self.head + self.tail)
        gap = f"\n[recall: {self.dropped:,} bytes of output not kept here]\n".encode()
        return bytes(self.head + gap + self.tail)


def run(con, child: Child, out=None, err=None) -> RunResult:
    """Run `child` with its host-bound session open for the run; write its one audit row (`ran`,
    `not run`, or `setup failed`)."""
    with _RUNS:
        _LIVE[0] += 1
    try:
        return _run(con, child, out, err)
    finally:
        with _RUNS:
            _LIVE[0] -= 1
            _RUNS.notify_all()


def _run(con, child: Child, out, err) -> RunResult:
    masker = door.masker(child.masks)
    verdict, shown = "not run", child.shown
    session = proc = None
    started: list = []        # the child, as soon as it runs: a signal may land before `proc` is set
    # logged before the child gets a value: a log that cannot take the row (a full disk) stops it
    # here, and a recall killed while the child runs leaves the row 'running', not no row at all
    row = audit.log(con, child.verb, child.target, argv="", verdict="running")
    try:
        if child.host_bound:
            from ..hostbound import Session, placeholders_for
            chosen = child.placeholders
            session = Session(child.host_bound, child.values, masker,
                              placeholders_for(child.host_bound, public_fields) if chosen is None else chosen,
                              release=RELEASE)
        proc, report = _start(child, child.env if session is None else session.child_env(child.env), started)
        given, held = list(child.given), b""
        if child.prelude is not None:
            try:
                pre = child.prelude(proc, report)
            except BaseException:      # an interrupt while the setup runs: nothing is left running
                _stop(proc, masker, b"")
                raise
            finally:
                os.close(report)
            masker = door.masker({**child.masks, **pre.masks})
            given += list(pre.masks)
            held = pre.stderr
            if pre.error is not None:
                verdict = "setup failed"
                raise pre.error(_stop(proc, masker, held))
        shown = masker.mask(shown.encode("utf-8", "surrogateescape")).decode("utf-8", "replace")
        result = _drive(proc, masker, given, child.stdin, out, err, child.timeout, held)
    except RecallError:
        shown = masker.mask(shown.encode("utf-8", "surrogateescape")).decode("utf-8", "replace")
        audit.finish(con, row, argv=shown, verdict=verdict)
        raise
    except BaseException:      # Ctrl-C, SIGTERM, a reader gone (`| head`): the child had its values all the same
        shown = masker.mask(shown.encode("utf-8", "surrogateescape")).decode("utf-8", "replace")
        with suppress(Exception):          # the interrupt is what the user must get
            audit.finish(con, row, argv=shown, verdict="stopped" if started else "not run")
        raise
    finally:
        for started_proc in started:     # whatever happened since it started, it ends before the session
            end(started_proc)
        if session is not None:
            session.close()
            for verb, sid, argv, said in session.log_rows(child.verb):
                audit.log(con, verb, sid, argv=argv, verdict=said)
    result.notes = session.notes() if session is not None else []
    try:
        audit.finish(con, row, argv=shown, verdict="ran", exit_code=result.code)
    except Exception as exc:     # the child ran: its code is the answer; the row stays 'running'
        from ..db import explain
        fault = explain(exc)
        if fault is None:
            raise
        result.notes.append(f"the access log kept this run as 'running', not how it ended: {fault}")
    return result


def _start(child: Child, env: dict, started: list) -> tuple:
    """(process, read end of the report pipe or None): argv as is, or bash reading the script from
    a pipe (never argv: an inline `export X_TOKEN=…` would sit in /proc/PID/cmdline)."""
    if stopped():
        raise RecallError("stopped before it ran", "nothing ran")
    if child.script is None:
        if not child.argv:
            raise RecallError("no command given", "put the command after `--`")
        return _popen(list(child.argv), env, child, (), started), None
    script_r, script_w = os.pipe()
    report_r, report_w = os.pipe()
    text = child.script(script_r, report_w).encode("utf-8", "surrogateescape")
    try:
        proc = _popen(["bash", "--noprofile", "--norc", f"/dev/fd/{script_r}"], env, child, (script_r, report_w),
                      started)
    except RecallError:
        os.close(script_w)
        os.close(report_r)
        raise
    finally:
        os.close(script_r)
        os.close(report_w)
    threading.Thread(target=_feed, args=(script_w, text), name="child script", daemon=True).start()
    return proc, report_r


def _feed(fd: int, text: bytes) -> None:
    with suppress(OSError), open(fd, "wb") as pipe:    # bash stopped reading (it failed early): its code says why
        pipe.write(text)


def _popen(argv: list, env: dict, child: Child, fds: tuple, started: list) -> subprocess.Popen:
    try:
        return start(argv, started, env=dict(env), cwd=child.cwd, pass_fds=fds,
                     stdin=subprocess.DEVNULL if child.stdin is None else subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        if child.cwd is not None and exc.filename == child.cwd:
            raise RecallError(f"working directory not found: {child.cwd}", "check the path") from None
        if len(argv) == 1 and any(c in argv[0] for c in " |;&$<>"):     # a shell line, quoted whole
            raise RecallError(f"command not found: {argv[0]}", "that is a whole shell line in one word; "
                              f"give it to a shell: -- sh -c {shlex.quote(argv[0])}") from None
        raise RecallError(f"command not found: {argv[0]}", not_on_path(env.get("PATH", ""))) from None
    except PermissionError:
        raise RecallError(f"command not executable: {argv[0]}", "check the file's permissions") from None
    except OSError as exc:
        raise RecallError(f"cannot run {argv[0]}: {exc.strerror}", None) from None


def _stop(proc: subprocess.Popen, masker: Masker, held: bytes) -> str:
    """End a child whose setup failed (at once: a timeout of 0); the last line of its stderr, masked."""
    err = _drive(proc, masker, (), None, None, None, 0, held).stderr
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


def _drive(proc: subprocess.Popen, masker: Masker, given, stdin: bytes | None, out, err,
           timeout: float | None, held: bytes = b"") -> RunResult:
    """Pump a started child to its end: stdin written, both outputs masked (`held`: stderr it wrote
    before, not yet masked), the timeout applied to its whole process group."""
    sinks = {proc.stdout: _Sink(masker, out, given), proc.stderr: _Sink(masker, err, given)}
    if held:
        sinks[proc.stderr].feed(held)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        timed_out = _pump(proc, sinks, stdin or b"", deadline)
        code = _wait(proc, deadline)      # the child may have closed its pipes and still be running
        if code is None:
            timed_out = not stopped()
            kill_group(proc)
            code = proc.wait()
    finally:                     # running still after an exception (Ctrl-C, a closed `out`) or not
        end(proc)
        _close(proc.stdin, proc.stdout, proc.stderr)
    code = TIMEOUT_CODE if timed_out else (128 - code if code < 0 else code)
    return RunResult(code, sinks[proc.stdout].captured, sinks[proc.stderr].captured, timed_out)


def _pump(proc: subprocess.Popen, sinks: dict, data: bytes, deadline: float | None) -> bool:
    """Feed stdin and drain both pipes until EOF; True if the deadline passed."""
    timed_out = killed = False
    exited_at = None  # once the child is gone, don't wait forever on a grandchild's pipe
    last_data = 0.0
    offset = 0
    with selectors.DefaultSelector() as selector:
        for pipe in sinks:
            selector.register(pipe, selectors.EVENT_READ)
        if data:
            selector.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            _close(proc.stdin)
        while selector.get_map():
            now = time.monotonic()
            if not killed and (deadline is not None and now >= deadline or stopped()):
                killed, timed_out = True, not stopped()
                kill_group(proc)
                now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = last_data = now
            if exited_at is not None and (now - last_data >= _DRAIN_GRACE or now - exited_at >= _DRAIN_MAX):
                break
            wait = _POLL if deadline is None or killed else max(0.0, min(_POLL, deadline - now))
            for sink in sinks.values():
                if sink.stream.holding:
                    idle = now - sink.fed_at
                    if idle >= RELEASE:       # by time alone (but a prefix of the child's own value)
                        sink.write(sink.stream.release())
                    else:
                        wait = min(wait, RELEASE - idle)
            for key, _ in selector.select(wait):
                if key.fileobj is proc.stdin:
                    offset = _write_some(selector, proc.stdin, data, offset)
                elif chunk := os.read(key.fd, READ_SIZE):
                    sinks[key.fileobj].feed(chunk)
                    last_data = time.monotonic()
                else:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
        for sink in sinks.values():
            sink.write(sink.stream.flush())
    return timed_out


def _wait(proc: subprocess.Popen, deadline: float | None):
    """The child's exit code, or None once the deadline passed or the run was told to stop."""
    while True:
        left = _POLL if deadline is None else min(_POLL, deadline - time.monotonic())
        if left <= 0 or stopped():
            return proc.poll()
        with suppress(subprocess.TimeoutExpired):
            return proc.wait(left)


def stopped() -> bool:
    """Whether the run in this context was told to stop: a `stopping` event around it is set, or the
    process is ending (stop_all)."""
    return _ENDING.is_set() or any(event.is_set() for event in _STOP.get())


@contextlib.contextmanager
def stopping(event: threading.Event):
    """Runs started inside (in this thread, or in a context copied from it) end when `event` is set, or
    the event of an enclosing `stopping` is (an MCP call's around a sweep's own)."""
    token = _STOP.set((*_STOP.get(), event))
    try:
        yield
    finally:
        _STOP.reset(token)


def stop_all(wait: float = _STOP_WAIT) -> bool:
    """The process is ending: every run stops (its child's group killed) and is waited for, up to
    `wait` seconds, so no child outlives it. True when none is left."""
    _ENDING.set()
    with _RUNS:
        return _RUNS.wait_for(lambda: _LIVE[0] == 0, wait)


def _write_some(selector, pipe, data: bytes, offset: int) -> int:
    """Write the next piece of stdin; at the end (or if the child stopped reading) close it."""
    try:
        # select.PIPE_BUF bytes never block on a writable pipe (the same rule communicate() uses).
        offset += os.write(pipe.fileno(), data[offset:offset + 512])
    except (BrokenPipeError, ConnectionResetError):
        offset = len(data)
    if offset >= len(data):
        selector.unregister(pipe)
        _close(pipe)
    return offset


def _close(*pipes) -> None:
    for pipe in pipes:
        if pipe is not None:
            with suppress(OSError):
                pipe.close()


def run_check(argv: list, timeout: float):
    """A check's exit code (None: not finished within `timeout`, or told to stop): no stdin, output
    discarded, none of recall's own variables, in a process group of its own that ends with it (a
    credential plugin it started too). OSError when it cannot start."""
    started: list = []
    try:
        proc = start(argv, started, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     env=child_env())
        return _wait(proc, time.monotonic() + timeout)
    finally:
        for proc in started:
            end(proc)


def secret_exec(con, cfg, secret_id: str, argv: list, *, stdin: bool = False, out=None, err=None,
                timeout=None) -> RunResult:
    """`secret exec`: run argv with the secret injected (its value asked of the vault) and every
    vault value masked in its output."""
    if not argv and vault.stored_row(con, secret_id) is None:     # `secret exec -- CMD`: the id left out
        raise RecallError(f"no command given, and no secret '{secret_id}'",
                          f"the id goes before --: recall secret exec ID -- {shlex.quote(secret_id)} …")
    if not argv or not argv[0]:
        raise RecallError("no command given" if not argv else "the command is an empty word",
                          f"recall secret exec {secret_id} -- CMD …")
    row = vault.row_named(con, secret_id, cfg)
    secret_id = row["id"]
    values = vault.load_values(con, cfg, need=(secret_id,))
    env, data, host_bound = child_env(), None, []
    if row["inject"] == "proxy":        # the child gets a placeholder; the proxy attaches the value
        if stdin:
            raise RecallError(f"secret '{secret_id}' is host-bound (inject: proxy): it is never written to stdin",
                              f"recall secret exec {secret_id} -- CMD (without --stdin)")
        host_bound = [row]
    else:
        extra, data = injection(row, values[secret_id], stdin)
        env.update(extra)
    child = Child("secret.exec", secret_id, shlex.join(argv), env, secret_parts(values, values.public),
                  given=() if host_bound else (secret_id,), argv=list(argv), stdin=data,
                  host_bound=host_bound, values=values, timeout=timeout)
    return run(con, child, out, err)


def not_on_path(path: str) -> str:
    """What to do about a command the child's PATH does not hold (an MCP client may start recall mcp
    with a bare one: /usr/bin:/bin)."""
    return (f"check the spelling, or start recall with a PATH that holds it (the child's: {path or '(none)'}; "
            "for recall mcp, \"env\": {\"PATH\": …} in its client's settings)")


def child_env() -> dict:
    """This environment less recall's own variables (RECALL_*), which no child is given; a PATH always:
    without one, bash looks in its own, which ends in '.' (a command found in the working folder)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALL_")}
    env.setdefault("PATH", os.defpath)
    return env


def injection(row, values: dict, stdin_flag: bool):
    """(extra env, stdin bytes or None) for one secret."""
    public = public_fields(json.loads(row["meta"]))
    for name, part in values.items():
        if name not in public:               # a username is injected, not masked
            check_maskable(row["id"], part)
    if row["inject"] == "proxy":       # fail closed: only hostbound.Session injects these (placeholders)
        raise RecallError(f"secret '{row['id']}' is host-bound (inject: proxy) and cannot be injected here",
                          f"use 'recall secret exec {row['id']} -- CMD' or 'recall access exec'")
    variables, data = json.loads(row["variables"]), None
    if stdin_flag or row["inject"] == "stdin":
        field, variables = vault.on_stdin(variables)
        if field is None:
            raise RecallError(f"secret '{row['id']}' has several fields and none is 'password'",
                              "stdin injection writes one value; use env injection")
        data = (values[field] + "\n").encode()
    return {var: values[f] for var, f in variables.items()}, data
