"""What counts as an identifier and a word: extraction at index time, routing at query time."""
from __future__ import annotations

import re

# An identifier keeps its inner punctuation: INC-10963, pg-prod-03.db.example.com, node_cpu_seconds.
_TOKEN = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?")
_WORD = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"^[A-Z]?[a-z]+(?:[A-Z][a-z0-9]+){2,}$")   # KubePodCrashLooping, alert names
_CAMEL_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_JOINERS = re.compile(r"[\W_]+")
_HELD = re.compile(r"[a-z0-9_.\-]+")

# function words: never highlighted in a snippet, nor counted when a hit is pointed at its section
STOPWORDS = frozenset("""a an and are as at be been but by can could did do does for from had has have
how i if in into is it its me my of on or our so that the their them then there these they this to
up was we were what when where which who why will with would you your about after again did does
doing done get got""".split())
# What a query drops: the words that make it a question (notes seldom hold them, so BM25 would weigh
# them like a topic word) and the eight in more than half of all prose chunks (an idf of ~0). The
# other function words stay: they carry the relation ("back up", "after the upgrade", "on call").
QUERY_SKIP = frozenset("""how what when where which who why are be been can could did do does had has
have was were will would the a and of to in for is""".split())
_SUFFIXES = ("ings", "ing", "ions", "ion", "edly", "ed", "es", "s", "e")


def _camel_parts(token: str) -> int:
    """How many camel-case parts an alphanumeric token has (ErrorsInExternalDNS: 4), else 0."""
    if not token.isalnum() or token.islower() or token.isupper():
        return 0
    return len(_CAMEL_PART.findall(token))


def is_identifier(token: str) -> bool:
    """A token someone would only type to find that exact thing."""
    if _UUID.match(token) or _CAMEL.match(token) or _camel_parts(token) >= 3:
        return True
    if token.isdigit():
        return len(token) >= 4              # account ids, ticket numbers, ports are not
    has_digit_and_alpha = any(c.isdigit() for c in token) and any(c.isalpha() for c in token)
    return has_digit_and_alpha or any(c in "-._" for c in token.strip("-._"))


def key(token: str) -> str:
    """An identifier however it is typed: lower case, nothing joining its parts (maxSurge, MAX_SURGE
    and max-surge are all maxsurge)."""
    return _JOINERS.sub("", token.lower())


def token(term: str, whole: bool) -> str:
    """How the index holds an identifier term (db idents_fts, one token each): `key~term` where it
    is met as a whole token, so its spellings are found by key; else (a host name's dotted prefix)
    the bare term."""
    return f"{key(term)}~{term}" if whole else term


def held(term: str) -> str | None:
    """The FTS5 query for the chunks holding `term`, whole or as a prefix; None for a term no
    chunk can hold (what _TOKEN cannot cut, lower-cased)."""
    return f'"{token(term, True)}" OR "{term}"' if _HELD.fullmatch(term) else None


def identifiers(text: str, whole: set | None = None) -> dict:
    """Identifier terms in `text` (lower-cased) with their counts, plus each dotted prefix
    (jump01.example.com also yields jump01 and jump01.example) so partial hostnames match; `whole`
    collects the terms met as whole tokens. A word in camel case (maxSurge, TargetDown) counts
    here too, so it is found however it is typed."""
    counts: dict = {}
    for token in _TOKEN.findall(text):
        if len(token) < 3 or token.isalpha() and (token.islower() or token.isupper() or token[1:].islower()):
            continue            # a plain word (most of any text): none of the rules below can take it
        if not (is_identifier(token) or _camel_parts(token) >= 2):
            continue
        token = token.lower()
        counts[token] = counts.get(token, 0) + 1
        if whole is not None:
            whole.add(token)
        parts = token.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if len(prefix) >= 3 and prefix != token:
                counts[prefix] = counts.get(prefix, 0) + 1
    return counts


def query_tokens(query: str) -> list:
    """The query split at white space, each stripped of surrounding punctuation and quotes."""
    return [t for t in (raw.strip("\"'`()[]{}<>,;!?*:“”‘’") for raw in query.split()) if t]


def is_identifier_query(tokens: list) -> bool:
    """auto mode: queries made only of identifiers skip the vector path."""
    if len(tokens) == 1 and _camel_parts(tokens[0]) >= 2 and not tokens[0][0].islower():
        return True        # a pasted name: EmergencyQuarantine, not a word typed in a sentence
    return bool(tokens) and len(tokens) <= 4 and all(is_identifier(t) for t in tokens)


def words(text: str) -> list:
    """Tokens the way SQLite's unicode61 tokenizer cuts them (underscore is a separator)."""
    return [w.lower() for w in _WORD.findall(text)]


def phrases(tokens: list) -> list:
    """Each token's words as one FTS5 phrase, QUERY_SKIP's words dropped (unless nothing else is left), once each."""
    found = [" ".join(ws) for ws in (words(t) for t in tokens) if ws]
    return list(dict.fromkeys([p for p in found if p not in QUERY_SKIP] or found))


def fts_phrases(query: str) -> list:
    """Each of the query's phrases as a safe FTS5 query of its own: no FTS syntax can reach SQLite."""
    return [f'"{p}"' for p in phrases(query_tokens(query))]


def fts_query(query: str) -> str:
    """A safe FTS5 query: the OR of the query's phrases."""
    return " OR ".join(fts_phrases(query))


def stem(word: str) -> str:
    """A light suffix stripper for highlighting what the porter-stemmed index matched
    (fix/fixed/fixing, certificate/certificates, rotate/rotation share a stem)."""
    word = word.lower()
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not (suffix == "s" and word.endswith("ss")):
            word = word[:-len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]                 # running → runn → run, stopped → stop
    return word
