"""No import cycles among swarm's modules (every import statement, at any depth, counts)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
