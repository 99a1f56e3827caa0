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
