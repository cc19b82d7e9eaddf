"""No import cycles among swarm's modules (every import statement, at any depth, counts), and
none of them imports the lab (`lab/`: experiments and benchmarks, which import `swarm`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def module_graph() -> dict[str, set[str]]:
    """Module name -> the swarm modules (and packages) it imports."""
    files = {}
    for path in (ROOT / "swarm").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    graph = {}
    for name, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
                deps |= {f"{node.module}.{alias.name}" for alias in node.names}
        # Importing a.b.c runs the packages a and a.b first.
        deps |= {d.rsplit(".", k)[0] for d in deps for k in range(1, d.count(".") + 1)}
        graph[name] = {d for d in deps if d in files and d != name and not name.startswith(d + ".")}
    return graph


def imported_modules(source: str) -> set[str]:
    """Every module an import statement in source names (absolute imports, at any depth)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def lab_imports(root: Path) -> list[str]:
    """'file: module' for each import of the lab by a module under root/swarm."""
    return sorted(
        f"{path.relative_to(root)}: {module}"
        for path in (root / "swarm").rglob("*.py")
        for module in imported_modules(path.read_text(encoding="utf-8"))
        if module == "lab" or module.startswith("lab.")
    )


def test_the_product_imports_nothing_from_the_lab():
    assert (ROOT / "lab" / "__init__.py").is_file()
    assert lab_imports(ROOT) == []


def test_the_lab_check_sees_an_import(tmp_path):
    (tmp_path / "swarm").mkdir()
    (tmp_path / "swarm" / "a.py").write_text("def f():\n    from lab.experiment import ARMS\n")
    (tmp_path / "swarm" / "b.py").write_text("import lab\nimport laboratory\n")
    assert lab_imports(tmp_path) == ["swarm/a.py: lab.experiment", "swarm/b.py: lab"]


def cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> start, if there is one (depth-first, iterative)."""
    stack = [(start, [start])]
    seen = set()
    while stack:
        node, path = stack.pop()
        for dep in graph[node]:
            if dep == start:
                return [*path, start]
            if dep not in seen:
                seen.add(dep)
                stack.append((dep, [*path, dep]))
    return None


def test_no_module_imports_itself_through_others():
    graph = module_graph()
    assert "swarm.wire" in graph and "swarm.verify.gate" in graph
    cycles = [c for c in (cycle_from(graph, name) for name in sorted(graph)) if c]
    assert cycles == []


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle_from(graph, "a") == ["a", "b", "c", "a"] and cycle_from(graph, "d") is None


# The packages' layers, lowest first: a package imports only packages of lower layers (a
# top-level module such as `swarm.batch_choice` counts as a package). docs/ARCHITECTURE.md
# draws the same stack.
LAYERS = (
    ("core",),
    ("tasks",),
    ("wire", "policy", "ledger"),
    ("p2p", "batch_choice"),
    ("experience", "monitor"),
    ("config",),
    ("verify",),
    ("exchange", "sync"),
    ("node",),
    ("ops",),
    ("cli",),
)


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the other packages its modules import."""
    packages: dict[str, set[str]] = {}
    for name, deps in graph.items():
        own = package_of(name)
        if own is None:
            continue
        packages.setdefault(own, set())
        packages[own] |= {p for p in map(package_of, deps) if p is not None and p != own}
    return packages


def test_packages_import_each_other_in_no_cycle():
    packages = package_graph(module_graph())
    assert {"core", "node", "exchange", "sync", "ops", "monitor"} <= set(packages)
    cycles = [c for c in (cycle_from(packages, name) for name in sorted(packages)) if c]
    assert cycles == []


def test_every_package_imports_only_lower_layers():
    packages = package_graph(module_graph())
    layer = {name: level for level, names in enumerate(LAYERS) for name in names}
    assert set(packages) == set(layer), "a package missing from LAYERS (or one gone)"
    upward = sorted(
        f"{name} -> {dep}"
        for name, deps in packages.items()
        for dep in deps
        if layer[dep] >= layer[name]
    )
    assert upward == []


def test_the_package_graph_sees_a_package_cycle():
    graph = {
        "swarm.a.x": {"swarm.b.y"},
        "swarm.b.y": set(),
        "swarm.b.z": {"swarm.a"},
        "swarm.a": set(),
    }
    packages = package_graph(graph)
    assert packages == {"a": {"b"}, "b": {"a"}}
    assert cycle_from(packages, "a") == ["a", "b", "a"]


def init_code(source: str) -> list[str]:
    """What a package's __init__ holds beyond its docstring, imports, `__all__`, `__version__`
    and a lazy re-export table (`_EXPORTS` with the PEP 562 `__getattr__` that reads it)."""
    allowed_names = {"__all__", "__version__", "_EXPORTS"}
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) and t.id in allowed_names for t in targets):
                continue
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            continue
        found.append(f"line {node.lineno}: {type(node).__name__}")
    return found


def test_package_inits_hold_only_re_exports():
    code = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "swarm").rglob("__init__.py"))
        if (found := init_code(path.read_text(encoding="utf-8")))
    }
    assert code == {}


def test_the_init_check_sees_code():
    assert init_code('"""doc"""\nimport x\n__all__ = ["x"]\n') == []
    assert init_code("def helper():\n    pass\nX = 1\n") == [
        "line 1: FunctionDef",
        "line 3: Assign",
    ]
