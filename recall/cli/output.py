"""What every verb prints through: text or --json on stdout, the config and DB a verb opens, a progress
line on a terminal, and CMD after an id's `--`."""
from __future__ import annotations

import sys


def _command(args) -> list:
    """CMD after the id. argparse's REMAINDER also swallows this verb's own options written after
    the id (`exec ID --stdin -- CMD`), so those leading options are parsed here; `--` ends them."""
    cmd, head = list(args.cmd), []
    known = args.options._option_string_actions
    while cmd and cmd[0] in known:
        word = cmd.pop(0)
        head.append(word)
        if known[word].nargs != 0 and cmd:
            head.append(cmd.pop(0))
    if head:
        args.options.parse_args([*head, args.id], namespace=args)
    return cmd[1:] if cmd[:1] == ["--"] else cmd


def _out(text: str = "") -> None:
    sys.stdout.write(text + ("\n" if not text.endswith("\n") else ""))


def _json_done(args, data) -> bool:
    """With --json: `data` printed as JSON, and True (the verb prints nothing else)."""
    if not getattr(args, "json", False):
        return False
    import json
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    return True


def _said(args, data, text: str) -> int:
    """`data` as JSON with --json, else `text`; exit code 0."""
    if not _json_done(args, data):
        _out(text)
    return 0


def _config(args):
    from ..config import load_config
    return load_config(getattr(args, "config", None))


def _opened(args) -> tuple:
    """(cfg, con): the config args name and its DB, open until the process ends."""
    from .. import db
    cfg = _config(args)
    return cfg, db.connect(cfg.db_path)


def progress_line(done: int, total: int, label: str, seconds: float) -> str:
    """`[####    ] 64/610 embedding  12.3/s, 0:44 left`: the rate and time left once a step is
    done, from the `seconds` this phase has taken."""
    width = 30
    filled = int(width * done / max(total, 1))
    line = f"[{'#' * filled}{' ' * (width - filled)}] {done}/{total} {label[-40:]}"
    if 0 < done < total and seconds > 0:
        rate = done / seconds
        left = int((total - done) / rate)
        line += f"  {rate:.1f}/s, {left // 60}:{left % 60:02d} left"
    return line


class _Progress:
    """A one-line progress bar on a terminal's stderr; silent on a pipe. A phase (a source's
    files, the embedding) is timed from the previous phase's last step, or from the start."""

    def __init__(self):
        import time
        self.on = sys.stderr.isatty()
        self.last = 0.0
        self.label, self.since = None, time.monotonic()
        self.step = self.since              # when the latest step was reported

    def __call__(self, done, total, label):
        import time
        now = time.monotonic()
        if label != self.label:
            self.label, self.since = label, self.step
        self.step = now
        if not self.on or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        line = progress_line(done, total, label, now - self.since)
        sys.stderr.write(f"\r{line:<100}")
        if done >= total:
            sys.stderr.write("\r" + " " * 100 + "\r")
        sys.stderr.flush()