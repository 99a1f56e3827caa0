"""Redaction: every vault value in note text that is shown, indexed or embedded becomes [recall:ID]
(the values, and whether there are any, are the vault's: the faces pass its redactor in); fail closed."""
from __future__ import annotations

import re

from ..errors import RecallError

PUBLIC_FIELDS = ("username", "user", "login", "email")   # injected, never masked or redacted
_SHORT_MIN = 4             # values of 4-5 characters are redacted as written (whole tokens only)


class VaultClosed(RecallError):
    """The vault holds values but cannot be opened here, so note text cannot be checked for them."""


def public_fields(meta: dict) -> set:
    """Fields of a secret that are not secret: usernames, logins, emails, and any marked public."""
    return set(PUBLIC_FIELDS) | set(meta.get("public") or ())


def secret_parts(values: dict, publics: dict) -> dict:
    """{secret id: [values to mask]}: every field but the public ones."""
    return {sid: [v for f, v in vals.items() if f not in publics.get(sid, PUBLIC_FIELDS)]
            for sid, vals in values.items()}


def closed(exc: RecallError) -> VaultClosed:
    """Why a vault that holds values cannot redact here, as the one error every reader gets."""
    return VaultClosed(f"the vault holds values but cannot be opened here ({exc.message}), so note "
                       "text cannot be checked for them and is not shown",
                       exc.hint or "run 'recall secret sync'")


class VaultValues(dict):
    """{secret id: {field: value}}, and `public`: {secret id: fields that are not secret} (vault.load_values)."""
    public: dict = {}


def identity(text: str) -> str:
    return text


def text_redactor(values: dict, publics: dict):
    """The redactor for decrypted `values` ({id: {field: value}}): values of 4-5 characters as whole
    tokens, any piece of a longer one by the masker, built on the first text (a run that redacts
    nothing never pays for it)."""
    from .mask import MIN_SECRET_LEN, Masker
    parts = secret_parts(values, publics)
    short = sorted(((str(v), sid) for sid, vals in parts.items() for v in vals
                    if _SHORT_MIN <= len(str(v)) < MIN_SECRET_LEN), key=lambda p: -len(p[0]))
    short_res = [(re.compile(r"(?<![\w-])" + re.escape(v) + r"(?![\w-])"), f"[recall:{sid}]")
                 for v, sid in short]
    masker: list = []

    def redact(text: str) -> str:
        for pattern, label in short_res:
            text = pattern.sub(label, text)
        if not masker:
            masker.append(Masker(parts, notes=True))
        data = text.encode("utf-8", "surrogatepass")
        masked = masker[0].mask(data)
        return text if masked == data else masked.decode("utf-8", "replace")
    return redact


def redact_hits(hits: list, redact) -> list:
    """Remote search hits (dicts) with every text field redacted on the local side too."""
    return [{k: redact(v) if isinstance(v, str) else v for k, v in hit.items()} for hit in hits]
