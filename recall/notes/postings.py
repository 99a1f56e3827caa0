"""The common words' postings: each common term's chunks grouped by weighted frequency, as bitmaps,
built and kept in step with chunks_fts at the end of an index run (common_terms.py reads them)."""
from __future__ import annotations

from array import array

from .common_terms import WEIGHTS, bit_count, load_lengths, set_bits, state_key, tokenizer_clause, totals, unpack, varints

COMMON_MIN = 3000           # chunks holding a term before it gets postings here (FTS5 is quick below)
REBUILD_AFTER = 2000        # chunks changed in one index run after which the postings are rebuilt
SPARSE = 1024               # a group of at most this many chunks keeps their ids too: filtered, not scanned


def _bitmap(ids) -> int:
    out = bytearray((max(ids) >> 3) + 1 if ids else 0)
    for i in ids:
        out[i >> 3] |= 1 << (i & 7)
    return int.from_bytes(out, "little")


def _pack(bits: int) -> bytes:
    """A bitmap as stored: its bytes as they are (decompressing costs more than reading them)."""
    return bits.to_bytes((bits.bit_length() + 7) >> 3, "little")


def _columns(con) -> list:
    return [r[1] for r in con.execute("PRAGMA table_info(chunks_fts)")]


def weighted(counts, weights) -> float:
    """A row's frequency of one phrase as bm25() sums it: each hit adds its column's weight,
    in column order (the order FTS5 visits the hits)."""
    f = 0.0
    for n, w in zip(counts, weights):
        for _ in range(n):
            f += w
    return f


def refresh(con, weights=WEIGHTS) -> str:
    """Bring the postings up to date with chunks_fts: apply the chunks changed since (listed by trigger)
    or rebuild them all (the first time, after REBUILD_AFTER changes, for other weights); say which.
    A concurrent writer makes it give up: the search then asks FTS5, as while a change is pending."""
    common_min, rebuild_after = COMMON_MIN, REBUILD_AFTER      # read now: tests lower them
    weights = [float(w) for w in weights]
    key = state_key(weights)
    try:
        con.execute("BEGIN")                     # one snapshot for every read; the writes upgrade it
        state = con.execute("SELECT weights FROM common_state WHERE id=1").fetchone()
        dirty = [r[0] for r in con.execute("SELECT chunk_id FROM common_dirty")]
        if state is None or state[0] != key or len(dirty) >= rebuild_after:
            done = _rebuild(con, weights, key, common_min)
        elif dirty:
            done = _apply(con, weights, dirty)
        else:
            done = "up to date"
        con.execute("COMMIT")
        return done
    except Exception as exc:
        from ..db import is_sqlite_error, rollback
        rollback(con)
        if is_sqlite_error(exc) and ("locked" in str(exc) or "busy" in str(exc)):
            return "skipped: another writer"
        raise


def _store_lengths(lengths) -> bytes:
    """The lengths array in the narrowest type that holds them, its type code first."""
    top = max(lengths) if len(lengths) else 0
    code = "B" if top < 1 << 8 else "H" if top < 1 << 16 else "I"
    return code.encode() + array(code, lengths).tobytes()


def _lengths(con, ids=None, into=None):
    """Each chunk's total tokens (what bm25() calls D), from FTS5's docsize rows."""
    out = into if into is not None else array("I")
    if ids is None:
        rows = con.execute("SELECT id, sz FROM chunks_fts_docsize")
    else:
        from ..db import in_batches
        rows = [r for part, marks in in_batches(ids)
                for r in con.execute(f"SELECT id, sz FROM chunks_fts_docsize WHERE id IN ({marks})", part)]
    for rid, sz in rows:
        if rid >= len(out):
            out.extend([0] * (rid + 1 - len(out)))
        out[rid] = sum(varints(bytes(sz)))
    return out


def _rebuild(con, weights, key, common_min) -> str:
    con.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.recall_vocab_row USING fts5vocab(main, chunks_fts, row)")
    con.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.recall_vocab_inst "
                "USING fts5vocab(main, chunks_fts, instance)")
    names = _columns(con)
    common = [t for (t,) in con.execute("SELECT term FROM temp.recall_vocab_row WHERE doc >= ?", (common_min,))]
    lengths = _lengths(con)
    rows, _ = totals(con)
    con.execute("DELETE FROM common_postings")
    # each term's chunks grouped by their hits per column, in SQL (a few rows a term, not one a chunk)
    per_col = ", ".join(f"sum(col = ?) AS c{i}" for i in range(len(names)))
    cs = ", ".join(f"c{i}" for i in range(len(names)))
    sql = (f"SELECT {cs}, group_concat(doc) FROM (SELECT doc, {per_col} FROM temp.recall_vocab_inst "
           f"WHERE term = ? GROUP BY doc) GROUP BY {cs}")
    for term in common:
        groups: dict = {}
        for row in con.execute(sql, (*names, term)):
            _add(groups, weighted(row[:-1], weights), [int(x) for x in row[-1].split(",")], lengths)
        _write(con, _term_rows(term, {f: [_bitmap(ids), dmin] for f, (ids, dmin) in groups.items()}))
    con.execute("DELETE FROM common_dirty")
    con.execute("INSERT OR REPLACE INTO common_state(id, rows, weights, lengths) VALUES (1, ?, ?, ?)",
                (rows, key, _store_lengths(lengths)))
    return f"rebuilt: {len(common)} common terms"


