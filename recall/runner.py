"""Run a child with injected env/stdin and masked output: `secret exec` (the value asked of the vault), and
the pump access exec shares."""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

from .errors import RecallError
from .mask import Masker, MaskStream

READ_SIZE = 64 * 1024
TIMEOUT_CODE = 124
_TERM_GRACE = 1.0      # seconds between SIGTERM and SIGKILL of the process group
_DRAIN_GRACE = 1.0     # after the child exits (or is killed), pipes idle this long are abandoned
_DRAIN_MAX = 10.0      # ... and pipes a grandchild keeps writing to are abandoned after this long
_POLL = 0.1            # select wake-up to notice the child's exit while a grandchild holds the pipes
RELEASE = 0.5          # a pipe idle this long has its held-back tail masked and released (a prompt shows)


class RunResult:
    """A finished child: exit code, masked output (empty when streamed), whether it timed out, and
    for access exec the setup steps not run as (step, why). A plain class: no dataclasses at start-up."""

    def __init__(self, code: int, stdout: bytes, stderr: bytes, timed_out: bool = False, left_out=None):
        self.code, self.stdout, self.stderr, self.timed_out = code, stdout, stderr, timed_out
        self.left_out = list(left_out or [])

    def __eq__(self, other) -> bool:
        return isinstance(other, RunResult) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"RunResult(code={self.code}, timed_out={self.timed_out})"


class _Sink:
    """One output pipe: its mask stream, and where masked bytes go (a binary file or a buffer)."""

    def __init__(self, masker: Masker, target):
        self.stream: MaskStream = masker.stream()
        self.target = target
        self.captured = bytearray()
        self.fed_at = 0.0

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self.target is None:
            self.captured += data
        else:
            self.target.write(data)
            self.target.flush()


def run_masked(argv: list[str], *, env: dict[str, str], masker: Masker, stdin: bytes | None = None,
               out=None, err=None, timeout: float | None = None, cwd: str | None = None) -> RunResult:
    """Run argv (no shell) with exactly `env`; write `stdin` then close it; mask both outputs.

    `out`/`err` are binary files that receive masked output as it arrives; None captures it
    into the result. On timeout the whole process group is killed and the code is 124.
    """
    if not argv:
        raise RecallError("no command given", "put the command after `--`")
    proc = _start(argv, env, stdin is not None, cwd)
    sinks = {proc.stdout: _Sink(masker, out), proc.stderr: _Sink(masker, err)}
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        timed_out = _pump(proc, sinks, stdin or b"", deadline)
        try:  # the child may have closed its pipes and still be running
            code = proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            code = proc.wait()
    finally:
        if proc.poll() is None:  # an exception (e.g. KeyboardInterrupt, a closed `out`) left it running
            _kill_group(proc)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()
    if timed_out:
        code = TIMEOUT_CODE
    elif code < 0:
        code = 128 - code
    return RunResult(code, bytes(sinks[proc.stdout].captured), bytes(sinks[proc.stderr].captured),
                     timed_out)


def _start(argv: list[str], env: dict[str, str], with_stdin: bool, cwd: str | None) -> subprocess.Popen:
    try:
        return subprocess.Popen(
            list(argv), env=dict(env), cwd=cwd,
            stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)  # own process group: a timeout kills grandchildren too
    except FileNotFoundError as exc:
        if cwd is not None and exc.filename == cwd:
            raise RecallError(f"working directory not found: {cwd}", "check the path") from None
        raise RecallError(f"command not found: {argv[0]}",
                          "check the spelling, or that it is on the PATH given to the child") from None
    except PermissionError:
        raise RecallError(f"command not executable: {argv[0]}",
                          "check the file's permissions") from None
    except OSError as exc:
        raise RecallError(f"cannot run {argv[0]}: {exc.strerror}", None) from None


