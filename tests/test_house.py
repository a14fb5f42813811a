"""The house rules of the package, read from its source with ``ast``: no import cycle, layers that
point down, a docstring on every module, and no module that only keeps an old import path alive."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ptyacc"

# the old paths of moved modules (no module forwards them): none may return
OLD_PATHS = ("apidoc", "bench", "checkpoint", "cli", "distributed", "engine", "exchange", "figures", "geometry",
             "groups", "hooks", "info", "init_config", "initial", "interrupt", "model", "outdir", "output",
             "progress", "quality", "recenter", "runlog", "saving", "scaling", "scaling_check", "scaling_tiles",
             "slices", "speedtest", "tiff", "tiles", "tracker_images", "trackers", "validation",
             "physics.fidelity", "data.batches", "reconstruction.model", "reconstruction.row_adam",
             "reconstruction.multislice_auto", "speed.scaling", "speed.scaling_check", "speed.scaling_tiles",
             "speed.gpu_cases", "speed.link_check", "speed.operators")
# the layers, bottom up: a module imports only from its own layer or the ones below
LAYERS = [("errors", "version", "command_line"), ("physics", "config"), ("data",), ("results", "interop"),
          ("watch",), ("optim",), ("quantities", "extend"), ("reconstruction",), ("speed",), ("tune",), ("commands",), ("run",)]
TOP = len(LAYERS) - 1  # the entry points: the front door ``ptyacc`` and ``python -m ptyacc.run``


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path, known: set[str]) -> set[str]:
    """The modules of the package that ``path`` imports anywhere in it (top level, inside
    functions, under TYPE_CHECKING): a cycle through a lazy import is a cycle of the design."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
    return {module for module in found if module in known and module != name}


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: the package's modules it imports} for every module under ``root``."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    return {name: imports_of(path, root, set(paths)) for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] when the graph has none (depth-first search)."""
    state, stack = {}, []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


