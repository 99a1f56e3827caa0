"""One way to name things: an id or an alias, in any case; an unknown name gets the closest ones."""
from __future__ import annotations

from .errors import NotFound


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