def _pump(proc: subprocess.Popen, sinks: dict, data: bytes, deadline: float | None) -> bool:
    """Feed stdin and drain both pipes until EOF; returns True if the deadline passed."""
    timed_out = False
    exited_at = None  # once the child is gone, don't wait forever on a grandchild's pipe
    last_data = 0.0
    offset = 0
    with selectors.DefaultSelector() as selector:
        for pipe in sinks:
            selector.register(pipe, selectors.EVENT_READ)
        if proc.stdin is not None:
            if data:
                selector.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                _close_quietly(proc.stdin)
        while selector.get_map():
            now = time.monotonic()
            if deadline is not None and now >= deadline and not timed_out:
                timed_out = True
                _kill_group(proc)
                now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = last_data = now
            if exited_at is not None and (now - last_data >= _DRAIN_GRACE
                                          or now - exited_at >= _DRAIN_MAX):
                break
            wait = _POLL
            if deadline is not None and not timed_out:
                wait = max(0.0, min(_POLL, deadline - now))
            for sink in sinks.values():
                if sink.stream.holding:
                    idle = now - sink.fed_at
                    if idle >= RELEASE:       # by time alone, whatever is held: no timing signal
                        sink.write(sink.stream.flush())
                    else:
                        wait = min(wait, RELEASE - idle)
            for key, _ in selector.select(wait):
                pipe = key.fileobj
                if pipe is proc.stdin:
                    offset = _write_some(selector, pipe, data, offset)
                    continue
                chunk = os.read(key.fd, READ_SIZE)
                sink = sinks[pipe]
                if chunk:
                    sink.write(sink.stream.feed(chunk))
                    last_data = sink.fed_at = time.monotonic()
                else:
                    selector.unregister(pipe)
                    pipe.close()
        for sink in sinks.values():
            sink.write(sink.stream.flush())
    if proc.stdin is not None:
        _close_quietly(proc.stdin)
    return timed_out


def _write_some(selector, pipe, data: bytes, offset: int) -> int:
    """Write the next piece of stdin; at the end (or if the child stopped reading) close it."""
    try:
        # select.PIPE_BUF bytes never block on a writable pipe (the same rule communicate() uses).
        offset += os.write(pipe.fileno(), data[offset:offset + 512])
    except (BrokenPipeError, ConnectionResetError):
        offset = len(data)
    if offset >= len(data):
        selector.unregister(pipe)
        _close_quietly(pipe)
    return offset


def _close_quietly(pipe) -> None:
    try:
        pipe.close()
    except OSError:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after a grace period."""
    for sig, grace in ((signal.SIGTERM, _TERM_GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if grace is None:
            break
        try:
            proc.wait(grace)
            # The leader is gone; grandchildren in its group may linger, so finish them too.
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def secret_exec(con, cfg, secret_id: str, argv: list, *, stdin: bool = False, out=None, err=None,
                timeout=None):
    """`secret exec`: run argv with the secret injected (its value asked of the vault) and every
    vault value masked in its output."""
    import shlex

    from . import audit, vault
    if not argv:
        raise RecallError("no command given", f"recall secret exec {secret_id} -- CMD …")
    row = vault.row_named(con, secret_id)
    secret_id = row["id"]
    all_values = vault.load_values(con, cfg, need=(secret_id,))
    masker = vault.masker_for(all_values)
    masked_argv = masker.mask(shlex.join(argv).encode()).decode("utf-8", "replace")
    session = None
    if row["inject"] == "proxy":        # the child gets a placeholder; the proxy attaches the value
        if stdin:
            raise RecallError(f"secret '{secret_id}' is host-bound (inject: proxy): it is never written to stdin",
                              f"recall secret exec {secret_id} -- CMD (without --stdin)")
        from .hostbound import Session
        session = Session([row], all_values, masker)
        env = session.child_env(vault.child_env())
        data = None
    else:
        extra, data = vault.injection(row, all_values[secret_id], stdin)
        env = {**vault.child_env(), **extra}
    try:
        result = run_masked(list(argv), env=env, masker=masker, stdin=data, out=out, err=err, timeout=timeout)
    except RecallError:
        audit.log(con, "secret.exec", secret_id, argv=masked_argv, verdict="not run")
        raise
    finally:
        if session is not None:
            session.close()
            session.log(con, "secret.exec")
    audit.log(con, "secret.exec", secret_id, argv=masked_argv, verdict="ran", exit_code=result.code)
    result.notes = session.notes() if session is not None else []
    return result
