"""The schema as numbered migrations, applied in order by db.migrate and recorded in `migrations`:
an SQL script, or a function of the connection for what SQL cannot do."""
from __future__ import annotations

import struct

from .texts import pack


def int8_vectors(con) -> None:
    """Chunk vectors from float32 to int8 (a quarter of the bytes; the ranking holds), a few
    thousand rows at a time. The vec0 tables go with the next index run that loads sqlite-vec
    (nothing else can drop them); their generation keys, and an index no query uses, go now."""
    con.execute("DROP INDEX embeddings_hash")      # every lookup names the model too; first, so
    last = 0                                        # a DB already converted fails here, unchanged
    while True:
        rows = con.execute("SELECT id, vector FROM embeddings WHERE id > ? ORDER BY id LIMIT 4096",
                           (last,)).fetchall()
        if not rows:
            break
        con.executemany("UPDATE embeddings SET vector=? WHERE id=?", ((_int8(v), i) for i, v in rows))
        last = rows[-1][0]
    con.execute("DELETE FROM meta WHERE key LIKE 'vec0_gen:%'")


def _int8(blob: bytes) -> bytes:
    """vectors.quantize as it was when this migration landed (a migration never changes)."""
    vec = struct.unpack(f"<{len(blob) // 4}f", blob)
    top = max(map(abs, vec)) or 1.0
    return bytes(round(x * 127 / top) & 0xFF for x in vec)


def packed_chunks(con) -> None:
    """A chunk's texts deflated into one blob (db.texts) in `chunk_rows`, read through a `chunks`
    view; its identifiers as FTS5 tokens (idents_fts) in place of idents and ident_chunks: the
    index in under twice the notes' bytes (issue 36.4). The keyword index is kept as it is."""
    con.execute("DROP TRIGGER ident_chunks_ad")    # first, so a DB already converted fails here, unchanged
    held: dict = {}
    for cid, term, key, whole in con.execute("SELECT h.chunk_id, i.term, i.key, h.whole FROM ident_chunks h "
                                             "JOIN idents i ON i.id = h.ident_id ORDER BY h.chunk_id, i.term"):
        held.setdefault(cid, []).append(f"{key}~{term}" if whole else term)
    for name in ("TRIGGER chunks_ai", "TRIGGER chunks_ad", "TABLE ident_chunks", "TABLE idents"):
        con.execute(f"DROP {name}")
    con.execute("CREATE TABLE chunk_rows(id INTEGER PRIMARY KEY, file_id INTEGER NOT NULL REFERENCES files(id) "
                "ON DELETE CASCADE, ord INTEGER NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, "
                "hash TEXT NOT NULL, texts BLOB NOT NULL)")
    rows = con.execute("SELECT id, file_id, ord, start_line, end_line, hash, breadcrumb, body, path FROM chunks")
    con.executemany("INSERT INTO chunk_rows VALUES (?,?,?,?,?,?,?)",
                    ((*r[:6], pack(r[6], r[7], r[8], " ".join(held.get(r[0], ())))) for r in rows))
    for statement in PACKED_CHUNKS:
        con.execute(statement)


PACKED_CHUNKS = [
    "DROP TABLE chunks",
    "CREATE INDEX chunks_file ON chunk_rows(file_id)",
    "CREATE INDEX chunks_hash ON chunk_rows(hash)",
    # chunks_fts keeps reading its content from `chunks`, now this view
    "CREATE VIEW chunks AS SELECT id, file_id, ord, start_line, end_line, hash, chunk_text(texts, 0) AS breadcrumb, "
    "chunk_text(texts, 1) AS body, chunk_text(texts, 2) AS path, chunk_text(texts, 3) AS idents FROM chunk_rows",
    # identifiers exactly as written (lower-cased), one token each: `key~term` where the term is met as
    # a whole token (terms.key: maxSurge, MAX_SURGE and max-surge share the key maxsurge), the bare
    # term where it is only a host name's dotted prefix (jump01 of jump01.example.com)
    "CREATE VIRTUAL TABLE idents_fts USING fts5(idents, content='chunks', content_rowid='id', detail=none, "
    "columnsize=0, tokenize=\"unicode61 remove_diacritics 0 tokenchars '-._~'\")",
    "INSERT INTO idents_fts(idents_fts) VALUES ('rebuild')",
    "CREATE VIRTUAL TABLE idents_vocab USING fts5vocab(idents_fts, row)",
    """CREATE TRIGGER chunks_ai AFTER INSERT ON chunk_rows BEGIN
        INSERT INTO chunks_fts(rowid, breadcrumb, body, path)
        VALUES (new.id, chunk_text(new.texts, 0), chunk_text(new.texts, 1), chunk_text(new.texts, 2));
        INSERT INTO idents_fts(rowid, idents) VALUES (new.id, chunk_text(new.texts, 3));
    END""",
    """CREATE TRIGGER chunks_ad AFTER DELETE ON chunk_rows BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, breadcrumb, body, path)
        VALUES ('delete', old.id, chunk_text(old.texts, 0), chunk_text(old.texts, 1), chunk_text(old.texts, 2));
        INSERT INTO idents_fts(idents_fts, rowid, idents) VALUES ('delete', old.id, chunk_text(old.texts, 3));
    END""",
    # the old rows' pages are free now: the next index run merges FTS5 and VACUUMs (db.space)
    "DELETE FROM meta WHERE key = 'fts_rows_merged'",
]


