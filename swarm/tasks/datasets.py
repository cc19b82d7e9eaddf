"""reasoning-gym datasets, loaded one at a time.

`import reasoning_gym` imports every one of its ~110 datasets and their dependencies
(matplotlib, cellpylib, magiccube, ...): about 100 MB and most of a second, for a node that
uses one or a few of them. Each dataset registers itself with `reasoning_gym.factory` when
its own module is imported, so importing just that module is enough to build it.

`create_dataset(name, **kwargs)` does that: it finds the module that registers `name` (a
scan of reasoning-gym's sources for `register_dataset(...)` calls, done once), imports it
with reasoning-gym's package `__init__` files for the top level and its categories held
back, and builds the dataset through `reasoning_gym.factory.create_dataset`, exactly as
`reasoning_gym.create_dataset` would. A held-back package completes itself on first use
(PEP 562 `__getattr__`), so other code importing `reasoning_gym` the usual way still gets
the whole library; if anything in the one-module path fails, the whole library is loaded
and the call retried. Names that no reasoning-gym source registers are refused without
loading anything (a peer cannot make a node import the whole library with a made-up name).

Deliberately not here: task specs, scoring or mixes (`swarm.tasks`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import re
import sys
import threading
import types
from pathlib import Path

PACKAGE = "reasoning_gym"
# Packages whose __init__ must run as usual: datasets import names from them.
_ALWAYS_WHOLE = frozenset({"coaching", "data"})
_REGISTER = re.compile(r"register_dataset\(\s*(?:[\"'](\w+)[\"']|(\w+))")
_CONSTANT = re.compile(r"^(\w+)\s*=\s*[\"'](\w+)[\"']", re.MULTILINE)
_lock = threading.RLock()


@functools.lru_cache(maxsize=1)
def _root() -> Path | None:
    spec = importlib.machinery.PathFinder.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def dataset_modules() -> dict[str, str]:
    """Dataset name -> the module that registers it, read from reasoning-gym's sources."""
    root = _root()
    if root is None:
        return {}
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8", errors="replace")
        if "register_dataset(" not in source or path.name == "factory.py":
            continue
        constants = dict(_CONSTANT.findall(source))
        module = ".".join((PACKAGE, *path.relative_to(root).with_suffix("").parts))
        for literal, constant in _REGISTER.findall(source):
            name = literal or constants.get(constant)
            if name and not module.endswith(".version_manager"):
                found.setdefault(name, module)
    return found


def dataset_names() -> frozenset[str]:
    """Every dataset name reasoning-gym registers (without importing any of them)."""
    return frozenset(dataset_modules())


def create_dataset(name: str, **kwargs):
    """`reasoning_gym.create_dataset(name, **kwargs)`, importing only that dataset's module.

    Raises ValueError for a name reasoning-gym does not register (as reasoning-gym does);
    any other error is the dataset's own, as from reasoning-gym.
    """
    module = dataset_modules().get(name)
    if module is None:
        raise ValueError(f"Dataset '{name}' not registered")
    with _lock:
        try:
            _hold_back_packages(module)
            importlib.import_module(module)
            factory = importlib.import_module(f"{PACKAGE}.factory")
            return factory.create_dataset(name, **kwargs)
        except ImportError:
            pass
        load_everything()
        return importlib.import_module(f"{PACKAGE}.factory").create_dataset(name, **kwargs)


def loaded_datasets() -> frozenset[str]:
    """The dataset names registered in this process so far."""
    factory = sys.modules.get(f"{PACKAGE}.factory")
    return frozenset(factory.DATASETS) if factory is not None else frozenset()


def load_everything() -> None:
    """Complete every held-back package, as a plain `import reasoning_gym` would have."""
    with _lock:
        held = [m for m in list(sys.modules.values()) if isinstance(m, _HeldBack)]
        for module in sorted(held, key=lambda m: -m.__name__.count(".")):  # categories first
            module.complete()
        importlib.import_module(PACKAGE)


class _HeldBack(types.ModuleType):
    """A package whose __init__ has not run yet; it runs on first use of a missing name."""

    def complete(self) -> None:
        spec = self.__dict__.get("__spec__")
        if self.__dict__.get("_completed") or spec is None:
            return
        self.__dict__["_completed"] = True
        self.__class__ = types.ModuleType  # type: ignore[assignment]  # a plain module from now on
        spec.loader.exec_module(self)

    def __getattr__(self, attr: str):
        missing = AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        if attr.startswith("__") or self.__dict__.get("_completed"):
            raise missing
        if importlib.machinery.PathFinder.find_spec(f"{self.__name__}.{attr}", self.__path__):
            raise missing  # a submodule: `from package import submodule` then imports just it
        with _lock:
            if self.__name__ == PACKAGE:
                load_everything()
            else:
                self.complete()
        return getattr(self, attr)


def _hold_back_packages(module: str) -> None:
    """Put the top package and `module`'s category in sys.modules without running their
    __init__, unless they are imported already."""
    parts = module.split(".")
    for depth in (1, 2):
        name = ".".join(parts[:depth])
        if depth == 2 and (len(parts) < 3 or parts[1] in _ALWAYS_WHOLE):
            return
        if name in sys.modules:
            continue
        parent = sys.modules[".".join(parts[: depth - 1])] if depth > 1 else None
        path = parent.__path__ if parent is not None else None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.submodule_search_locations is None:
            return
        package = importlib.util.module_from_spec(spec)
        package.__class__ = _HeldBack
        sys.modules[name] = package
        if parent is not None:
            setattr(parent, parts[depth - 1], package)
