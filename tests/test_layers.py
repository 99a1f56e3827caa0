"""Imports flow one way: every module's imports (those inside functions too) point to its own layer or
a lower one, and no chain of imports comes back to where it started."""
import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

# Lowest first: a unit (a flat module, or a package with all its files) may import from its own layer
# or a lower one (docs/DESIGN.md, "Layers"). A unit not listed yet sits at the lowest layer its own
# imports allow: add it where it belongs.
LAYERS = [
    ("base", {"errors", "extras"}),                   # the exceptions users see; which extras are installed
    ("yaml", {"yaml"}),                               # the YAML subset
    ("config", {"config"}),                           # the config, how a handed-out line starts
    ("storage", {"db"}),                              # the driver, migrations, the quick check, pids
    ("guard", {"guard"}),                             # the read-only verdict
    ("embed", {"embed"}),                             # providers, ledger, vectors
    ("notes", {"notes"}),                             # chunk, index, keyword/vector lists, fusion, read, watch
    ("hostbound", {"hostbound"}),                     # the per-run proxy (its audit rows are the runner's)
    ("vault", {"vault"}),                             # sync, seal, find/show, exec, mask, the scrubber
    ("inventory", {"inventory"}),
    ("access", {"access"}),
    ("verify", {"verify"}),
    ("remote", {"remote"}),
    ("verbs", {"doctor", "instructions", "starter"}),  # whole verbs the library layer calls
    ("api", {"api"}),                                 # the library layer: one function per verb and tool
    ("faces", {"cli", "mcp_server", "__main__", "__init__"}),
]

# Upward imports still in the code (importer, imported). This list may only shrink: an entry whose
# import is gone fails the test until it is removed here.
KNOWN_UPWARD: set = set()


def _layer_of(graph=None) -> dict:
    """{module: layer index}; a module not in LAYERS yet sits at the lowest layer its imports allow."""
    layer = {m: i for i, (_, mods) in enumerate(LAYERS) for m in mods}
    unplaced = sorted(set(graph or ()) - set(layer))
    for _ in unplaced:                   # enough rounds for a chain of new modules importing each other
        for mod in unplaced:
            layer[mod] = max([layer.get(dep, 0) for dep in graph[mod]] + [0])
    return layer


def _unit(path: Path, top: Path) -> tuple:
    """(unit, package): a top-level module is its own unit; every file of a subpackage is the package's."""
    rel = path.relative_to(top).parts
    return (rel[0], rel[0]) if len(rel) > 1 else (path.stem, None)


