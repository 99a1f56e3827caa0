"""`recall doctor`: every check of this machine and of what the config names, each saying what it checked."""
from __future__ import annotations

import os
import sqlite3
import stat
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .config import counted
from .errors import InputError, MissingExtra, RecallError
from .extras import IMPORT_BUDGET, IMPORT_TIMEOUT, before_threads, finish_probes, installed, start_probes, stop_probes

PREREQUISITE_BUDGET = 0.8   # seconds for every prerequisite's check, side by side (doctor answers within 1 s)
REMOTE_TIMEOUT = 3.0


@dataclass
class Check:
    name: str
    ok: bool | None             # None: nothing to judge (an extra not installed, a part not used)
    detail: str


@dataclass
class _Context:
    cfg: object
    config_errors: list
    con: object = None                 # the index, opened read-only (None: no index yet)
    secret_ids: set = field(default_factory=set)
    unread_secrets: bool = False       # a secrets file recall refuses to read: its ids are unknown here


def run_doctor(config: str | None = None, *, thorough: bool = False, extras: bool = True) -> list:
    """Every check, in the order a user reads them (config errors first); a check that cannot run
    says why, and the others still run. `extras=False` leaves out the import probes."""
    probes = start_probes() if extras else None   # the child first: it takes the longest
    # the deadline from after the child's start, so --thorough's wait is whole and said as such
    deadline = time.monotonic() + (IMPORT_TIMEOUT if thorough else IMPORT_BUDGET)
    try:
        cfg, errors = load_config_leniently(config)
        before_threads()
        with ThreadPoolExecutor(len(cfg.remotes) + 8) as pool:      # every remote, and 8 prerequisites at a time
            remotes = [pool.submit(_remote_check, cfg, rem) for rem in cfg.remotes]
            jobs = [pool.submit(_prerequisite, e) for e in _prerequisites(cfg)] + remotes
            ctx = _Context(cfg, errors, con=_open_index(cfg))
            try:
                checks = [check for section in SECTIONS for check in section(ctx)]
                embedding = _embedding(ctx)
            finally:
                if ctx.con is not None:
                    ctx.con.close()
            checks += [job.result() for job in jobs]
        return checks + embedding + [Check(*found) for found in (finish_probes(probes, deadline) if probes else [])]
    finally:
        stop_probes(probes)     # a Ctrl-C or an error before the answers: no import left running


def load_config_leniently(explicit: str | None):
    """(config, errors): the config as far as it is valid — a key with an error is left at its
    default and its error kept, so one mistake does not hide the checks of the rest."""
    from . import yaml
    from .config import TOP_KEYS, Config, apply_doc, find_config, home_dir, load_config
    try:
        return load_config(explicit), []
    except RecallError as exc:
        first = exc
    try:
        path = find_config(explicit)
        doc = yaml.load(str(path))
    except RecallError:
        return Config(path=None, home=home_dir()), [first]
    cfg, errors = Config(path=path, home=home_dir(path)), [first]
    if not isinstance(doc, yaml.YMap):
        return cfg, errors
    for key in (k for k in doc if k in TOP_KEYS):        # unknown keys are all in the first error
        part = yaml.YMap(doc.line)
        part[key] = doc[key]
        part.key_lines = {key: doc.key_lines.get(key)}
        try:
            apply_doc(cfg, part, str(path))
        except RecallError as exc:
            if _where(exc) not in map(_where, errors):
                errors.append(exc)
    return cfg, errors


def _where(exc):
    return (exc.path, exc.line) if isinstance(exc, InputError) and exc.line is not None else str(exc)


# -- the sections, in the order they print ----------------------------------------------------

def _config_checks(ctx) -> list:
    from .config import EXAMPLE, default_config_path
    cfg = ctx.cfg
    if ctx.config_errors:
        return [Check("config", False, str(exc)) for exc in ctx.config_errors]
    if cfg.path is None:
        return [Check("config", False, f"none found at {default_config_path()}; run 'recall init' to write "
                                       "a starter one (or name yours with --config FILE)")]
    out = [Check("config", True, f"{cfg.path} ({_mode(cfg.path)})")]
    if not cfg.sources:
        out.append(Check("sources", False, f"none configured: nothing to index or search — add {EXAMPLE!r}"))
    return out


