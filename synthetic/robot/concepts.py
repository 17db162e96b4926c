"""Concept sets declared as data, and the small safe expression evaluator behind them.

A concept set is a YAML file (see ``concept_sets/``)::

    name: true
    description: ...
    concepts:
      - name: knees
        description: the robot has knee joints
        expr: knees

A concept is binary unless it says otherwise (``kind``):

- ``kind: categorical`` with ``values: {value: expr, ...}`` is one concept with several values (the
  foot sub-type as one 10-way concept). It becomes one 0/1 column per value, named
  ``<name>_<value>``; at most one value may hold for a robot (none holding is a value too: the
  model's implicit "none of these"). Models read the columns as one group (one softmax, one
  cross-entropy; an intervention reveals the whole group at once).
- ``kind: continuous`` is a number in [0, 1] (``expr: "arm_left / 5"``): one column, its value as it
  is (models fit it with a squared error).

``expr`` is a Python-syntax expression over the attribute names of
:data:`~synthetic.robot.attributes.EXPRESSION_NAMES`, evaluated vectorised over
numpy arrays by :func:`evaluate`. Allowed: integer/float/bool constants, names,
``+ - * / // %``, unary ``-``, comparisons (also chained), ``in`` / ``not in`` a
tuple or list of constants, logical ``& | ^ ~`` (and ``and or not``, which act
element-wise), and the functions ``abs``, ``minimum``, ``maximum``, ``where``.
Anything else (attribute access, subscripts, other calls, lambdas ...) is
rejected when the set is loaded, not when it is used.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cbm.core.safe_paths import check_component
from synthetic.robot.attributes import EXPRESSION_NAMES

CONCEPT_SET_DIR = Path(__file__).parent / "concept_sets"
#: Built-in concept sets, selected by ``RobotConfig.concept_set``.
BUILTIN_SETS: tuple[str, ...] = ("true", "fine", "llm", "human", "typed")

_BINOPS = {
    ast.Add: np.add,
    ast.Sub: np.subtract,
    ast.Mult: np.multiply,
    ast.Div: np.true_divide,
    ast.FloorDiv: np.floor_divide,
    ast.Mod: np.mod,
    ast.BitAnd: lambda a, b: np.logical_and(a, b),
    ast.BitOr: lambda a, b: np.logical_or(a, b),
    ast.BitXor: lambda a, b: np.logical_xor(a, b),
}
_CMPOPS = {
    ast.Eq: np.equal,
    ast.NotEq: np.not_equal,
    ast.Lt: np.less,
    ast.LtE: np.less_equal,
    ast.Gt: np.greater,
    ast.GtE: np.greater_equal,
}
_FUNCS = {"abs": np.abs, "minimum": np.minimum, "maximum": np.maximum, "where": np.where}


class ExpressionError(ValueError):
    """An expression uses syntax or names the evaluator does not allow."""


def _constants(node: ast.AST, expr: str) -> list:
    if not isinstance(node, ast.Tuple | ast.List):
        raise ExpressionError(f"'in' needs a tuple or list of constants in {expr!r}")
    vals = []
    for elt in node.elts:
        if not isinstance(elt, ast.Constant) or not isinstance(elt.value, int | float | bool):
            raise ExpressionError(f"'in' needs numeric constants in {expr!r}")
        vals.append(elt.value)
    return vals


def _eval(node: ast.AST, env: dict[str, np.ndarray], expr: str):
    if isinstance(node, ast.Expression):
        return _eval(node.body, env, expr)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool | int | float):
            return node.value
        raise ExpressionError(f"only numeric constants are allowed in {expr!r}")
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExpressionError(f"unknown name '{node.id}' in {expr!r}; known names: {sorted(env)}")
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, env, expr), _eval(node.right, env, expr))
    if isinstance(node, ast.UnaryOp):
        val = _eval(node.operand, env, expr)
        if isinstance(node.op, ast.Invert | ast.Not):
            return np.logical_not(val)
        if isinstance(node.op, ast.USub):
            return np.negative(val)
        if isinstance(node.op, ast.UAdd):
            return val
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, env, expr) for v in node.values]
        fn = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
        out = vals[0]
        for v in vals[1:]:
            out = fn(out, v)
        return out
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, expr)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            if isinstance(op, ast.In | ast.NotIn):
                part = np.isin(left, _constants(comp, expr))
                if isinstance(op, ast.NotIn):
                    part = np.logical_not(part)
                right = None
            elif type(op) in _CMPOPS:
                right = _eval(comp, env, expr)
                part = _CMPOPS[type(op)](left, right)
            else:
                raise ExpressionError(f"comparison {type(op).__name__} not allowed in {expr!r}")
            result = part if result is None else np.logical_and(result, part)
            left = right
        return result
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        return _FUNCS[node.func.id](*[_eval(a, env, expr) for a in node.args])
    raise ExpressionError(f"syntax '{type(node).__name__}' is not allowed in {expr!r}")


@lru_cache(maxsize=256)
def _parse(expr: str) -> ast.Expression:
    try:
        return ast.parse(expr, mode="eval")
    except SyntaxError as err:
        raise ExpressionError(f"cannot parse expression {expr!r}: {err.msg}") from None


def evaluate(expr: str, env: dict[str, np.ndarray]) -> np.ndarray:
    """Evaluate ``expr`` element-wise over the equal-length arrays in ``env``.

    >>> import numpy as np
    >>> evaluate("(arm_left >= 3) & elbows", {"arm_left": np.array([4, 1]), "elbows": np.array([1, 1])})
    array([ True, False])
    """
    n = len(next(iter(env.values()))) if env else 1
    return np.broadcast_to(np.asarray(_eval(_parse(expr), env, expr)), (n,))


def check_expression(expr: str, names: list[str] | None = None) -> None:
    """Raise :class:`ExpressionError` unless ``expr`` evaluates over ``names`` (default: all attributes)."""
    names = EXPRESSION_NAMES if names is None else names
    evaluate(expr, {name: np.zeros(2, dtype=np.int64) for name in names})


#: The kinds of concept a set may declare (``kind``; see the module doc).
CONCEPT_KINDS = ("binary", "categorical", "continuous")


@dataclass(frozen=True)
class Concept:
    """One concept column: a binary concept, a continuous one, or one value of a categorical concept
    (``group``: the categorical concept's name)."""

    name: str
    description: str
    expr: str
    kind: str = "binary"
    group: str | None = None


@dataclass(frozen=True)
class ConceptSet:
    name: str
    description: str
    concepts: tuple[Concept, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.concepts]

    def __len__(self) -> int:
        return len(self.concepts)

    @property
    def groups(self) -> dict[str, list[str]]:
        """The categorical concepts: ``{name: [its value columns]}``, in column order."""
        out: dict[str, list[str]] = {}
        for c in self.concepts:
            if c.group is not None:
                out.setdefault(c.group, []).append(c.name)
        return out

    @property
    def continuous(self) -> list[str]:
        """The continuous concepts' columns."""
        return [c.name for c in self.concepts if c.kind == "continuous"]

    def evaluate(self, table: dict[str, np.ndarray]) -> np.ndarray:
        """``float32 [N, m]`` concept matrix from an attribute table: 0/1 columns, continuous ones as
        their values (``ValueError`` outside [0, 1], or where two values of a categorical concept hold)."""
        cols = []
        for c in self.concepts:
            v = evaluate(c.expr, table)
            if c.kind == "continuous":
                v = v.astype(np.float64)
                if not np.isfinite(v).all() or v.min(initial=0.0) < 0 or v.max(initial=0.0) > 1:
                    raise ValueError(f"concept set {self.name}: continuous concept '{c.name}' ({c.expr}) must lie in [0, 1], "
                                     f"got values in [{np.nanmin(v):g}, {np.nanmax(v):g}]")  # fmt: skip
                cols.append(v)
            else:
                cols.append(v.astype(bool))
        out = np.stack(cols, axis=1).astype(np.float32)
        for group, members in self.groups.items():
            idx = [self.names.index(n) for n in members]
            both = int((out[:, idx].sum(1) > 1).sum())
            if both:
                raise ValueError(f"concept set {self.name}: categorical concept '{group}': more than one of its values holds for {both} robot(s)")
        return out

    def to_dict(self) -> dict:
        def one(c: Concept) -> dict:
            d = {"name": c.name, "description": c.description, "expr": c.expr}
            return d | ({"kind": c.kind} if c.kind != "binary" else {}) | ({"group": c.group} if c.group else {})

        return {"name": self.name, "description": self.description, "concepts": [one(c) for c in self.concepts]}


def concept_set_path(name_or_path: str) -> Path:
    """Path of a built-in set name or of a user ``.yaml`` file."""
    if name_or_path in BUILTIN_SETS:
        return CONCEPT_SET_DIR / f"{name_or_path}.yaml"
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise ValueError(f"concept-set file not found: {path}")
        if not path.is_file():
            raise ValueError(f"concept-set path is not a file: {path}")
        return path
    raise ValueError(
        f"unknown concept_set '{name_or_path}'; expected one of {list(BUILTIN_SETS)} or a path to a .yaml file"
    )


def load_concept_set(name_or_path: str) -> ConceptSet:
    """Load and validate a concept set (built-in name or YAML path)."""
    path = concept_set_path(name_or_path)
    return _load(str(path.resolve()), path.stat().st_mtime_ns)


@lru_cache(maxsize=32)
def _load(path: str, _mtime: int) -> ConceptSet:
    where = f"concept set {path}"
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{where}: not valid YAML{at} ({getattr(err, 'problem', None) or type(err).__name__})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{where}: unreadable ({type(err).__name__})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("concepts"), list) or not doc["concepts"]:
        raise ValueError(f"{where}: expected a mapping with a non-empty 'concepts' list")
    concepts: list[Concept] = []
    for i, item in enumerate(doc["concepts"]):
        concepts.extend(_columns(item, i, where))
    names = [c.name for c in concepts]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: duplicate concept names {sorted({n for n in names if names.count(n) > 1})}")
    return ConceptSet(str(doc.get("name", Path(path).stem)), str(doc.get("description", "")), tuple(concepts))


