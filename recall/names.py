"""One way to name things: an id or an alias, in any case; an unknown name gets the closest ones."""
from __future__ import annotations

from .errors import NotFound


def resolve(name: str, names: dict, what: str, hint: str) -> str:
    """The id that `name` names. `names` maps every id and alias to its id; ids win over aliases,
    an exact spelling over another case."""
    key = (name or "").strip()
    if key in names:
        return names[key]
    folded: dict = {}
    for n, i in names.items():
        folded.setdefault(n.lower(), i)
    if key.lower() in folded:
        return folded[key.lower()]
    close = closest(key, names)
    raise NotFound(f"no {what} '{key}'", f"did you mean: {', '.join(close)}?" if close else hint)


def closest(name: str, names: dict, n: int = 4) -> list:
    """The names nearest to `name` (typos, a part of the id), each said as 'alias (id)' for an alias."""
    import difflib
    q = name.lower()
    scored = []
    for cand, target in names.items():
        c = cand.lower()
        ratio = difflib.SequenceMatcher(None, q, c).ratio()
        if len(q) >= 3 and (q in c or c in q):
            ratio = max(ratio, 0.75)
        if ratio >= 0.6:
            scored.append((-ratio, cand, target))
    out, seen = [], set()
    for _, cand, target in sorted(scored):
        if target in seen:
            continue
        seen.add(target)
        out.append(cand if cand == target else f"{cand} ({target})")
    return out[:n]