def _platform(ctx) -> list:
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        fts5 = True
    except sqlite3.Error:
        fts5 = False
    return [Check("python", sys.version_info >= (3, 9), sys.version.split()[0] + f" ({sys.executable})"),
            Check("sqlite", True, sqlite3.sqlite_version),
            Check("fts5", fts5, "available" if fts5 else "missing: keyword search needs FTS5"),
            Check("processes", True, "every command runs in its own process and leaves nothing running "
                                     "('recall mcp' while its client holds it)"),
            _freshness()]


def _freshness() -> Check:
    """How `recall mcp` (and `index --watch`) follows the sources here (watch.method)."""
    from .notes.watch import method
    try:
        how = method()
    except RecallError as exc:
        return Check("freshness", False, str(exc))
    said = {"watchdog": "recall mcp follows the sources with watchdog's file events",
            "poll": "recall mcp follows the sources with a stat poll (pip install 'recall[watch]' for file events)",
            "off": "RECALL_WATCH=off: recall mcp answers from the index as of the last 'recall index'"}
    return Check("freshness", None if how == "off" else True, said[how])


def _home(ctx) -> list:
    out = []
    for name, path, want in (("home", ctx.cfg.home, "0o700"), ("database", ctx.cfg.db_path, "0o600")):
        mode = _mode(path)
        fix = "" if mode in ("absent", want) else f": chmod {want[2:]} it"
        out.append(Check(name, not fix, f"{path} ({mode}){fix}"))
    return out + _state_in_sources(ctx.cfg)


def _state_in_sources(cfg) -> list:
    """A "no" for each source that holds recall's state folder or the vault key: never indexed,
    but a sync tool, a backup or a git push of the notes takes them along."""
    from .notes.walk import state_inside, state_paths
    state, out = state_paths(cfg), []
    (home,), (key, *_) = state
    for src in cfg.sources:
        inside = [str(src.path / rel) for rel in state_inside(src.path, state)]
        if key.startswith(os.path.realpath(src.path) + os.sep) and not key.startswith(home + os.sep):
            inside.append(key)              # RECALL_KEY_FILE put it there
        if inside:
            out.append(Check(f"state in source {src.name}", False, f"{', '.join(inside)} lies inside "
                             f"{src.path}: recall never indexes it, but whatever copies the notes copies it "
                             "too — set RECALL_HOME (or home: in the config) to a folder outside the sources"))
    return out


def _sources(ctx) -> list:
    out = []
    last = _one(ctx.con, "SELECT value FROM meta WHERE key='indexed_at'")
    for src in ctx.cfg.sources:
        if not src.path.is_dir():
            out.append(Check(f"source {src.name}", False, f"{src.path} does not exist: fix its path in the config"))
            continue
        on_disk = _files(src, ctx.cfg)
        held = _ask(ctx.con, lambda con: {r[0] for r in con.execute(
            "SELECT relpath FROM files WHERE source=?", (src.name,))})
        if held is None:
            out.append(Check(f"source {src.name}", False, f"{src.path}: {counted(len(on_disk), 'file')}, not indexed yet: "
                                                          "run 'recall index'"))
            continue
        from .inventory import ago
        when = f", last indexed {ago(time.time() - float(last))}" if last else ""
        said = f"{src.path}: {counted(len(on_disk), 'file')}, {len(held)} indexed{when}"
        lacking = _lacking(on_disk, held, ctx.cfg.max_file_bytes)
        if lacking:
            said += (f"; {len(lacking)} not in the index (e.g. {', '.join(lacking[:3])}): run 'recall index'"
                     " ('recall index --watch', or recall mcp, keeps it so)")
        out.append(Check(f"source {src.name}", not lacking, said))
    return out


def _lacking(on_disk: dict, held: set, max_bytes: int) -> list:
    """The relpaths on disk the index lacks and an index run would index: not those it skips (too
    large, binary, a secrets file's text, no regular file, unreadable: it says so when it runs)."""
    from .notes.index import indexable
    return [rel for rel in sorted(set(on_disk) - held) if indexable(on_disk[rel], max_bytes)]


def _index(ctx) -> list:
    if ctx.con is None:
        return [Check("index", not ctx.cfg.sources, f"none yet at {ctx.cfg.db_path}"
                      + (": run 'recall index'" if ctx.cfg.sources else ""))]
    chunks = _one(ctx.con, "SELECT count(*) FROM chunks") or 0
    size = sum(os.path.getsize(p) for p in (ctx.cfg.db_path, f"{ctx.cfg.db_path}-wal") if os.path.exists(p))
    per_model = _ask(ctx.con, lambda con: con.execute(
        "SELECT m.provider, m.model, m.dimension, count(e.id) FROM embed_models m "
        "LEFT JOIN embeddings e ON e.model_id = m.id GROUP BY m.id").fetchall(), [])
    out = [Check("index", True, f"{counted(chunks, 'chunk')}, {size / 1e6:.1f} MB"
                  + ("" if per_model else ", no vectors"))]
    return out + [Check(f"vectors {p}/{m}", True, f"{counted(n, 'vector')} ({d}d)") for p, m, d, n in per_model]


