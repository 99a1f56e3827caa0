"""A query parsed once: its tokens, identifiers, FTS5 phrases and words, and the route it takes."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import RecallError
from . import terms

MAX_QUERY_CHARS = 2000
MODES = ("auto", "keyword", "semantic", "hybrid")
QUOTES = "\"'`“”‘’"
NO_PROVIDER = "no embedding provider"
COMMAND_TOKENS = 6            # a flag in a query this short makes it a command, not a question


@dataclass(frozen=True)
class Route:
    """Which lists a search reads: `kind` is keyword, semantic or hybrid; `reason` says why a
    search took a route other than its mode's own ("" when it did not)."""
    kind: str
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.kind} ({self.reason})" if self.reason else self.kind

    @property
    def vectors(self) -> bool:
        return self.kind != "keyword"


@dataclass(frozen=True)
class Query:
    """What every part of a search reads of the query: nothing downstream splits the text again."""
    text: str
    tokens: tuple         # split at white space, surrounding quotes and punctuation stripped
    identifiers: tuple    # the tokens someone types only to find that exact thing, as the index holds them
    phrases: tuple        # FTS5 phrases (a token's words), question words dropped, once each
    words: tuple          # every word as SQLite's unicode61 cuts it, lower-cased
    lookup: str           # why the query looks up one exact thing ("" for a question)

    def fts(self, op: str = "OR") -> str:
        """A safe FTS5 query: every phrase quoted, joined with `op` (OR / AND)."""
        return f" {op} ".join(f'"{p}"' for p in self.phrases)


def is_flag(token: str) -> bool:
    """`--ignore-daemonsets`, `-n`: an option of a command line."""
    body = token.lstrip("-")
    return token.startswith("-") and len(token) - len(body) <= 2 and body[:1].isalpha()


def lookup_of(text: str, tokens: list) -> str:
    """Why a query is a lookup of one exact thing, or "": made only of identifiers (or one token
    holding punctuation), a command with a flag, or a string in quotes (a pasted error message)."""
    if terms.is_identifier_query(tokens) or (len(tokens) == 1 and not tokens[0].isalnum()):
        return "identifier"             # also one token of code: _netdev, RespectIgnoreDifferences=true
    if len(tokens) <= COMMAND_TOKENS and any(is_flag(t) for t in text.split()):
        return "command with flags"
    if len(text) > 2 and text[0] in QUOTES and text[-1] in QUOTES and len(tokens) >= 2:
        return "quoted string"
    return ""


def parse_query(text: str) -> Query:
    text = (text or "").strip()
    if not text:
        raise RecallError("empty query", "say what to look for, e.g. recall search 'INC-10963'")
    if len(text) > MAX_QUERY_CHARS:
        raise RecallError(f"the query is {len(text):,} characters; the limit is {MAX_QUERY_CHARS:,}",
                          "search for its most distinctive words or identifiers")
    tokens = terms.query_tokens(text)
    return Query(text=text, tokens=tuple(tokens),
                 identifiers=tuple(dict.fromkeys(t.lower().strip("-.") for t in tokens if terms.is_identifier(t))),
                 phrases=tuple(terms.phrases(tokens)), words=tuple(terms.words(text)), lookup=lookup_of(text, tokens))


def route_for(mode: str, query: Query, provider: str) -> Route:
    """The lists a search reads: a lookup and a search without a provider read the keyword list
    alone; other auto searches read both."""
    if mode not in MODES:
        raise RecallError(f"unknown mode '{mode}'", "use one of: " + ", ".join(MODES))
    if mode == "keyword":
        return Route("keyword")
    if mode in ("semantic", "hybrid"):
        if provider == "none":
            raise RecallError(f"--mode {mode} needs an embedding provider, and none is configured",
                              "set embedding.provider to voyage or local in the config, then run 'recall index'")
        return Route(mode)
    if query.lookup:
        return Route("keyword", query.lookup)
    return Route("keyword", NO_PROVIDER) if provider == "none" else Route("hybrid")
