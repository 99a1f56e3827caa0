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
    """{secret id: {field: value}}, `public`: {secret id: fields that are not secret}, and `urls`:
    {secret id: its url: line} (vault.load_values)."""
    public: dict = {}
    urls: dict = {}


class Redactor:
    """Note text with every (non-public) vault value as [recall:ID]: values of 4-5 characters as whole
    tokens, any piece of a longer one by the masker, built on the first text (a run that redacts
    nothing never pays for it). `many` redacts the texts of one answer (a note's title, headings and
    sections; the lines a read shows) with one look at the vault's forms."""

    def __init__(self, parts: dict):
        self._parts = parts                # {secret id: [values to mask]}; none: the identity
        shortest = 0
        if parts:
            from .forms import MIN_SECRET_LEN as shortest
        short = sorted(((str(v), sid) for sid, vals in parts.items() for v in vals
                        if _SHORT_MIN <= len(str(v)) < shortest), key=lambda p: -len(p[0]))
        self._short = [(re.compile(r"(?<![\w-])" + re.escape(v) + r"(?![\w-])"), f"[recall:{sid}]")
                       for v, sid in short]
        self._masker = None

    def __call__(self, text: str) -> str:
        return self.many([text])[0]

    def many(self, texts: list) -> list:
        if not self._parts:
            return list(texts)
        for pattern, label in self._short:
            texts = [pattern.sub(label, t) for t in texts]
        if self._masker is None:
            from .mask import Masker
            self._masker = Masker(self._parts, notes=True)
        datas = [t.encode("utf-8", "surrogatepass") for t in texts]
        return [t if m == d else m.decode("utf-8", "replace")
                for t, d, m in zip(texts, datas, self._masker.mask_many(datas))]


identity = Redactor({})


def text_redactor(values: dict, publics: dict) -> Redactor:
    """The redactor for decrypted `values` ({id: {field: value}})."""
    return Redactor(secret_parts(values, publics))


def redact_hits(hits: list, redact: Redactor) -> list:
    """Remote search hits (dicts) with every text field redacted on the local side too."""
    fields = [(i, k) for i, hit in enumerate(hits) for k, v in hit.items() if isinstance(v, str)]
    out = [dict(hit) for hit in hits]
    for (i, k), text in zip(fields, redact.many([hits[i][k] for i, k in fields])):
        out[i][k] = text
    return out