def _secrets(ctx) -> list:
    import shlex

    from .vault.inplace import is_sealed
    from .vault.secretfile import load_secret_files
    from .vault.store import synced as stored
    out, first_at = [], {}
    synced = _ask(ctx.con, stored, {})
    for path in ctx.cfg.secrets:
        name = f"secrets {path.name}"
        if not path.exists():
            out.append(Check(name, False, f"{path} does not exist: create it, or fix 'secrets:' in the config"))
            continue
        if not path.is_file():
            ctx.unread_secrets = True
            what = "a folder" if path.is_dir() else "not a regular file"
            out.append(Check(name, False, f"{path} is {what}: name the secrets file itself in 'secrets:' in "
                                          "the config"))
            continue
        mode = _mode(path)
        if stat.S_IMODE(os.stat(path).st_mode) & 0o077:        # recall refuses to read it at all then
            ctx.unread_secrets = True
            out.append(Check(name, False, f"{path} ({mode}) is readable by group or others: chmod 600 {shlex.quote(str(path))} "
                                          "(recall reads it only then)"))
            continue
        try:
            entries, _ = load_secret_files([path])
        except RecallError as exc:
            ctx.unread_secrets = True       # its ids are unknown: none is "no longer in any secrets file"
            out.append(Check(name, False, str(exc)))
            continue
        problems = []
        for e in entries:
            if e.id in first_at:
                problems.append(f"duplicate id '{e.id}' at {e.file}:{e.line}, first at {first_at[e.id]}")
            first_at.setdefault(e.id, f"{e.file}:{e.line}")
            ctx.secret_ids.add(e.id)
        plain = sum(1 for e in entries for f, v in e.values.items()
                    if not is_sealed(v) and f not in e.meta.get("public", ()))
        missing = [e.id for e in entries if synced.get(e.id, (None, 0))[0] != str(path)]
        edited = any(synced[e.id][1] < os.stat(path).st_mtime for e in entries if e.id not in missing)
        if missing:
            problems.append(f"not in the vault yet: {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}"
                            ": run 'recall secret sync'")
        elif edited:
            problems.append("edited since the last sync: run 'recall secret sync'")
        elif plain:             # the sync that the two above ask for seals them as well
            problems.append(f"{counted(plain, 'value')} in plain text: run 'recall secret sync' to seal them (ENC[...])")
        unopened = _sealed_fault(ctx.cfg.home, entries)
        if unopened:
            problems.append(unopened)
        out.append(Check(name, not problems, f"{path} ({mode}), {counted(len(entries), 'secret')}"
                         + ("; " + "; ".join(problems) if problems else ", synced")))
    return out


def _sealed_fault(home, entries: list):
    """The one line a sync would end in when a sealed value does not open with the key, else None."""
    from .vault.inplace import is_sealed, open_entries
    from .vault.keyfile import key_path, load_key
    if not any(is_sealed(v) for e in entries for v in e.values.values()) or not key_path(home).is_file():
        return None                     # no key at all: the vault key check says it
    try:
        open_entries(entries, load_key(home, create=False), home)
    except MissingExtra:
        return None                     # said by the extras check
    except RecallError as exc:
        return str(exc)
    return None