def _add(groups: dict, f: float, ids: list, lengths) -> None:
    """Chunks `ids` into a term's group of frequency f: {f: [ids, their least length]}."""
    low = min(map(lengths.__getitem__, ids))
    g = groups.setdefault(f, [[], low])
    g[0].extend(ids)
    g[1] = min(g[1], low)


def _write(con, rows) -> None:
    con.executemany("INSERT INTO common_postings(term, f, n, dmin, bits, ids) VALUES (?,?,?,?,?,?)", rows)


def _term_rows(term: str, groups: dict, only=None) -> list:
    """A term's rows: one per frequency group ({f: [bitmap, dmin]}; `only` those f), and f = 0
    for their union."""
    rows, union, dmin_all = [], 0, None
    for f, (bits, dmin) in groups.items():
        if bits:
            if only is None or f in only:
                n = bit_count(bits)
                ids = array("I", set_bits(bits)).tobytes() if n <= SPARSE else None
                rows.append((term, f, n, dmin, _pack(bits), ids))
            union |= bits
            dmin_all = dmin if dmin_all is None else min(dmin_all, dmin)
    if union:
        rows.append((term, 0.0, bit_count(union), dmin_all, _pack(union), None))
    return rows


def _apply(con, weights, dirty: list) -> str:
    """The changed chunks out of every term's bitmaps, then their current text back in (tokenized
    by a temporary FTS5 table with the same tokenizer, so the terms are the index's own)."""
    terms: dict = {}               # {term: {f: [bitmap, dmin, changed]}}
    for term, f, dmin, bits in con.execute("SELECT term, f, dmin, bits FROM common_postings WHERE f > 0"):
        terms.setdefault(term, {})[f] = [unpack(bits), dmin, False]
    mask = _bitmap(dirty)
    for groups in terms.values():
        for g in groups.values():
            if g[0] & mask:
                g[0] &= ~mask
                g[2] = True
    state = con.execute("SELECT lengths FROM common_state WHERE id=1").fetchone()
    lengths = array("I", load_lengths(state[0]))
    for cid in dirty:
        if cid < len(lengths):
            lengths[cid] = 0
    names = _columns(con)
    con.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.recall_tok USING fts5({', '.join(names)}{tokenizer_clause(con)})")
    con.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.recall_tok_inst USING fts5vocab(temp, recall_tok, instance)")
    con.execute("DELETE FROM temp.recall_tok")
    from ..db import in_batches
    for part, marks in in_batches(dirty):
        con.execute(f"INSERT INTO temp.recall_tok(rowid, {', '.join(names)}) "
                    f"SELECT id, {', '.join(names)} FROM chunks WHERE id IN ({marks})", part)
    present = [r[0] for r in con.execute("SELECT rowid FROM temp.recall_tok")]
    _lengths(con, present, lengths)
    cols = {name: i for i, name in enumerate(names)}
    counts: dict = {}
    for term, doc, col in con.execute("SELECT term, doc, col FROM temp.recall_tok_inst"):
        if term in terms:
            c = counts.setdefault(term, {}).setdefault(doc, [0] * len(cols))
            c[cols[col]] += 1
    con.execute("DELETE FROM temp.recall_tok")
    for term, docs in counts.items():
        groups, fresh = terms[term], {}
        for doc, c in docs.items():
            _add(fresh, weighted(c, weights), [doc], lengths)
        for f, (ids, dmin) in fresh.items():
            g = groups.setdefault(f, [0, dmin, True])
            g[0] |= _bitmap(ids)
            g[1] = min(g[1], dmin)       # a removed chunk's length may stay: still a lower bound
            g[2] = True
    for term, groups in terms.items():   # only the terms a changed chunk held are written again
        if any(g[2] for g in groups.values()):
            con.execute("DELETE FROM common_postings WHERE term=? AND f=0", (term,))
            con.executemany("DELETE FROM common_postings WHERE term=? AND f=?",
                            [(term, f) for f, g in groups.items() if g[2]])
            rows = _term_rows(term, {f: g[:2] for f, g in groups.items()}, {f for f, g in groups.items() if g[2]})
            _write(con, rows)
    rows, _ = totals(con)
    con.execute("UPDATE common_state SET rows=?, lengths=? WHERE id=1", (rows, _store_lengths(lengths)))
    con.execute("DELETE FROM common_dirty")
    return f"updated: {len(dirty)} chunks"