def _import_nodes(path: Path, modules: set, package=None):
    """(imported unit, line, names) for every import of another recall unit in `path`, at any depth;
    `package` is the subpackage `path` sits in (its siblings are the same unit)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        units = []
        if isinstance(node, ast.ImportFrom):
            parts = [p for p in (node.module or "").split(".") if p]
            names = [a.name for a in node.names]
            if package and node.level == 1:
                continue                                   # a sibling inside its own package
            if node.level == (2 if package else 1) or (node.level == 0 and parts[:1] == ["recall"]):
                rest = parts if node.level else parts[1:]
                units = [(rest[0], names)] if rest else [(n, []) for n in names]
        elif isinstance(node, ast.Import):
            units = [(a.name.split(".")[1], []) for a in node.names if a.name.startswith("recall.")]
        for unit, names in units:
            if unit in modules and unit != (package or path.stem):
                yield unit, node.lineno, names


def _imports(path: Path, modules: set, package=None) -> dict:
    """{imported unit: first line} for every recall unit `path` imports, at any depth."""
    found: dict = {}
    for unit, line, _ in _import_nodes(path, modules, package):
        found.setdefault(unit, line)
    return found


def _files(top: Path) -> list:
    return sorted(top.glob("*.py")) + sorted(top.glob("*/*.py"))


def _graph() -> dict:
    top = REPO / "recall"
    files = _files(top)
    modules = {_unit(p, top)[0] for p in files}
    graph: dict = {}
    for p in files:
        unit, package = _unit(p, top)
        for dep, line in _imports(p, modules, package).items():
            graph.setdefault(unit, {}).setdefault(dep, line)
        graph.setdefault(unit, {})
    return graph


# Private names still imported from another module (importer, module). May only shrink.
KNOWN_PRIVATE: set = set()


def test_no_private_name_crosses_a_package_boundary():
    top = REPO / "recall"
    files = _files(top)
    modules = {_unit(p, top)[0] for p in files}
    crossing = [f"{p.relative_to(REPO)}:{line} imports {n} from {unit}"
                for p in files for unit, line, names in _import_nodes(p, modules, _unit(p, top)[1])
                for n in names if n.startswith("_") and (_unit(p, top)[0], unit) not in KNOWN_PRIVATE]
    assert not crossing, "a package's private names stay inside it: export a public name\n" + "\n".join(crossing)


def test_every_module_in_layers_exists():
    gone = sorted(set(_layer_of()) - set(_graph()))
    assert not gone, f"LAYERS names {gone}, which no longer exist"


def test_a_new_module_sits_above_what_it_imports():
    graph = {"errors": {}, "db": {"errors": 1}, "vault": {"db": 1}, "new": {"db": 3}, "newer": {"new": 1}}
    layer = _layer_of(graph)
    assert layer["new"] == layer["db"] == layer["newer"]


def test_imports_point_down():
    graph = _graph()
    layer = _layer_of(graph)
    upward = []
    for mod, deps in graph.items():
        for dep, line in deps.items():
            if mod in layer and dep in layer and layer[dep] > layer[mod] and (mod, dep) not in KNOWN_UPWARD:
                upward.append(f"recall/{mod}.py:{line} imports {dep} ({LAYERS[layer[dep]][0]} layer) from the "
                              f"{LAYERS[layer[mod]][0]} layer below it: pass it in, or move the code to its owner")
    assert not upward, "\n".join(upward)


def test_the_known_upward_imports_only_shrink():
    graph = _graph()
    gone = sorted(pair for pair in KNOWN_UPWARD if pair[1] not in graph.get(pair[0], {}))
    assert not gone, f"{gone} no longer import upward: remove them from KNOWN_UPWARD"


def _cycle(graph: dict):
    """One import cycle as a list of modules (first == last), or None."""
    state: dict = {}
    stack: list = []

    def visit(mod):
        state[mod] = 1
        stack.append(mod)
        for dep in sorted(graph.get(mod, {})):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state:
            found = visit(mod)
            if found:
                return found
    return None


def test_no_import_cycle_beyond_the_known_upward_imports():
    graph = {mod: {d: ln for d, ln in deps.items() if (mod, d) not in KNOWN_UPWARD} for mod, deps in _graph().items()}
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " → ".join(
        f"{a} (recall/{a}.py:{graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" → {cycle[-1]}"


def test_the_check_sees_imports_inside_functions_and_names_the_pair(tmp_path):
    (tmp_path / "low.py").write_text("def f():\n    from . import high\n")
    (tmp_path / "high.py").write_text("from .low import f\n")
    graph = {p.stem: _imports(p, {"low", "high"}) for p in tmp_path.glob("*.py")}
    assert graph == {"low": {"high": 2}, "high": {"low": 1}}
    assert _cycle(graph) in (["high", "low", "high"], ["low", "high", "low"])


# The modules that may read or write the vault's tables (secrets, secrets_fts, secret_vectors); db's
# migrations make them (CREATE TABLE, which this does not match). Everyone else calls a vault
# function, or is passed one by the faces (a redactor, require_open, load_values, holds_values).
SECRETS_TABLE_OWNERS = {"vault/store.py", "vault/meaning.py"}
_SECRETS_SQL = r"\b(?:FROM|INTO|UPDATE|JOIN)\s+(?:secrets|secrets_fts|secret_vectors)\b"


def _secrets_sql(paths, top) -> dict:
    """{file: first file:line} of every file outside the owners whose SQL names a vault table."""
    import re
    sql = re.compile(_SECRETS_SQL)
    found = {}
    for path in sorted(paths):
        name = path.relative_to(top).as_posix()
        if name not in SECRETS_TABLE_OWNERS:
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if sql.search(line):
                    found.setdefault(name, f"recall/{name}:{n}")
    return found


def test_only_the_vault_touches_the_secrets_tables():
    others = _secrets_sql(_files(REPO / "recall"), REPO / "recall")
    assert not others, f"the secrets tables are the vault's: call a vault function instead ({others})"


def test_the_secrets_table_check_names_a_reader(tmp_path):
    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "store.py").write_text('con.execute("SELECT * FROM secrets")\n')
    (tmp_path / "vault" / "redact.py").write_text('x = 1\nhas = con.execute("SELECT 1 FROM secrets LIMIT 1")\n')
    (tmp_path / "index.py").write_text('con.execute("INSERT INTO secret_vectors VALUES (?)")\n')
    assert _secrets_sql(_files(tmp_path), tmp_path) == {"index.py": "recall/index.py:1",
                                                        "vault/redact.py": "recall/vault/redact.py:2"}


def test_design_names_every_module_and_its_tests():
    """docs/DESIGN.md's module table: a row for every module of recall/ (the package's own __init__
    aside), and each test file it names exists — the map a maintainer reads stays true."""
    import re
    rows = [line for line in (REPO / "docs" / "DESIGN.md").read_text().splitlines() if line.startswith("| `")]
    named = {m for row in rows for m in re.findall(r"`([\w/]+\.py)`", row.split("|")[1])}
    tests = {t for row in rows for t in re.findall(r"`(test_\w+\.py)`", row.split("|")[-2])}
    files = {str(p.relative_to(REPO / "recall")) for p in _files(REPO / "recall")} - {"__init__.py"}
    assert not files - named, f"modules without a row in docs/DESIGN.md: {sorted(files - named)}"
    assert not named - files, f"rows for modules that are gone: {sorted(named - files)}"
    assert all((REPO / "tests" / t).exists() for t in tests), sorted(t for t in tests if not (REPO / "tests" / t).exists())


def test_the_faces_import_only_the_library_layer():
    """cli/ and mcp_server.py make one api call and format: of recall they import api and errors only
    (the CLI's `mcp` verb starts the other face), so no face can go around the door."""
    graph = _graph()
    allowed = {"cli": {"api", "errors", "mcp_server"}, "mcp_server": {"api", "errors"}}
    extra = {face: sorted(set(graph[face]) - ok) for face, ok in allowed.items() if set(graph[face]) - ok}
    assert not extra, f"a face imports past the library layer: {extra}"


def test_every_package_says_its_surface():
    """Each package of recall/ has an `__all__`, and every name in it is there (a function or a
    module of the package): what other packages may use, in one place."""
    import importlib
    for init in sorted((REPO / "recall").glob("*/__init__.py")):
        name = f"recall.{init.parent.name}"
        module = importlib.import_module(name)
        assert isinstance(getattr(module, "__all__", None), list), f"{name} has no __all__"
        for n in module.__all__:
            assert hasattr(module, n) or importlib.util.find_spec(f"{name}.{n}"), f"{name}.__all__ names {n}"


def test_the_design_maps_every_module_to_tests_and_every_test_to_a_module():
    """docs/DESIGN.md's table: each module row names a test file, and each tests/test_*.py is named
    by some row, so a newcomer finds a unit's tests and a test's unit."""
    import re
    rows = [line for line in (REPO / "docs" / "DESIGN.md").read_text().splitlines()
            if line.startswith("| `") and ".py`" in line.split("|")[1]]
    untested = [row.split("|")[1].strip() for row in rows if not re.search(r"`test_\w+\.py`", row.split("|")[-2])]
    assert not untested, f"rows naming no test file: {untested}"
    named = {t for row in rows for t in re.findall(r"`(test_\w+\.py)`", row.split("|")[-2])}
    orphans = sorted(p.name for p in (REPO / "tests").glob("test_*.py") if p.name not in named)
    assert not orphans, f"test files no module row names: {orphans}"


# One home per rule (issue 34 point 3): the words that only the rule's home may say.
ONE_HOME = {
    r"\btermios\b|select\.select\(": {"vault/tty.py"},                  # what a person types on the terminal
    r"\bfind_spec\(": {"extras.py", "db/__init__.py"},               # is this extra installed (db: where sqlite-vec's file is)
    r"def ago\(|timedelta\(seconds": {"inventory.py"},               # every "2h ago"
    r'\bsqlite3\.connect\((?!":memory:")': {"db/__init__.py", "db/repair.py"},   # opening the DB file
    # a child in a session of its own: the reaper's, which ends it and what it leaves (the clipboard clearer
    # must outlive recall; remote's guard runs on the other host)
    r"start_new_session": {"vault/reaper.py", "vault/reveal.py", "remote.py"},
}


@pytest.mark.parametrize("pattern", list(ONE_HOME))
def test_each_small_rule_is_said_in_its_one_home(pattern):
    rx = re.compile(pattern)
    found = {}
    for path in _files(REPO / "recall"):
        name = path.relative_to(REPO / "recall").as_posix()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if rx.search(line) and not line.lstrip().startswith("#"):
                found.setdefault(name, n)
    strays = {name: n for name, n in found.items() if name not in ONE_HOME[pattern]}
    assert not strays, f"{pattern!r} belongs in {sorted(ONE_HOME[pattern])}; also at {strays}"
    assert found, f"{pattern!r}: its home no longer says it (update ONE_HOME)"