def _vault_key(ctx) -> list:
    from .vault.inplace import backup_state
    from .vault.keyfile import key_path
    from .vault.store import count, first_fault, synced
    path = key_path(ctx.cfg.home)
    stored = _ask(ctx.con, count, 0)
    if not path.exists():
        if not ctx.secret_ids and not stored:        # no secret yet: nothing needs a key
            return []
        return [Check("vault key", False, f"{path} is missing: 'recall secret sync' makes one"
                      + (f" — but {stored} stored secrets need the old key back" if stored else ""))]
    if not path.is_file():
        return [Check("vault key", False, f"{path} is not a file: move it aside and put the key file back "
                                          "from your backup")]
    mode, folder = _mode(path), _mode(path.parent)
    ok = mode == "0o600" and folder == "0o700"
    out = [Check("vault key", ok, f"{path} ({mode}, folder {folder})"
                 + ("" if ok else ": chmod 600 the key and 700 its folder"))]
    if stored:                          # a vault that holds nothing yet loses nothing with its key
        out.append(Check("vault key backup", *_ask(ctx.con, lambda con: backup_state(con, ctx.cfg.home),
                                                   (False, "no database yet"))))
    fault = _ask(ctx.con, lambda con: first_fault(con, ctx.cfg))
    if fault:
        out.append(Check("vault rows", False, fault))
    gone = sorted(set(_ask(ctx.con, synced, {})) - ctx.secret_ids)
    if gone and ctx.cfg.secrets and not ctx.unread_secrets:     # an unread file: its chmod line says it
        out.append(Check("vault", False, f"{counted(stored, 'secret')} stored; {', '.join(gone[:5])} no longer in any "
                                         "secrets file: run 'recall secret sync'"))
    return out


def _inventory(ctx) -> list:
    from . import inventory, yaml
    out, parsed = [], True
    for path in ctx.cfg.inventory:
        try:
            count = len(yaml.load_entries(str(path), "inventory"))
            out.append(Check(f"inventory {path.name}", True, f"{path}: {counted(count, 'entry')}"))
        except RecallError as exc:
            parsed = False
            out.append(Check(f"inventory {path.name}", False, str(exc)))
    if ctx.cfg.inventory and parsed:
        try:
            entries = inventory.load_inventory(ctx.cfg)
            bad = [e for e in entries if e.error]
            out += [Check(f"inventory entry {e.id}", False, e.error) for e in bad]
            out.append(Check("inventory references", not bad,
                             f"{len(bad)} of {counted(len(entries), 'entry')} broken (above); the others work" if bad else
                             f"{counted(len(entries), 'entry')}: every requires, account and secret names something "
                             "that exists, no cycles"))
        except RecallError as exc:
            out.append(Check("inventory references", None, "not checked: the secrets file above cannot be read")
                       if ctx.unread_secrets else Check("inventory references", False, str(exc)))
    return out


def _proofs(ctx) -> list:
    """The proofs and secret checks the guard refuses, or whose setup cannot run: verify skips them,
    so they are never run and their entries never known to work."""
    if not ctx.cfg.inventory and not ctx.cfg.secrets:
        return []
    from .verify import plan

    def judge(con):                     # doctor's read-only connection gives tuples; plan reads rows by name
        tuples, con.row_factory = con.row_factory, sqlite3.Row
        try:
            return plan(con, ctx.cfg)[1]
        finally:
            con.row_factory = tuples
    try:
        probes = _ask(ctx.con, judge, [])
    except RecallError:                 # an inventory that does not load has its own line above
        return []
    judged = [p for p in probes if p.rule not in ("inventory.entry", "no-proof")]
    refused = [p for p in judged if p.verdict != "allow" or p.refusal]
    out = [Check(f"verify {p.target}", False, f"verify skips '{p.command}': " + (
        f"the guard denies it ({p.rule}): {p.reason}" if p.verdict != "allow" else p.refusal)) for p in refused]
    if judged and not refused:
        out.append(Check("verify proofs", True, f"{counted(len(judged), 'proof')} the guard allows ('recall verify' runs them)"))
    return out


def _integrity(ctx) -> list:
    """`PRAGMA quick_check` and the schema version of the DB, read-only."""
    from .db.repair import quick_check
    return [Check("database integrity", *quick_check(ctx.cfg.db_path))]


# each takes the context and returns its checks
SECTIONS = [_config_checks, _platform, _home, _sources, _index, _integrity, _secrets, _vault_key, _inventory, _proofs]


# -- prerequisites, remotes, the embedding provider, the extras --------------------------------

def _prerequisites(cfg) -> list:
    """Every inventory entry with a check (the VPN …); an inventory that does not load has its own line."""
    from . import inventory
    try:
        return [e for e in inventory.load_inventory(cfg) if e.check and not e.error]
    except RecallError:
        return []


def _prerequisite(e) -> Check:
    """The entry's check, as access and verify run it, within doctor's budget."""
    from . import inventory
    up, detail = inventory.probe(e, min(inventory.check_timeout(e), PREREQUISITE_BUDGET))
    hint = f" — {e.hint}" if e.hint else ""
    return Check(f"prerequisite {e.id}", up, detail if up else f"down: {detail}{hint}")


