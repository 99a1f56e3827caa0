"""Sources → files → chunks → FTS (and identifier) rows, incrementally; vectors via embed."""
from __future__ import annotations

import functools
import hashlib
import os
import re
import stat as _stat
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .. import db
from ..db import space, texts
from ..errors import RecallError
from . import terms
from .walk import is_secrets_text, own_files, raw_name, read_note_file, shown, state_paths, walk_source

_PATH_DATE = re.compile(r"(?<!\d)((?:19|20)\d\d)[-_/.]?(0[1-9]|1[0-2])[-_/.]?(0[1-9]|[12]\d|3[01])(?!\d)")
COMMIT_EVERY_S = 0.5
OPTIMIZE_AFTER = 2000       # chunks written in one run after which FTS5's segments are merged
CHUNK_FORMAT = "4"          # bump when chunking, identifier extraction or redaction changes: the next index rewrites
HEAD_CHARS = 1500           # a file's head: its title and opening text, about what a model reads (~256 tokens)
SECRETS_SKIPPED = "reads as a recall secrets file (entries with an id and a value): never indexed"


@dataclass
class IndexReport:
    new: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks: int = 0                                # chunks written this run
    skipped: list = field(default_factory=list)    # (path, reason): not indexed
    warnings: list = field(default_factory=list)   # (path, what): indexed, but say so
    seconds: float = 0.0
    embedded: int = 0
    tokens: int = 0


