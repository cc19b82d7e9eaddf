"""Guards on reasoning-gym scorers that would run a completion's text as Python code.

Some reasoning-gym scorers evaluate the answer a completion gives: `binary_matrix` (in the
SAPO mix), `spiral_matrix`, `n_queens` and `string_insertion` call Python's `eval` on it to
read a list, and the algebra and countdown scorers hand it to sympy's `parse_expr`, which
also ends in `eval`. A peer's completion is text of its choosing, so scoring it as is would
run the peer's code on this node. `guard_dataset` replaces, in the module of a dataset
about to be used, those calls with ones that only read what the scorer expects:

- `eval` becomes `literal_value`: Python literals only (`ast.literal_eval`: lists, numbers,
  strings), so `[[0, 1], [1, 0]]` still reads and `__import__('os')` is refused;
- sympy's `parse_expr` becomes `math_expression`: the same parser, given only text made of
  numbers, operators, parentheses, one-letter symbols and common function names (no
  underscores, quotes, brackets or attribute access), so no Python object is reachable.

A refused answer raises `ValueError`, which the scorers already count as a wrong answer
(score 0). Honest answers score as before. Time and memory are bounded elsewhere (the
verification worker, `swarm.verify.rescore_worker`): `9**9**9` is a legal expression.

Deliberately not here: building or caching datasets (`swarm.tasks.build`, `swarm.tasks.cache`).
"""

from __future__ import annotations

import ast
import re
import sys
import threading
import types
from typing import Any

MAX_LITERAL_CHARS = 65_536
MAX_EXPRESSION_CHARS = 2_000

# Modules whose scorers call the builtin `eval` on a completion's answer.
EVAL_SCORERS = frozenset(
    {
        "reasoning_gym.algorithmic.binary_matrix",
        "reasoning_gym.algorithmic.spiral_matrix",
        "reasoning_gym.algorithmic.string_insertion",
        "reasoning_gym.games.n_queens",
    }
)
# Modules whose scorers parse a completion's answer with sympy, and the name they use:
# a module global `parse_expr`, or the sympy module itself (`sp.parse_expr`).
SYMPY_SCORERS = {
    "reasoning_gym.games.puzzle24": "parse_expr",
    "reasoning_gym.games.countdown": "parse_expr",
    "reasoning_gym.algebra.polynomial_multiplication": "sp",
    "reasoning_gym.algebra.simple_integration": "sympy",
    "reasoning_gym.algebra.intermediate_integration": "sympy",
}

FUNCTION_NAMES = frozenset(
    "sin cos tan cot sec csc asin acos atan acot sinh cosh tanh asinh acosh atanh exp log ln "
    "sqrt cbrt Abs abs pi oo E I erf gamma".split()
)
_EXPRESSION_CHARS = re.compile(r"[0-9A-Za-z+\-*/^()., \t\n]*")
_NAME = re.compile(r"[A-Za-z]+")
_ATTRIBUTE = re.compile(r"[A-Za-z)]\s*\.|\.\s*[A-Za-z(]")

_lock = threading.Lock()
_guarded: set[str] = set()


def literal_value(text: Any, *_ignored: Any) -> Any:
    """What the scorers' `eval(answer)` may still return: a Python literal, nothing executed."""
    if not isinstance(text, str):
        raise ValueError("only text is read as a literal")
    if len(text) > MAX_LITERAL_CHARS:
        raise ValueError(f"answer longer than {MAX_LITERAL_CHARS} characters")
    return ast.literal_eval(text.strip())


def check_math_expression(text: str) -> None:
    """Raise `ValueError` unless `text` is a plain math expression (see the module docstring)."""
    if not isinstance(text, str):
        raise ValueError("only text is parsed as an expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    if not _EXPRESSION_CHARS.fullmatch(text):
        raise ValueError("expression holds characters other than numbers, operators and names")
    if _ATTRIBUTE.search(text):
        raise ValueError("expression uses attribute access")
    for name in _NAME.findall(text):
        if len(name) > 1 and name not in FUNCTION_NAMES:
            raise ValueError(f"unknown name {name[:20]!r} in expression")


def math_expression(parse):
    """sympy's `parse`, refusing text that is not a plain math expression."""

    def guarded(text, *args, **kwargs):
        check_math_expression(text)
        return parse(text, *args, **kwargs)

    guarded.__name__ = getattr(parse, "__name__", "parse_expr")
    return guarded


class _GuardedSympy(types.ModuleType):
    """The sympy module as one scorer module sees it: everything but `parse_expr` forwarded."""

    def __init__(self, sympy: types.ModuleType):
        super().__init__(sympy.__name__)
        self._sympy = sympy
        self.parse_expr = math_expression(sympy.parse_expr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sympy, name)


def guard_module(name: str) -> bool:
    """Install the guards in module `name` if it is a known evaluating scorer (once); True if
    it is one."""
    if name not in EVAL_SCORERS and name not in SYMPY_SCORERS:
        return False
    with _lock:
        if name in _guarded:
            return True
        module = sys.modules.get(name)
        if module is None:
            return True  # not imported: nothing of it can run yet
        if name in EVAL_SCORERS:
            vars(module)["eval"] = literal_value  # a module global shadows the builtin
        else:
            attribute = SYMPY_SCORERS[name]
            current = getattr(module, attribute)
            if attribute == "parse_expr":
                setattr(module, attribute, math_expression(current))
            else:
                setattr(module, attribute, _GuardedSympy(current))
        _guarded.add(name)
    return True


def guard_dataset(dataset: Any) -> Any:
    """Guard the scorer of `dataset` (its class's module and its bases'); returns `dataset`."""
    for cls in type(dataset).__mro__:
        guard_module(cls.__module__)
    return dataset