MIGRATIONS: list = [          # never edit a landed one
    """
    CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
    CREATE TABLE files(
        id INTEGER PRIMARY KEY,
        source TEXT NOT NULL,
        relpath TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        hash TEXT NOT NULL,
        date TEXT,
        title TEXT,
        UNIQUE(source, relpath)
    );
    CREATE TABLE chunks(
        id INTEGER PRIMARY KEY,
        file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
        ord INTEGER NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        breadcrumb TEXT NOT NULL,
        body TEXT NOT NULL,
        hash TEXT NOT NULL
    );
    CREATE INDEX chunks_file ON chunks(file_id);
    CREATE INDEX chunks_hash ON chunks(hash);
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        breadcrumb, body, content='chunks', content_rowid='id',
        tokenize="unicode61 remove_diacritics 2");
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, breadcrumb, body) VALUES (new.id, new.breadcrumb, new.body);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, breadcrumb, body)
        VALUES ('delete', old.id, old.breadcrumb, old.body);
        DELETE FROM idents WHERE chunk_id = old.id;
    END;
    -- identifiers exactly as written (lower-cased), so INC-10963 is one term, not two
    CREATE TABLE idents(term TEXT NOT NULL, chunk_id INTEGER NOT NULL, hits INTEGER NOT NULL,
                        PRIMARY KEY(term, chunk_id)) WITHOUT ROWID;
    CREATE INDEX idents_chunk ON idents(chunk_id);
    """,
    """
    CREATE TABLE secrets(
        id TEXT PRIMARY KEY,
        meta TEXT NOT NULL,            -- JSON: service, environment, kind, username, url, notes, use
        tags TEXT NOT NULL,            -- JSON list
        env TEXT NOT NULL,
        inject TEXT NOT NULL,
        check_cmd TEXT NOT NULL,
        variables TEXT NOT NULL,       -- JSON: variable name -> field ("" for a single value)
        file TEXT NOT NULL,
        line INTEGER NOT NULL,
        nonce BLOB NOT NULL,
        ciphertext BLOB NOT NULL,      -- AES-256-GCM of the JSON values, the id as associated data
        synced_at REAL NOT NULL
    );
    CREATE VIRTUAL TABLE secrets_fts USING fts5(
        sid UNINDEXED, id, service, environment, kind, username, url, tags, notes, use,
        tokenize="unicode61 remove_diacritics 2");
    CREATE TABLE access_log(
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        caller TEXT NOT NULL,          -- cli | mcp
        parent TEXT NOT NULL,          -- the parent process name
        verb TEXT NOT NULL,
        target TEXT NOT NULL,          -- secret or inventory id
        argv TEXT NOT NULL,            -- masked
        verdict TEXT NOT NULL,
        exit_code INTEGER
    );
    CREATE TABLE verify_results(
        target TEXT PRIMARY KEY,       -- 'secret:ID' or 'entry:ID'
        status TEXT NOT NULL,          -- ok | stale | unreachable | missing | skipped | error
        reason TEXT NOT NULL,
        command TEXT NOT NULL,
        at REAL NOT NULL
    );
    """,
    """
    -- one row per embedding fingerprint: what a vector means (provider, model, dimension, input type)
    CREATE TABLE embed_models(
        id INTEGER PRIMARY KEY,
        fingerprint TEXT NOT NULL UNIQUE,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        dimension INTEGER NOT NULL,
        input_type TEXT NOT NULL
    );
    -- vectors keyed by the chunk text's hash (chunks.hash), so a renamed file keeps its vectors
    CREATE TABLE embeddings(
        id INTEGER PRIMARY KEY,
        model_id INTEGER NOT NULL REFERENCES embed_models(id),
        hash TEXT NOT NULL,
        dim INTEGER NOT NULL,
        vector BLOB NOT NULL,          -- float32 little-endian, unit length
        UNIQUE(model_id, hash)
    );
    CREATE INDEX embeddings_hash ON embeddings(hash);
    -- the token cap: every paid request is reserved here before it is sent
    CREATE TABLE embed_ledger(
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        kind TEXT NOT NULL,            -- document | query | rerank
        state TEXT NOT NULL,           -- reserved | billed | unconfirmed
        estimate INTEGER NOT NULL,
        tokens INTEGER NOT NULL DEFAULT 0,
        items INTEGER NOT NULL,
        pid INTEGER NOT NULL,
        run TEXT NOT NULL
    );
    CREATE INDEX embed_ledger_state ON embed_ledger(state);
    -- texts a running index has sent and not yet stored, so a second run does not send them too
    CREATE TABLE embed_claims(
        model_id INTEGER NOT NULL,
        hash TEXT NOT NULL,
        ledger_id INTEGER NOT NULL,
        PRIMARY KEY(model_id, hash)
    ) WITHOUT ROWID;
    CREATE INDEX embed_claims_ledger ON embed_claims(ledger_id);
    CREATE TABLE query_vectors(
        model_id INTEGER NOT NULL,
        query TEXT NOT NULL,
        vector BLOB NOT NULL,
        used_at REAL NOT NULL,
        PRIMARY KEY(model_id, query)
    ) WITHOUT ROWID;
    """,
    """
    -- secrets' metadata (never a value) embedded, so 'find' understands paraphrases
    CREATE TABLE secret_vectors(
        model_id INTEGER NOT NULL REFERENCES embed_models(id),
        hash TEXT NOT NULL,            -- of the metadata text
        vector BLOB NOT NULL,
        PRIMARY KEY(model_id, hash)
    ) WITHOUT ROWID;
    """,
    """
    -- the bytes of a file name that is not UTF-8 (relpath then shows them as U+FFFD), else NULL
    ALTER TABLE files ADD COLUMN rawpath BLOB;
    """,
    """
    -- words match their forms (fix/fixed, certificate/certificates): the porter stemmer over
    -- unicode61; identifiers stay exact in idents. The triggers name the table, so they carry on.
    DROP TABLE chunks_fts;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        breadcrumb, body, content='chunks', content_rowid='id',
        tokenize="porter unicode61 remove_diacritics 2");
    INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
    """,
    """
    -- the file's path is searched too (runbooks/restore-etcd.md says what the note is about),
    -- as a third FTS column kept on the chunk, so a delete can hand FTS5 the same values
    ALTER TABLE chunks ADD COLUMN path TEXT NOT NULL DEFAULT '';
    UPDATE chunks SET path = (SELECT relpath FROM files WHERE files.id = chunks.file_id);
    DROP TRIGGER chunks_ai;
    DROP TRIGGER chunks_ad;
    DROP TABLE chunks_fts;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        breadcrumb, body, path, content='chunks', content_rowid='id',
        tokenize="porter unicode61 remove_diacritics 2");
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, breadcrumb, body, path) VALUES (new.id, new.breadcrumb, new.body, new.path);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, breadcrumb, body, path)
        VALUES ('delete', old.id, old.breadcrumb, old.body, old.path);
        DELETE FROM idents WHERE chunk_id = old.id;
    END;
    INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
    """,
    """
    -- the common words' chunks by weighted frequency, as bitmaps (common_terms.py): built at the
    -- end of an index run; a chunk written or deleted since is listed in common_dirty by trigger,
    -- and while any is listed the search asks FTS5 instead
    CREATE TABLE common_postings(
        term TEXT NOT NULL, f REAL NOT NULL, n INTEGER NOT NULL, dmin INTEGER NOT NULL,
        bits BLOB NOT NULL, ids BLOB,           -- ids: the chunk ids as well, for a group of few
        PRIMARY KEY(term, f)) WITHOUT ROWID;
    CREATE TABLE common_state(id INTEGER PRIMARY KEY CHECK (id = 1), rows INTEGER NOT NULL,
                              weights TEXT NOT NULL, lengths BLOB NOT NULL);
    CREATE TABLE common_dirty(chunk_id INTEGER PRIMARY KEY);
    CREATE TRIGGER chunks_common_ai AFTER INSERT ON chunks BEGIN
        INSERT OR IGNORE INTO common_dirty(chunk_id) VALUES (new.id);
    END;
    CREATE TRIGGER chunks_common_ad AFTER DELETE ON chunks BEGIN
        INSERT OR IGNORE INTO common_dirty(chunk_id) VALUES (old.id);
    END;
    """,
    """
    -- what a verify result was for (inventory.config_of: the entry's steps, proof, requires …), so
    -- a result from before the entry changed is shown as history; '' when not known
    ALTER TABLE verify_results ADD COLUMN config TEXT NOT NULL DEFAULT '';
    """,
    int8_vectors,
    """
    -- the common words' postings go: plain FTS5 answers every query (issue 34.4)
    DROP TRIGGER IF EXISTS chunks_common_ai;
    DROP TRIGGER IF EXISTS chunks_common_ad;
    DROP TABLE IF EXISTS common_postings;
    DROP TABLE IF EXISTS common_state;
    DROP TABLE IF EXISTS common_dirty;
    """,
    """
    -- a file's own vector (its title and opening text) is stored under this key (notes/index.py)
    ALTER TABLE files ADD COLUMN head_hash TEXT;
    CREATE INDEX files_head ON files(head_hash);
    -- an identifier however it is typed (terms.key: maxSurge, MAX_SURGE, max-surge → maxsurge)
    ALTER TABLE idents ADD COLUMN key TEXT;
    CREATE INDEX idents_key ON idents(key);
    """,
    """
    -- each identifier once (idents) and the chunks holding it (ident_chunks), in place of a row per
    -- identifier and chunk with both texts, indexed twice, and a count nothing read (issue 36.4).
    -- idents.key: set once the term is met as a whole token; ident_chunks.whole says where it is
    -- one (else a host name's dotted prefix). An identifier goes with the last chunk holding it.
    -- First, so a DB already converted fails here, unchanged:
    DROP INDEX idents_chunk;
    DROP INDEX idents_key;
    DROP TRIGGER chunks_ad;
    ALTER TABLE idents RENAME TO ident_rows;
    CREATE TABLE idents(id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE, key TEXT);
    INSERT INTO idents(term, key) SELECT term, max(key) FROM ident_rows GROUP BY term ORDER BY term;
    CREATE TABLE ident_chunks(ident_id INTEGER NOT NULL, chunk_id INTEGER NOT NULL, whole INTEGER NOT NULL,
                              PRIMARY KEY(ident_id, chunk_id)) WITHOUT ROWID;
    INSERT INTO ident_chunks(ident_id, chunk_id, whole)
        SELECT i.id, r.chunk_id, r.key IS NOT NULL FROM ident_rows r JOIN idents i ON i.term = r.term
        ORDER BY i.id, r.chunk_id;
    DROP TABLE ident_rows;
    CREATE INDEX idents_key ON idents(key) WHERE key IS NOT NULL;
    CREATE INDEX ident_chunks_chunk ON ident_chunks(chunk_id);
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, breadcrumb, body, path)
        VALUES ('delete', old.id, old.breadcrumb, old.body, old.path);
        DELETE FROM ident_chunks WHERE chunk_id = old.id;
    END;
    CREATE TRIGGER ident_chunks_ad AFTER DELETE ON ident_chunks
    WHEN NOT EXISTS (SELECT 1 FROM ident_chunks WHERE ident_id = old.ident_id) BEGIN
        DELETE FROM idents WHERE id = old.ident_id;
    END;
    -- the old rows' pages are free now: the next index run merges FTS5 and VACUUMs (db.space)
    DELETE FROM meta WHERE key = 'fts_rows_merged';
    """,
    packed_chunks,
]