def date_for(relpath: str, meta: dict, mtime_ns: int, git_dates) -> str:
    """The recency prior's date: the note's own (meta["date"]), else one in its path, else its last
    git commit (`git_dates()`: {relpath: date}), else its mtime."""
    if meta.get("date"):
        return str(meta["date"])[:10]
    m = _PATH_DATE.search(relpath)
    if m:
        return f"{m.group(1)}-{m.group(2)}-{m.group(3)}"
    mtime = datetime.fromtimestamp(mtime_ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d")
    return git_dates().get(relpath) or mtime


def commit_dates(root) -> dict:
    """{relpath: YYYY-MM-DD of its last commit} by one `git log` over the source (a clone's files all
    carry the day it was made); {} without git or a repository."""
    import subprocess
    try:
        # core.quotePath: a name that is not ASCII as it is, not in quoted octal
        argv = ["git", "-C", str(root), "-c", "core.quotePath=false", "log", "--relative",
                "--format=%x00%cs", "--name-only", "--no-renames", "--", "."]
        out = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    dates, date = {}, None
    for line in out.splitlines():
        if line.startswith("\0"):
            date = line[1:].strip()
        elif line.strip() and date:
            dates.setdefault(line.strip(), date)      # newest first
    return dates


def head_text(relpath: str, title: str, rows: list) -> str:
    """What a file's own vector embeds (`rows`: its chunks' [(breadcrumb, body)]): its title (else
    its first heading) and its opening text."""
    parts = [title or embedded_breadcrumb(relpath, rows[0][0] if rows else "").split(" › ")[0]]
    for _, body in rows:
        if sum(map(len, parts)) >= HEAD_CHARS:
            break
        parts.append(body)
    return "\n\n".join(p for p in parts if p)[:HEAD_CHARS]


def _stored(con, file_id: int) -> tuple:
    """(relpath, title, [(breadcrumb, body)] of its chunks) of an indexed (redacted) file."""
    rel, title = con.execute("SELECT relpath, title FROM files WHERE id=?", (file_id,)).fetchone()
    rows = con.execute("SELECT breadcrumb, body FROM chunks WHERE file_id=? ORDER BY ord", (file_id,)).fetchall()
    return rel, title or "", [tuple(r) for r in rows]


def head_key(rel: str, title: str, rows: list) -> str | None:
    """The key of a file's own vector (`rows`: its chunks' [(breadcrumb, body)]): a short note's
    head is its one chunk's text, whose vector serves; else the head's own hash (embedded whole)."""
    if not rows:
        return None
    text = head_text(rel, title, rows)
    crumb = embedded_breadcrumb(rel, rows[0][0])
    if text == (f"{crumb}\n\n{rows[0][1]}" if crumb else rows[0][1]):
        return chunk_hash(rel, *rows[0])
    return hashlib.blake2b(f"head\n{text}".encode("utf-8"), digest_size=16).hexdigest()


def chunk_hash(rel: str, crumb: str, body: str) -> str:
    """A chunk's key among the vectors: the hash of what is embedded, so vectors follow a renamed file."""
    return hashlib.blake2b(f"{embedded_breadcrumb(rel, crumb)}\n{body}".encode("utf-8"), digest_size=16).hexdigest()


def embedded_breadcrumb(relpath: str, breadcrumb: str) -> str:
    """A markdown chunk's heading path is embedded with it; a plain file's breadcrumb is its path,
    which is left out (shown and keyword-searched still) so a rename costs no new embedding."""
    from .chunk import is_markdown
    return breadcrumb if is_markdown(relpath) else ""


def _write_file(con, source: str, rel: str, st, digest: str, doc, date: str, file_id, redact, raw) -> int:
    # the note's texts redacted at once: one look at the vault's forms for them all
    title, *texts = redact.many([str(doc.meta.get("title") or "")]
                                + [t for ch in doc.chunks for t in (ch.breadcrumb, ch.text)])
    chunks = [(ch, texts[2 * i], texts[2 * i + 1]) for i, ch in enumerate(doc.chunks)]
    head = head_key(rel, title, [(crumb, body) for _, crumb, body in chunks])
    if file_id is None:
        file_id = con.execute(
            "INSERT INTO files(source, relpath, size, mtime_ns, hash, date, title, rawpath, head_hash) "
            "VALUES (?,?,?,?,?,?,?,?,?)",
            (source, rel, st.st_size, st.st_mtime_ns, digest, date, title, raw, head)).lastrowid
    else:
        con.execute("DELETE FROM chunk_rows WHERE file_id=?", (file_id,))
        con.execute("UPDATE files SET size=?, mtime_ns=?, hash=?, date=?, title=?, rawpath=?, head_hash=? "
                    "WHERE id=?", (st.st_size, st.st_mtime_ns, digest, date, title, raw, head, file_id))
    for ord_, (ch, crumb, body) in enumerate(chunks):
        write_chunk(con, None, file_id, ord_, ch.start_line, ch.end_line, crumb, body, rel)
    return len(chunks)


def write_chunk(con, chunk_id, file_id, ord_, start, end, crumb: str, body: str, rel: str) -> None:
    """Insert one chunk; its FTS rows (words, identifiers) follow by trigger."""
    # the file name too: an alert named only by its page's file name (RouterErrorRatioTooHigh.md)
    whole: set = set()
    found = terms.identifiers(crumb + "\n" + body + "\n" + rel.rsplit("/", 1)[-1], whole)
    con.execute("INSERT INTO chunk_rows(id, file_id, ord, start_line, end_line, hash, texts) VALUES (?,?,?,?,?,?,?)",
                (chunk_id, file_id, ord_, start, end, chunk_hash(rel, crumb, body),
                 texts.pack(crumb, body, rel, " ".join(terms.token(t, t in whole) for t in found))))


def redact_indexed(con, redact) -> int:
    """Rewrite the indexed chunks and titles holding a vault value (or an encoded form of one), so
    that no table keeps it; `redact`: the vault's redactor for the values just stored. Read and
    written in one transaction: rows another writer changed meanwhile are never written back old."""
    with db.transaction(con):
        rows = con.execute("SELECT c.*, f.relpath FROM chunks c JOIN files f ON f.id = c.file_id").fetchall()
        named = con.execute("SELECT id, title FROM files WHERE title != ''").fetchall()
        texts = redact.many([t for row in rows for t in (row["breadcrumb"], row["body"])] + [t for _, t in named])
        hit = [(row, crumb, body) for row, crumb, body in zip(rows, texts[0::2], texts[1::2])
               if crumb != row["breadcrumb"] or body != row["body"]]     # (row, redacted breadcrumb, body)
        titles = [(new, i) for (i, t), new in zip(named, texts[2 * len(rows):]) if new != t]
        if not hit and not titles:
            return 0
        for row, crumb, body in hit:
            con.execute("DELETE FROM chunk_rows WHERE id=?", (row["id"],))
            write_chunk(con, row["id"], row["file_id"], row["ord"], row["start_line"], row["end_line"],
                        crumb, body, row["relpath"])
        con.executemany("UPDATE files SET title=? WHERE id=?", titles)
        for file_id in {row["file_id"] for row, _, _ in hit} | {i for _, i in titles}:
            con.execute("UPDATE files SET head_hash=? WHERE id=?", (head_key(*_stored(con, file_id)), file_id))
        # FTS5 keeps a deleted row's terms in its segments until they merge: merge them all now
        space.optimize(con)
    return len(hit) + len(titles)


def indexable(full: str, limit: int) -> bool:
    """Whether an index run would index this file now (doctor's count of what the index lacks)."""
    return _read(full, limit)[0] is not None


def _read(full: str, limit: int):
    """(bytes, None), or (None, reason) when the file is not indexable."""
    data, why = read_note_file(full, limit)
    if data is None:
        return None, why
    if b"\0" in data[:8192]:
        return None, "binary"
    if is_secrets_text(data):
        return None, SECRETS_SKIPPED
    return data, None


def run_index(con, cfg, *, full: bool = False, only: str | None = None, progress=None,
              embed: bool = True, notify=None, redactor, load_values=None, prune: bool = False,
              catch_up=None) -> IndexReport:
    """Bring the index up to date with the sources, then embed the texts without a vector (`embed`).
    `redactor` (the vault's) is required so that no caller indexes unchecked text; `load_values`
    finds a Voyage key in the vault; `catch_up(con, cfg)` (the vault's) redacts, the index lock held,
    what was indexed before a value it now knows was written. A source missing or empty (a disk not
    mounted) is kept unless `prune`."""
    cfg.require_sources()
    started = time.monotonic()
    report = IndexReport()
    sources = [s for s in cfg.sources if only is None or s.name == only]
    if only is not None and not sources:
        raise RecallError(f"no source named '{only}'",
                          "sources: " + ", ".join(s.name for s in cfg.sources))
    skip = own_files(cfg)
    state = state_paths(cfg)            # recall never reads itself back
    plan = []
    for source in sources:
        source.config_path = str(cfg.path)
        held = con.execute("SELECT count(*) FROM files WHERE source=?", (source.name,)).fetchone()[0]
        unreadable, files = [], []
        if held and not os.path.isdir(source.path):
            why = "is not there (missing, or a disk not mounted)"
        else:       # a folder never indexed that is not there is a typo in the config: walk says so
            files = list(walk_source(source, skip_paths=skip, unreadable=unreadable,
                                     state=state))      # every path checked first
            why = "holds no file now (an emptied folder, or a disk not mounted)"
        report.skipped += [(shown(os.path.join(str(source.path), rel_dir)), f"unreadable folder: {what}")
                           for rel_dir, what in unreadable]
        keep = held and not files and not unreadable and not prune
        if keep:
            report.warnings.append((str(source.path), f"source '{source.name}' {why}: kept the {held} "
                                    f"file{'s' * (held != 1)} indexed from it; 'recall index --prune' "
                                    "removes them"))
        elif not held and not files and not unreadable:     # a new notes folder: say why search finds nothing
            report.warnings.append((str(source.path), f"source '{source.name}' holds no note yet (no file matching "
                                    f"{', '.join(source.include)}): add some, then run 'recall index' again"))
        # a kept source is one unlisted folder: every path indexed from it is under ""
        plan.append((source, files, ("",) if keep else tuple(rel_dir for rel_dir, _ in unreadable)))
    total = sum(len(files) for _, files, _ in plan)
    with db.index_lock(cfg.db_path, notify):       # two runs' rows would collide: one at a time
        # fail closed: a vault that cannot be opened stops the run before any write; made under the
        # lock, after any sync that held it (its redaction covered the chunks written before)
        redact = redactor(con, cfg)
        if catch_up is not None:
            catch_up(con, cfg)
        _index_sources(con, cfg, plan, total, full, only, report, redact, progress)
        if report.chunks >= OPTIMIZE_AFTER:
            # many rows deleted and written leave FTS5's segments in pieces, each read by every query
            with db.transaction(con):
                space.optimize(con)
    if embed and cfg.embedding.provider != "none":
        done = embed_pending(con, cfg, notify=notify, progress=progress, redactor=redactor,
                             load_values=load_values)
        report.embedded, report.tokens = done.embedded, done.tokens
    with db.index_lock(cfg.db_path):    # a VACUUM beside the next run's writes: it read "no such table"
        if full or report.chunks >= OPTIMIZE_AFTER:
            # a WAL as large as the rebuild stays while another process holds the DB open: cut it
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        from ..db.space import reclaim
        reclaim(con)            # the DB in proportion to the notes, run after run
    report.seconds = time.monotonic() - started
    return report


def _folders_indexed(con) -> str:
    """`source<TAB>relpath` of every folder holding an indexed file and each above it: what a search
    stats to tell the index is behind (lines, so that it needs no json). A folder whose name is not
    UTF-8 is not listed (text cannot hold it; its shown name is no folder): the one above it is."""
    seen: set = set()
    for source, rel, raw in con.execute("SELECT source, relpath, rawpath FROM files"):
        parts = (os.fsdecode(raw) if raw else rel).split("/")[:-1]
        held = next((i for i, part in enumerate(parts) if shown(part) != part), len(parts))
        seen.update((source, "/".join(parts[:depth])) for depth in range(held + 1))
    return "\n".join(f"{source}\t{rel}" for source, rel in sorted(seen))


def _index_sources(con, cfg, plan, total, full, only, report, redact, progress) -> None:
    """The walked files into the index, committing every COMMIT_EVERY_S; files gone are removed."""
    done, last_commit = 0, time.monotonic()
    con.execute("BEGIN IMMEDIATE")
    try:
        # chunks of an older chunker are rewritten once; unchanged texts keep their vectors
        full = full or db.get_meta(con, "chunk_format") != CHUNK_FORMAT
        if only is None:
            names = [s.name for s in cfg.sources]
            report.removed += con.execute(f"DELETE FROM files WHERE source NOT IN ({','.join('?' * len(names))})",
                                          names).rowcount
        for source, files, unlisted in plan:
            existing = {r["relpath"]: r for r in con.execute(
                "SELECT id, relpath, rawpath, size, mtime_ns, hash FROM files WHERE source=?", (source.name,))}
            seen = set()
            git_dates = functools.cache(functools.partial(commit_dates, source.path))    # when a file first needs them
            for rel, full_path in files:
                name, done = shown(rel), done + 1
                if name in seen:           # two names that differ only in bytes that are not UTF-8
                    report.skipped.append((shown(full_path), "its name shows the same as another "
                                           "file's (bytes that are not UTF-8); rename one"))
                    continue
                seen.add(name)
                _index_one(con, cfg, source.name, rel, full_path, existing.get(name), full, report, git_dates,
                           redact)
                if progress:
                    progress(done, total, name)
                if time.monotonic() - last_commit > COMMIT_EVERY_S:
                    con.execute("COMMIT")
                    con.execute("BEGIN IMMEDIATE")
                    last_commit = time.monotonic()
            for rel, row in existing.items():
                # a file under a folder that could not be listed is kept: unreadable is not deleted
                if rel not in seen and not any(rel.startswith(d) for d in unlisted):
                    con.execute("DELETE FROM files WHERE id=?", (row["id"],))
                    report.removed += 1
        db.set_meta(con, "indexed_at", time.time())
        db.set_meta(con, "folders", _folders_indexed(con))
        if only is None:
            db.set_meta(con, "chunk_format", CHUNK_FORMAT)
        con.execute("COMMIT")
    except BaseException:
        db.rollback(con)
        raise


def _skip(con, full_path, path_text, why, old, report, keep=True) -> None:
    """Not indexed, and said; what was indexed goes unless `keep` (merely unreadable now). A note deleted
    since the walk (its name gone, not a link left dangling) is removed, not said."""
    gone = keep and not os.path.lexists(full_path)
    if not gone:
        report.skipped.append((path_text, why))
    if old is not None and (gone or not keep):
        con.execute("DELETE FROM files WHERE id=?", (old["id"],))
        report.removed += 1


def _index_one(con, cfg, source, rel, full_path, old, full, report, git_dates, redact) -> None:
    """Index one file; a name that is not UTF-8 is stored as shown, its bytes in files.rawpath."""
    raw, rel, path_text = raw_name(rel), shown(rel), shown(full_path)
    try:
        st = os.stat(full_path)
    except OSError as exc:
        return _skip(con, full_path, path_text, f"unreadable: {exc.strerror or exc}", old, report)
    if not _stat.S_ISREG(st.st_mode):      # a FIFO or device would block or never end; a note replaced by one is gone
        return _skip(con, full_path, path_text, "not a regular file", old, report, keep=False)
    if old is not None and not full and old["rawpath"] == raw and old["size"] == st.st_size \
            and old["mtime_ns"] == st.st_mtime_ns:
        report.unchanged += 1
        return
    data, why = _read(full_path, cfg.max_file_bytes)
    if data is None:
        return _skip(con, full_path, path_text, why, old, report, keep=why.startswith("unreadable"))
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    if old is not None and not full and old["hash"] == digest:
        con.execute("UPDATE files SET size=?, mtime_ns=?, rawpath=? WHERE id=?",
                    (st.st_size, st.st_mtime_ns, raw, old["id"]))
        report.unchanged += 1
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        text = data.decode("utf-8", errors="replace")
        report.warnings.append((path_text, f"invalid UTF-8 at line {line}, replaced with U+FFFD"))
    if raw is not None:
        report.warnings.append((path_text, "the name is not valid UTF-8: indexed, shown with U+FFFD"))
    from .chunk import chunk_markdown, chunk_text, is_markdown
    doc = chunk_markdown(text) if is_markdown(rel) else chunk_text(text, rel)
    date = date_for(rel, doc.meta, st.st_mtime_ns, git_dates)
    report.chunks += _write_file(con, source, rel, st, digest, doc, date, old and old["id"], redact, raw)
    if old is None:
        report.new += 1
    else:
        report.changed += 1


# -- vectors: embed the chunk texts that have none for the configured model ----------------------

@dataclass
class EmbedReport:
    pending: int = 0           # distinct chunk texts without a vector when the pass began
    embedded: int = 0
    tokens: int = 0            # billed
    estimate: int = 0          # what was announced before sending
    removed: int = 0           # vectors no chunk uses any more


def _estimate(chars: int) -> int:
    from ..embed.providers import MAX_TEXT_CHARS
    return min(chars, MAX_TEXT_CHARS) // 3 + 1


def embed_batches(pending: list, items: int, tokens: int):
    """[(hash, characters)] → lists of hashes, each ≤ `items` long and ≤ `tokens` estimated."""
    batch, size = [], 0
    for digest, chars in pending:
        est = _estimate(chars)
        if batch and (len(batch) >= items or size + est > tokens):
            yield batch
            batch, size = [], 0
        batch.append(digest)
        size += est
    if batch:
        yield batch


def _texts(con, hashes: list) -> dict:
    """{hash: (breadcrumb as embedded, document text)}; a file's head: (None, its text)."""
    from ..embed.providers import document_text
    out = {}
    for part, marks in db.in_batches(hashes):
        for h, crumb, body, rel in con.execute(
                "SELECT c.hash, c.breadcrumb, c.body, f.relpath FROM chunks c JOIN files f ON f.id = c.file_id "
                f"WHERE c.hash IN ({marks})", part):
            head = embedded_breadcrumb(rel, crumb)
            out.setdefault(h, (head, document_text(head, body)))
        for h, file_id in con.execute(f"SELECT head_hash, id FROM files WHERE head_hash IN ({marks})", part):
            if h not in out:
                out[h] = (None, head_text(*_stored(con, file_id)))
    return out


def _announcement(con, cfg, fp, mid: int, provider, pending: list, estimate: int) -> str:
    from ..embed.providers import ledger_totals
    texts = f"{len(pending):,} chunk texts with {provider.label}"
    what = f"embedding {texts}"
    others = [r[0] for r in con.execute("SELECT DISTINCT m.model FROM embed_models m JOIN embeddings e "
                                        "ON e.model_id = m.id WHERE m.id != ? LIMIT 3", (mid,))]
    if others == [fp.model]:        # the same model, an older way of turning chunks into its texts
        what = f"this recall embeds chunks differently ({fp.form}): re-embedding {texts}, once"
    elif others:
        what = f"the embedding model changed (vectors exist for {', '.join(others)}): re-embedding {texts}"
    if provider.paid:
        billed, held = ledger_totals(con)
        held_text = f" + {held:,} unconfirmed" if held else ""
        what += (f", about {estimate:,} tokens (estimated; {billed:,}{held_text} billed so far, "
                 f"cap {cfg.embedding.token_cap:,})")
    return what


def _embed_batch(con, cfg, provider, store, mid: int, batch: list, redact) -> tuple:
    """Reserve (paid), send, then store the vectors and settle in one transaction: a kill loses at
    most this batch, and counts it at most as 'unconfirmed'."""
    from ..embed import providers as embed
    texts = _texts(con, batch)
    batch = [h for h in batch if h in texts]        # another run removed the others' chunks meanwhile
    if not batch:
        return 0, 0
    crumbed = [h for h in batch if texts[h][0] is not None]
    redacted = redact.many([texts[h][1] for h in batch] + [texts[h][0] for h in crumbed])
    inputs, crumbs = dict(zip(batch, redacted)), dict(zip(crumbed, redacted[len(batch):]))
    # a long chunk may be embedded as windows (a local model): its first under its hash, the rest
    # under "hash#n"; windows are cut from the redacted text, so no value reaches the model in pieces.
    # A file's head is embedded whole: the model reads its opening
    split = getattr(provider, "parts", None)
    parts = {h: split(crumbs[h], inputs[h]) if split and h in crumbs else [inputs[h]] for h in batch}

    def write(result, claimed):
        keys = [h if n == 0 else f"{h}#{n}" for h in claimed for n in range(len(parts[h]))]
        store.dim = store.dim or len(result[0][0])
        store.put_many(zip(keys, result[0]))
    est = sum(embed.estimate_tokens(t) for t in inputs.values()) if provider.paid else 0
    result, claimed = embed.ledgered(con, cfg, provider, "document", est, len(batch),
                                     lambda claimed: provider.embed([t for h in claimed for t in parts[h]], "document"),
                                     claims=(mid, batch), store=write)
    if result is None:
        return 0, 0                # another run embedded or claimed all of it
    return len(claimed), result[1]


def embed_pending(con, cfg, *, redactor, provider=None, notify=None, progress=None,
                  load_values=None) -> EmbedReport:
    """Embed every chunk text without a vector for the configured model, one committed batch at a
    time, saying first how many texts and tokens; drop vectors no chunk uses any more."""
    from ..embed import providers as embed
    from ..embed.vectors import VectorStore
    report = EmbedReport()
    fp = embed.fingerprint(cfg.embedding, "document")
    with db.transaction(con):
        mid = embed.model_id(con, fp)
        dim_row = con.execute("SELECT dim FROM embeddings WHERE model_id=? LIMIT 1", (mid,)).fetchone()
        store = VectorStore(con, mid, fp.dimension or (dim_row[0] if dim_row else 0))
        report.removed = store.delete_orphans()
    pending = con.execute(
        "SELECT c.hash, MIN(length(c.breadcrumb) + length(c.body)) + 2 FROM chunks c WHERE NOT EXISTS "
        "(SELECT 1 FROM embeddings e WHERE e.model_id=? AND e.hash=c.hash) GROUP BY c.hash ORDER BY MIN(c.id)",
        (mid,)).fetchall()
    heads = con.execute("SELECT head_hash, MIN(id) FROM files f WHERE head_hash IS NOT NULL AND NOT EXISTS "
                        "(SELECT 1 FROM embeddings e WHERE e.model_id=? AND e.hash=f.head_hash) AND NOT EXISTS "
                        "(SELECT 1 FROM chunks c WHERE c.hash=f.head_hash) GROUP BY head_hash", (mid,)).fetchall()
    pending += [(h, len(head_text(*_stored(con, file_id)))) for h, file_id in heads]
    report.pending = len(pending)
    if not pending:
        return report
    # longest first, as SentenceTransformer.encode orders its input: little padding in a batch
    pending.sort(key=lambda p: -p[1])
    provider = provider or embed.provider_for(cfg, con, load_values)
    report.estimate = sum(_estimate(c) for _, c in pending)
    if notify:
        notify(_announcement(con, cfg, fp, mid, provider, pending, report.estimate))
    redact = redactor(con, cfg)
    for batch in embed_batches(pending, provider.batch_items, int(provider.request_tokens * 0.8)):
        done, tokens = _embed_batch(con, cfg, provider, store, mid, batch, redact)
        report.embedded += done
        report.tokens += tokens
        if progress:
            progress(report.embedded, len(pending), "embedding")
    return report
