"""What every verb prints through: an Answer's text (control characters made visible) or its JSON on
stdout, its notices on stderr, a progress line on a terminal, and CMD after an id's `--`."""
from __future__ import annotations

import re
import sys
import time

# C0 and C1 controls but tab and newline, DEL, and the bidirectional overrides: a note or a file
# holding them could move the cursor, set the title or write the clipboard (ESC ] 52) if sent as is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` as a terminal may receive it: a line's CRLF as LF, every other control shown as \\xNN."""
    text = text.replace("\r\n", "\n")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                        else f"\\u{ord(m.group()):04x}", text)


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


CONFIG = {"named": None}        # this run's --config FILE: every recall command it tells the person to run names it


def told(said):
    """`said` (a text, a list or a dict) with the recall commands in it naming this run's --config, if any."""
    from .. import api
    return api.with_config(said, CONFIG["named"]) if CONFIG["named"] else said


def say(line: str) -> None:
    """One remark on stderr: `recall: …`."""
    sys.stderr.write(f"recall: {visible(told(line))}\n")


def emit(args, ans) -> int:
    """An Answer as the verb prints it: its JSON with --json, else its notices (stderr) and text;
    the verb's exit code. `args` None: an exec, whose answer is the child's own output (never JSON).
    Only an answer of recall's own sentences (`own`: no note, entry or value in it) names --config."""
    own = told if ans.extra.get("own") else (lambda said: said)
    if getattr(args, "json", False):
        import json
        sys.stdout.write(json.dumps(own(ans.to_dict()), indent=2, ensure_ascii=False, default=str) + "\n")
        return ans.code
    for notice in ans.notices:
        say(notice)
    if ans.text():
        _out(visible(own(ans.text())))
    return ans.code


def config_of(args):
    """The --config FILE the person named, or None (RECALL_CONFIG, then the default)."""
    return getattr(args, "config", None)


def progress_line(done: int, total: int, label: str, seconds: float) -> str:
    """`[####    ] 64/610 embedding  12.3/s, 0:44 left`: the rate and time left once a step is
    done, from the `seconds` this phase has taken."""
    width = 30
    filled = int(width * done / max(total, 1))
    line = f"[{'#' * filled}{' ' * (width - filled)}] {done}/{total} {visible(label[-40:])}"
    if 0 < done < total and seconds > 0:
        rate = done / seconds
        left = int((total - done) / rate)
        line += f"  {rate:.1f}/s, {left // 60}:{left % 60:02d} left"
    return line


class Progress:
    """A one-line progress bar on a terminal's stderr; silent on a pipe. A phase (a source's
    files, the embedding) is timed from the previous phase's last step, or from the start."""

    def __init__(self):
        self.on = sys.stderr.isatty()
        self.last = 0.0
        self.label, self.since = None, time.monotonic()
        self.step = self.since              # when the latest step was reported

    def __call__(self, done, total, label):
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