def _remote_check(cfg, rem) -> Check:
    """Reachable over ssh within a short timeout, and the recall copy there answers."""
    from . import remote
    timeout = min(rem.timeout, REMOTE_TIMEOUT)
    started = time.monotonic()
    try:
        code, version, last = remote.version_of(cfg, rem, timeout)
    except RecallError as exc:
        return Check(f"remote {rem.name}", False, f"{exc}")
    seconds = time.monotonic() - started
    if code == 255:             # ssh's own failure: no connection, or no login
        return Check(f"remote {rem.name}", False, f"{rem.host} unreachable over ssh after {seconds:.1f}s: {last}")
    if code != 0:
        return Check(f"remote {rem.name}", False, f"{rem.host} answers, but recall does not run at {rem.path}: "
                                                  f"{last} — 'recall remote install {rem.host} "
                                                  f"--path {rem.path}' puts it there")
    return Check(f"remote {rem.name}", True, f"{rem.host}: {version or 'recall'} at {rem.path}, answered in {seconds:.1f}s")


def _embedding(ctx) -> list:
    """The live vector backend, the provider and its key, and the token ledger — never a key's value."""
    from .embed import vectors
    emb = ctx.cfg.embedding
    try:
        out = [Check("vectors", True, vectors.describe_backend())]
    except Exception as exc:            # a broken sqlean / sqlite-vec / numpy install is a finding here
        out = [Check("vectors", False, f"the vector backend fails: {type(exc).__name__}: {exc} "
                                       "(pip install --force-reinstall 'recall[vec]')")]
    if emb.provider == "none":
        return out + [Check("embedding", True, "provider none: keyword search only; to match by meaning too, set "
                            f"embedding.provider in {ctx.cfg.path or 'the config'} to local (pip install "
                            "'recall[vec,local]') or voyage, then run 'recall index'")]
    from .embed.ledger import ledger_totals
    from .embed.local_model import local_model_source
    from .embed.providers import fingerprint, voyage_base_url
    fp = fingerprint(emb, "document")
    detail = f"provider {fp.provider}, model {fp.model}" + (f", dimension {fp.dimension}" if fp.dimension else "")
    ok = True
    if emb.provider == "voyage":
        if os.environ.get("VOYAGE_API_KEY"):
            detail += ", key from VOYAGE_API_KEY"
        elif emb.api_key_secret:
            ok = emb.api_key_secret in ctx.secret_ids
            detail += f", key from vault secret '{emb.api_key_secret}'" + (
                "" if ok else ", which no secrets file holds")
        else:
            ok, detail = False, detail + ", no key: set VOYAGE_API_KEY or embedding.api_key_secret"
        detail += f", endpoint {voyage_base_url(emb)}"
    else:
        ok = installed("numpy") and installed("tokenizers")   # no torch needed
        detail += f", from {local_model_source(emb)}" if ok else ", not installed (pip install 'recall[local]')"
    out.append(Check("embedding", ok, detail))
    totals = _ask(ctx.con, ledger_totals)
    if totals:
        billed, held = totals
        out.append(Check("token cap", billed + held <= emb.token_cap, f"{billed:,} tokens billed"
                         + (f" (+{held:,} unconfirmed)" if held else "") + f" of {emb.token_cap:,}"))
    return out


# -- small readers ----------------------------------------------------------------------------

def _mode(path) -> str:
    try:
        return oct(stat.S_IMODE(os.stat(path).st_mode))
    except OSError:
        return "absent"


def _open_index(cfg):
    if not cfg.db_path.exists():
        return None
    try:
        from .db import look
        con = look(cfg.db_path, timeout=2)
        con.execute("SELECT count(*) FROM files").fetchone()
        return con
    except sqlite3.Error:
        return None


def _ask(con, read, default=None):
    """`read(con)`, or `default` with no DB or a DB that cannot answer."""
    if con is None:
        return default
    try:
        return read(con)
    except sqlite3.Error:
        return default


def _one(con, sql: str):
    row = _ask(con, lambda con: con.execute(sql).fetchone())
    return row[0] if row else None


def _files(src, cfg) -> dict:
    """{relpath as the index shows it: path} of the files a source walk selects."""
    from .notes.walk import own_files, shown, state_paths, walk_source
    try:
        return {shown(rel): full for rel, full in walk_source(src, skip_paths=own_files(cfg),
                                                               state=state_paths(cfg))}
    except (OSError, RecallError):          # an unreadable or missing folder: the index run will say more
        return {}