def _expression(expr: Any, what: str) -> str:
    try:
        check_expression(str(expr))
    except ExpressionError as err:
        raise ValueError(f"{what}: {err}") from None
    return str(expr)


def _columns(item: Any, i: int, where: str) -> list[Concept]:
    """The columns of one concept entry of a set file: one for a binary or continuous concept, one per
    value for a categorical one (module doc)."""
    kind = item.get("kind", "binary") if isinstance(item, dict) else None
    need = ("name", "values") if kind == "categorical" else ("name", "expr")
    if not isinstance(item, dict) or not set(need) <= set(item):
        raise ValueError(f"{where}: concept #{i} needs '{need[0]}' and '{need[1]}'")
    name = str(item["name"])
    check_component(name, f"{where}: concept name")  # names may become file names (figures, tables)
    if kind not in CONCEPT_KINDS:
        raise ValueError(f"{where}: concept '{name}': kind must be one of {list(CONCEPT_KINDS)}, got {kind!r}")
    description = str(item.get("description", ""))
    if kind != "categorical":
        return [Concept(name, description, _expression(item["expr"], f"{where}: concept '{name}'"), kind)]
    values = item["values"]
    if not isinstance(values, dict) or len(values) < 2:
        raise ValueError(f"{where}: categorical concept '{name}': 'values' must map at least two value names to expressions")
    out = []
    for value, expr in values.items():
        column = f"{name}_{value}"
        check_component(column, f"{where}: concept '{name}' value name")
        what = f"{where}: concept '{name}' value '{value}'"
        out.append(Concept(column, f"{description} = {value}" if description else f"{name} = {value}", _expression(expr, what), "binary", name))
    return out
