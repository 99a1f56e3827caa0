"""The DB in proportion to the notes: FTS5's segments merged once they have grown, free pages
given back, the WAL cut — after every index run."""
from __future__ import annotations

from . import get_meta, is_sqlite_error, set_meta, transaction, waiting_at_most

FTS_GROWTH = 1.25       # FTS5 rows past this many times those after the last merge (or chunks
                        # fewer by as much): merge again
FREE_SHARE = 0.25       # free pages past this share of the file: VACUUM gives them back
TIDY_WAIT_MS = 250      # how long a tidying step waits for a reader's snapshot before it skips
FTS = ("chunks_fts", "idents_fts")      # the words' index and the identifiers' one


def _fts_rows(con) -> int:
    return sum(con.execute(f"SELECT count(*) FROM {fts}_data").fetchone()[0] for fts in FTS)


def optimize(con) -> None:
    """Both FTS5 indexes merged into one segment each: a deleted row's terms gone from the file."""
    for fts in FTS:
        con.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")


def reclaim(con) -> dict:
    """What an index run leaves behind, tidied. FTS5 keeps a deleted row's postings until its
    segment is merged (20 rounds of edits doubled its size), so once its rows have grown by a
    quarter since the last merge, or a fifth of the chunks are gone (the postings of those
    deleted wait in place), its segments are merged into one and VACUUM rewrites the file
    compact (a cost that follows the growth, not each run); so it does when a quarter of the
    pages are free (a big deletion, a migration). The WAL is cut to nothing. A busy or full
    DB skips a step, which the next run does: tidying waits a moment for a reader, never the
    whole busy timeout a write waits. {step: done}."""
    done = {"merged": False, "vacuumed": False}
    with waiting_at_most(con, TIDY_WAIT_MS):
        try:
            chunks = con.execute("SELECT count(*) FROM chunk_rows").fetchone()[0]
            if _fts_rows(con) > FTS_GROWTH * int(get_meta(con, "fts_rows_merged", 0)) + 16 or \
                    chunks * FTS_GROWTH < int(get_meta(con, "chunks_merged", 0)):
                with transaction(con):
                    optimize(con)
                    set_meta(con, "fts_rows_merged", _fts_rows(con))
                    set_meta(con, "chunks_merged", chunks)
                done["merged"] = True
            pages = con.execute("PRAGMA page_count").fetchone()[0]
            if done["merged"] or con.execute("PRAGMA freelist_count").fetchone()[0] > FREE_SHARE * pages:
                con.execute("VACUUM")
                done["vacuumed"] = True
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except Exception as exc:     # locked by a reader's snapshot, or no room to rewrite: not now
            if not is_sqlite_error(exc):
                raise
    return done
