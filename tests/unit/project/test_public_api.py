"""Tests and scripts use public APIs only: no private member of another module's object.

A private name starts with one underscore and is not a dunder. What counts as using one:

- an attribute `x._name` where `x` is not `self` or `cls` (a class's own members are its
  business), including `module._name`;
- `from module import _name`;
- naming it in a string: `getattr(x, "_name")`, `setattr`, `delattr`, `hasattr`,
  `monkeypatch.setattr(x, "_name", ...)` or `monkeypatch.setattr("pkg.mod._name", ...)`.

Only the standard library is taken at its word: its documented underscore functions
(`os._exit` in a forked child) are reached through a module imported by name, and are
not flagged. Everything else, this project's objects and third-party ones alike, is.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHECKED = ("tests", "scripts")
NAME_CALLS = {"getattr", "setattr", "delattr", "hasattr"}
PATCH_CALLS = {"setattr", "delattr"}  # monkeypatch.setattr / monkeypatch.delattr


@dataclass(frozen=True)
class Access:
    path: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.code}"


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def is_stdlib(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in sys.stdlib_module_names


def stdlib_aliases(tree: ast.AST) -> set[str]:
    """Names bound to standard-library modules by `import x` / `import x.y as z`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if is_stdlib(alias.name):
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def string_target(call: ast.Call) -> str | None:
    """The private name a getattr-like or monkeypatch call names in a string, if any."""
    func = call.func
    by_name = isinstance(func, ast.Name) and func.id in NAME_CALLS
    by_patch = isinstance(func, ast.Attribute) and func.attr in PATCH_CALLS
    if not (by_name or by_patch):
        return None
    for arg in call.args[:2]:
        text = arg.value if isinstance(arg, ast.Constant) else None
        if not isinstance(text, str):
            continue
        if any(is_private(part) for part in text.split(".")):
            return text
    return None


def private_accesses(source: str, path: str = "<source>") -> list[Access]:
    """Every use of another module's private member in `source` (see the module docstring)."""
    tree = ast.parse(source)
    stdlib = stdlib_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Name) and base.id in stdlib:
                continue
            found.append(Access(path, node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and not is_stdlib(node.module):
            for alias in node.names:
                if is_private(alias.name):
                    code = f"from {node.module} import {alias.name}"
                    found.append(Access(path, node.lineno, code))
        elif isinstance(node, ast.Call) and (name := string_target(node)) is not None:
            found.append(Access(path, node.lineno, f"{ast.unparse(node.func)}(... {name!r} ...)"))
    return sorted(found, key=lambda a: a.line)


def checked_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in CHECKED for p in (root / folder).rglob("*.py"))


def test_the_rule_flags_private_members_of_other_objects():
    flagged = private_accesses(
        "import os\n"
        "from swarm.policy import delta\n"
        "from swarm.p2p.transport import _helper\n"
        "node._validate\n"
        "node.trainer._logprobs(samples)\n"
        "delta._parse(blob)\n"
        "getattr(node, '_stop')\n"
        "monkeypatch.setattr(delta, '_put', fake)\n"
        "monkeypatch.setattr('swarm.policy.delta._put', fake)\n"
    )
    assert [a.line for a in flagged] == [3, 4, 5, 6, 7, 8, 9]


def test_the_rule_leaves_own_members_dunders_and_the_standard_library_alone():
    assert (
        private_accesses(
            "import os\n"
            "import os.path as osp\n"
            "from __future__ import annotations\n"
            "class Peer:\n"
            "    def run(self):\n"
            "        self._stop.set()\n"
            "    @classmethod\n"
            "    def make(cls):\n"
            "        return cls._default\n"
            "os._exit(0)\n"
            "osp._joinrealpath\n"
            "node.__class__.__name__\n"
            "getattr(node, 'peer_id')\n"
            "monkeypatch.setattr(node, 'run_round', fake)\n"
            "text = 'node._validate'\n"
        )
        == []
    )


def test_an_alias_of_a_project_module_is_not_the_standard_library():
    # `import swarm.node as os` would otherwise hide behind the name of a stdlib module
    assert private_accesses("import swarm.node as os\nos._private\n") != []


def test_tests_and_scripts_use_public_apis_only():
    found = []
    for path in checked_files():
        found += private_accesses(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "private members of other modules' objects:\n" + "\n".join(map(str, found))
