"""The exceptions users see: one family, each a sentence of what happened and what to do."""
from __future__ import annotations


class RecallError(Exception):
    """An error meant for the user: the CLI prints `recall: <message> — <hint>` and exits 1."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} — {self.hint}" if self.hint else self.message


class InputError(RecallError):
    """A file the user edits is wrong; the message names `file:line[:col]`."""

    def __init__(self, path: str, line: int | None, message: str, col: int | None = None,
                 hint: str | None = None):
        where = str(path)
        if line is not None:
            where += f":{line}"
            if col is not None:
                where += f":{col}"
        super().__init__(f"{where}: {message}", hint)
        self.path, self.line, self.col = str(path), line, col


class MissingExtra(RecallError):
    """An optional package is needed for this feature and is not installed."""

    def __init__(self, extra: str, feature: str):
        super().__init__(f"{feature} needs an optional package",
                         f"pip install 'recall[{extra}]'")
        self.extra = extra


class NotFound(RecallError):
    """An id, path or entry that does not exist."""


class PrerequisiteDown(RecallError):
    """A `requires` entry failed its check; exit 69 (EX_UNAVAILABLE)."""

    exit_code = 69


# -- one way to name things: an id or an alias, in any case; an unknown name gets the closest ones
def resolve(name: str, names: dict, what: str, hint: str) -> str:
    """The id that `name` names. `names` maps every id and alias to its id; ids win over aliases,
    an exact spelling over another case."""
    key = (name or "").strip()
    if key in names:
        return names[key]
    folded = {n.lower(): i for n, i in reversed(names.items())}     # the first of the spellings wins
    if key.lower() in folded:
        return folded[key.lower()]
    close = closest(key, names)
    raise NotFound(f"no {what} '{key}'", f"did you mean: {', '.join(close)}?" if close else hint)


def did_you_mean(name: str, known, otherwise: str) -> str:
    """'did you mean 'X'?' with the one name of `known` nearest to `name`, else `otherwise`."""
    close = closest(name, {k: k for k in known})
    return f"did you mean '{close[0]}'?" if close else otherwise


def closest(name: str, names: dict) -> list:
    """The (at most 4) names nearest to `name` (typos, a part of the id), an alias said as 'alias (id)'."""
    import difflib
    q = name.lower()

    def ratio(c: str) -> float:
        r = difflib.SequenceMatcher(None, q, c).ratio()
        return max(r, 0.75) if len(q) >= 3 and (q in c or c in q) else r

    out: dict = {}           # target -> how it is said, the nearest name of each target
    for r, cand, target in sorted((-ratio(cand.lower()), cand, target) for cand, target in names.items()):
        if -r >= 0.6:
            out.setdefault(target, cand if cand == target else f"{cand} ({target})")
    return list(out.values())[:4]


def shell_line(command: str) -> str:
    """`command`, refused when it holds a NUL: no shell runs one (bash drops it silently)."""
    if "\0" in command:
        raise RecallError("the command holds a NUL character, which no shell can run", "leave it out")
    return command