def layer_of(module: str) -> int | None:
    """The layer of a module of ptyacc (a folder's ``__main__`` is in its folder's layer; the front
    door ``ptyacc`` at the top); None for one that no layer names."""
    parts = module.split(".")
    if len(parts) < 2:
        return TOP
    return next((depth for depth, names in enumerate(LAYERS) if parts[1] in names), None)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a layer above its own, as 'a -> b'."""
    return [f"{a} -> {b}" for a, targets in sorted(graph.items()) for b in sorted(targets)
            if layer_of(b) is None or layer_of(a) is None or layer_of(b) > layer_of(a)]


def is_alias(path: Path) -> bool:
    """Whether the module only keeps another's path alive: its docstring says so, it puts another
    module in ``sys.modules`` under its own name, or (not a package's ``__init__`` nor a
    ``__main__``) it defines nothing of its own, only imports."""
    tree = ast.parse(path.read_text())
    if (ast.get_docstring(tree) or "").startswith("Kept for the old path"):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) and "modules" in ast.unparse(t.value)
                                                and "__name__" in ast.unparse(t.slice) for t in node.targets):
            return True
    if path.name in ("__init__.py", "__main__.py"):
        return False
    own = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
           or (isinstance(node, (ast.Assign, ast.AnnAssign)) and "__all__" not in ast.unparse(node))]
    return not own


@pytest.fixture(scope="module")
def graph():
    return import_graph(PACKAGE)


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import(tmp_path):
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text('"""A package."""\n')
    (root / "a.py").write_text("from pkg.b import f\n")
    (root / "b.py").write_text("def f():\n    from pkg import c\n")
    (root / "c.py").write_text("from . import a\n")
    graph = import_graph(root)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    (root / "c.py").write_text('"""No way back."""\n')
    assert find_cycle(import_graph(root)) == []


def test_no_import_cycle_inside_ptyacc(graph):
    assert len(graph) > 80 and "ptyacc.reconstruction.engine" in graph["ptyacc"]
    assert find_cycle(graph) == []


def test_layers_point_down(graph):
    """Every module sits in a layer and imports only from its own or those below (lazy and
    type-checking imports included): the watch below the run it watches (the trackers read the
    run's objects through protocols of their own); the optimiser machinery below the quantities, which
    build their own groups from it, and the quantities and their model below the run that gathers them;
    the tuning verb below the command line."""
    assert [m for m in graph if layer_of(m) is None] == []
    assert upward_imports(graph) == []
    assert layer_of("ptyacc.watch.trackers") < layer_of("ptyacc.reconstruction.hooks")
    assert layer_of("ptyacc.optim.groups") < layer_of("ptyacc.quantities.object") < layer_of("ptyacc.reconstruction.engine")
    assert layer_of("ptyacc.tune.__main__") < layer_of("ptyacc.commands.cli")


def test_the_layer_rule_finds_an_upward_import():
    graph = {"ptyacc.watch.trackers": {"ptyacc.reconstruction.groups", "ptyacc.physics.chain"},
             "ptyacc.tune.__main__": {"ptyacc.commands.cli"}, "ptyacc.commands.cli": {"ptyacc.tune.command"},
             "ptyacc.reconstruction.hooks": {"ptyacc.watch.trackers"}, "ptyacc.speed.new": {"ptyacc.engine"},
             "ptyacc.quantities.object": {"ptyacc.reconstruction.groups", "ptyacc.optim.descent"},
             "ptyacc.optim.groups": {"ptyacc.quantities.model"}, "ptyacc.reconstruction.groups": {"ptyacc.quantities.model"}}
    assert upward_imports(graph) == ["ptyacc.optim.groups -> ptyacc.quantities.model",
                                     "ptyacc.quantities.object -> ptyacc.reconstruction.groups",
                                     "ptyacc.speed.new -> ptyacc.engine",  # a module no layer names
                                     "ptyacc.tune.__main__ -> ptyacc.commands.cli",
                                     "ptyacc.watch.trackers -> ptyacc.reconstruction.groups"]


def test_every_module_says_its_job_in_a_docstring():
    missing = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
               if len((ast.get_docstring(ast.parse(p.read_text())) or "").split()) < 4]
    assert missing == []


def test_no_module_only_keeps_an_old_path_alive():
    """Import from the real module: the package is 0.x, its API is ``ptyacc/__init__.py``'s names
    and the command line. The deleted forwarders stay deleted, and no new one appears."""
    import importlib.util

    aliases = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py")) if is_alias(p)]
    assert aliases == []
    assert [old for old in OLD_PATHS if importlib.util.find_spec(f"ptyacc.{old}") is not None] == []
    re_exported = [f"{p.relative_to(PACKAGE)}:{n}" for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__init__.py"
                   for n, line in enumerate(p.read_text().splitlines(), 1) if "noqa: F401" in line]
    assert re_exported == []  # a name imported only to be offered again under this module


def test_the_alias_finder_finds_each_kind(tmp_path):
    kinds = {"moved.py": '"""Kept for the old path ``pkg.moved``."""\n',
             "swap.py": '"""Another name."""\nimport sys\nfrom pkg import real\nsys.modules[__name__] = real\n',
             "names.py": '"""Names of another."""\nfrom pkg.real import f, g\n\n__all__ = ["f", "g"]\n'}
    for name, text in kinds.items():
        (tmp_path / name).write_text(text)
        assert is_alias(tmp_path / name), name
    (tmp_path / "real.py").write_text('"""A real one."""\nfrom math import pi\n\nTAU = 2 * pi\n')
    (tmp_path / "__main__.py").write_text('"""An entry."""\nfrom pkg.real import main\n')
    assert not is_alias(tmp_path / "real.py") and not is_alias(tmp_path / "__main__.py")


def test_the_documented_api_and_entry_points_import():
    import ptyacc
    from ptyacc.commands.cli import cli
    from ptyacc.run import run_main
    from ptyacc.tune.command import main as tune_main

    assert all(hasattr(ptyacc, name) for name in ptyacc.__all__) and callable(run_main) and callable(tune_main)
    assert {"run", "tune", "init", "info", "bench", "speedtest", "convert"} <= set(cli.commands)
