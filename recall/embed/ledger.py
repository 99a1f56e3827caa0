"""The token-cap ledger: every paid request reserved before it is sent, settled with its vectors."""
from __future__ import annotations

import os
import time

from ..db import transaction
from ..db.pids import alive
from ..errors import RecallError

STALE_RESERVATION_S = 3600.0
RUN_ID = os.urandom(6).hex()      # this process's reservations


def estimate_tokens(text: str) -> int:
    """A deliberately high guess (≈3 characters a token) so the cap is checked conservatively."""
    return len(text) // 3 + 1


def ledger_totals(con) -> tuple:
    """(billed tokens, tokens held by reservations and requests of unknown outcome)."""
    row = con.execute("SELECT COALESCE(SUM(CASE WHEN state='billed' THEN tokens END), 0), "
                      "COALESCE(SUM(CASE WHEN state!='billed' THEN estimate END), 0) FROM embed_ledger").fetchone()
    return int(row[0]), int(row[1])


def _expire(con) -> None:
    """Reservations of processes that died (kill -9) become 'unconfirmed': maybe billed, still counted."""
    now = time.time()
    for lid, pid, run, at in con.execute("SELECT id, pid, run, at FROM embed_ledger WHERE state='reserved'").fetchall():
        if run != RUN_ID and (not alive(pid) or now - at > STALE_RESERVATION_S):
            con.execute("UPDATE embed_ledger SET state='unconfirmed' WHERE id=?", (lid,))
            con.execute("DELETE FROM embed_claims WHERE ledger_id=?", (lid,))


def reserve(con, cfg, provider, kind: str, estimate: int, items: int, claims=None, model=None):
    """In one BEGIN IMMEDIATE: check billed + held + estimate ≤ cap, record the reservation, claim the texts
    not stored or claimed yet. (ledger id, the claimed hashes), or (None, []) when none is left to claim."""
    cap = cfg.embedding.token_cap
    with transaction(con):
        _expire(con)
        billed, held = ledger_totals(con)
        if billed + held + estimate > cap:
            where = f" in {cfg.path}" if cfg.path else ""
            held_text = f" (+{held:,} held by unfinished requests)" if held else ""
            raise RecallError(f"the embedding token cap stops this request: {billed:,} tokens billed{held_text}, "
                              f"this request needs about {estimate:,}, the cap is {cap:,}",
                              f"raise embedding.token_cap{where} to spend more; nothing more was sent")
        lid = con.execute("INSERT INTO embed_ledger(at, provider, model, kind, state, estimate, items, pid, run) "
                          "VALUES (?,?,?,?, 'reserved', ?,?,?,?)",
                          (time.time(), provider.name, model or provider.model, kind, estimate, items, os.getpid(),
                           RUN_ID)).lastrowid
        taken = []
        if claims is not None:
            mid, hashes = claims
            for h in hashes:
                if con.execute("SELECT 1 FROM embeddings WHERE model_id=? AND hash=?", (mid, h)).fetchone():
                    continue          # another run stored it meanwhile
                if con.execute("INSERT OR IGNORE INTO embed_claims VALUES (?,?,?)", (mid, h, lid)).rowcount:
                    taken.append(h)
            if not taken:
                con.execute("DELETE FROM embed_ledger WHERE id=?", (lid,))
                return None, []
    return lid, taken


def settle(con, lid, tokens: int) -> None:
    """After a paid answer, in the caller's transaction: the reservation becomes billed tokens."""
    con.execute("UPDATE embed_ledger SET state='billed', tokens=?, at=? WHERE id=?", (int(tokens), time.time(), lid))
    con.execute("DELETE FROM embed_claims WHERE ledger_id=?", (lid,))


def release(con, lid, billed=None, uncertain=False) -> None:
    """A failed paid request: `billed` tokens if the answer said so, held if it may have been (`uncertain`),
    else dropped."""
    with transaction(con):
        if billed is not None:
            settle(con, lid, billed)
        elif uncertain:
            con.execute("UPDATE embed_ledger SET state='unconfirmed' WHERE id=?", (lid,))
        else:
            con.execute("DELETE FROM embed_ledger WHERE id=?", (lid,))
        con.execute("DELETE FROM embed_claims WHERE ledger_id=?", (lid,))


def ledgered(con, cfg, provider, kind: str, estimate: int, items: int, call, *, claims=None, model=None,
             store=None):
    """The one ledger step of every paid request: reserve (paid providers only; `claims`: (model id, hashes)),
    `call(claimed)` -> (answer, billed tokens), then `store(result, claimed)` and the settlement in one
    transaction; a failure releases it. (result, claimed), or (None, []) when another run holds every text."""
    lid, claimed = None, (claims[1] if claims is not None else None)
    if provider.paid:
        lid, claimed = reserve(con, cfg, provider, kind, estimate, items, claims=claims, model=model)
        if lid is None:
            return None, []            # another run embedded or claimed all of it
    try:
        result = call(claimed)
    except BaseException as exc:
        if lid is not None:
            ours = isinstance(exc, RecallError)        # else interrupted: it may have been billed
            release(con, lid, getattr(exc, "billed", None) if ours else None,
                    getattr(exc, "uncertain", False) if ours else True)
        raise
    if lid is None and store is None:
        return result, claimed
    with transaction(con):
        if store is not None:
            store(result, claimed)
        if lid is not None:
            settle(con, lid, result[1])
    return result, claimed


def paid_call(con, cfg, provider, kind: str, texts: list, call, model=None):
    """Reserve, call, settle — for the one-off paid requests of a search (query, rerank)."""
    return ledgered(con, cfg, provider, kind, sum(estimate_tokens(t) for t in texts), len(texts),
                    lambda _claimed: call(), model=model)[0]
