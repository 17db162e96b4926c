"""Write ``docs/reference/configuration.md`` from the typed config schemas.

Every command validates its config with dataclasses before any work; this script walks them and
writes one table per schema: each key with its type (as the source writes it), its default, the
values it accepts where the schema names them (a ``Literal``, or a ``self.<key> in CHOICES`` /
``check(..., self.<key>, CHOICES)`` test against a module-level tuple), and its documentation (the
``#:`` comment above the field, else the class docstring's ``Attributes`` entry, else the comment
at the end of its line, else the comment the command's YAML file in ``cbm/conf/`` gives the key).

    python docs/gen_config_reference.py           # rewrite the page
    python docs/gen_config_reference.py --check   # exit 1 if the committed page differs

``tests/core/test_docs.py`` runs the check and that every field of every schema is on the page.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import html
import importlib
import inspect
import io
import json
import re
import sys
import tokenize
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # griffe_rst, beside this file
from griffe_rst import ROLE  # noqa: E402  (the API pages' reST-role rewrite)

OUT = ROOT / "docs" / "reference" / "configuration.md"

#: (group title, how it is set, [(key prefix, "module:Class")...]); every schema a command reads.
GROUPS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("cbm-train", "`conf/train.yaml`; `cbm-train key=value`", [
        ("", "cbm.config.train:TrainConfig"),
        ("trainer.", "cbm.config.train:TrainerConfig"),
        ("logger.", "cbm.config.train:LoggerConfig"),
        ("logger.wandb.", "cbm.config.train:WandbConfig"),
        ("interventions.", "cbm.config.train:OracleConfig"),
    ]),
    ("Data: robots", "`data=robot`, `robot_paper`, `robot_v04` (`conf/data/`)", [
        ("data.", "synthetic.robot.config:RobotConfig"),
    ]),
    ("Data: Sudoku", "`data=sudoku`, `sudoku_10px`, `sudoku_18px`, `sudoku_18px_paper`, `sudoku_50px`", [
        ("data.", "synthetic.sudoku.config:SudokuConfig"),
    ]),
    ("Models", "`model=<name>` (`conf/model/`); each architecture's schema extends `ModelConfig`", [
        ("model.", "cbm.models.config:ModelConfig"),
        ("model.backbone.", "cbm.models.config:BackboneConfig"),
        ("model.head.", "cbm.models.config:HeadConfig"),
        ("model.optim.", "cbm.models.config:OptimConfig"),
        ("model.", "cbm.models.config:CEMConfig"),
        ("model.", "cbm.models.config:ProbCBMConfig"),
        ("model.", "cbm.models.config:ECBMConfig"),
        ("model.", "cbm.models.config:HybridCBMConfig"),
        ("model.", "cbm.models.config:StochasticCBMConfig"),
        ("model.", "cbm.models.config:IntCEMConfig"),
        ("model.", "cbm.models.config:DCRConfig"),
    ]),
    ("cbm-intervene", "`conf/intervene.yaml`", [
        ("", "cbm.config.intervene:InterveneConfig"),
        ("encoding.", "cbm.config.intervene:EncodingConfig"),
    ]),
    ("cbm-automate", "`conf/automate.yaml`", [("", "cbm.config.automate:AutomateConfig")]),
    ("Policies and interveners", "`policy.<name>.<key>`, `intervener.<name>.<key>` (`conf/policy/`, `conf/intervener/`)",
     []),  # filled from the registry
    ("cbm-experiment", "a preset `conf/experiment/<name>.yaml`; `cbm-experiment +experiment=<name> key=value`", [
        ("", "cbm.config.experiment:ExperimentConfig"),
    ]),
    ("cbm-data", "`conf/data_cli.yaml`", [("", "cbm.experiments.data_cli:DataCliConfig")]),
    ("cbm-concepts", "`conf/concepts.yaml`", [("", "cbm.vlm.apps.concepts:ConceptsConfig")]),
    ("Chat clients", "`client=openai|openrouter|local` and wherever a command takes a client (`conf/client/`)", [
        ("", "cbm.vlm.config:ClientConfig"),
    ]),
    ("cbm-edct", "`conf/edct.yaml`, `+edct=<preset>`", [("", "cbm.vlm.edct.config:EDCTConfig")]),
    ("cbm-finetune", "`conf/finetune.yaml`, `finetune=<preset>`", [("", "cbm.vlm.finetune.config:FinetuneConfig")]),
    ("cbm-icl", "`conf/icl.yaml`", [("", "cbm.vlm.icl.config:ICLConfig")]),
    ("cbm-vlm-zoo", "`conf/zoo.yaml`", [("", "cbm.vlm.zoo.config:ZooConfig")]),
]

#: group title -> the YAML files of ``cbm/conf`` whose keys (at the root of the file, or under its
#: ``# @package``) are that group's, for the comments that document them.
GROUP_YAML: dict[str, tuple[str, ...]] = {
    "cbm-train": ("train.yaml", "trainer/*.yaml", "logger/*.yaml", "model_trainer/*.yaml", "tune/*.yaml"),
    "Data: robots": ("data/robot*.yaml",), "Data: Sudoku": ("data/sudoku*.yaml",), "Models": ("model/*.yaml",),
    "cbm-intervene": ("intervene.yaml", "logger/*.yaml"), "cbm-automate": ("automate.yaml", "logger/*.yaml"),
    "Policies and interveners": ("policy/*.yaml", "intervener/*.yaml"),
    "cbm-experiment": ("experiment.yaml", "experiment/*.yaml"), "cbm-data": ("data_cli.yaml",), "cbm-concepts": ("concepts.yaml",),
    "Chat clients": ("client/*.yaml",), "cbm-edct": ("edct.yaml", "edct/*.yaml"), "cbm-finetune": ("finetune.yaml", "finetune/*.yaml"),
    "cbm-icl": ("icl.yaml",), "cbm-vlm-zoo": ("zoo.yaml", "logger/*.yaml"),
}  # fmt: skip
CONF = ROOT / "cbm" / "conf"
#: The meaning of a key no schema or config file documents, where its name says it the same way
#: everywhere (a key documented in place keeps its own text).
GENERIC: dict[str, str] = {
    "seed": "random seed of this part of the run (same seed, same numbers)",
    "batch_size": "examples per training step", "eval_batch_size": "examples per forward pass when only evaluating",
    "output_dir": "where the run writes its outputs (the Hydra run directory by default)",
    "cache_dir": "where generated data and other reusable results are cached (null: no cache)",
    "n_train": "training examples", "n_test": "test examples", "n_calib": "calibration examples (selective prediction)",
    "lr": "learning rate", "epochs": "passes over the training data", "weight_decay": "AdamW weight decay",
    "dropout": "dropout probability", "hidden": "hidden width", "layers": "number of layers", "heads": "attention heads",
    "name": "registered name of the component", "project": "W&B project", "entity": "W&B entity (team or user; null: your default)",
    "tags": "W&B run tags", "notes": "W&B run notes", "bootstrap": "bootstrap settings of the confidence intervals",
    "n_resamples": "bootstrap resamples", "confidence": "confidence level of the intervals",
    "max_new_tokens": "longest answer generated, in tokens", "temperature": "sampling temperature (0: greedy)",
    "max_tokens": "longest reply requested from the chat model, in tokens", "timeout_s": "seconds before a request is abandoned",
    "r": "LoRA rank", "alpha": "LoRA scaling (alpha / r multiplies the update)",
}  # fmt: skip

#: Modules whose dataclasses are config schemas (the test checks each one is on the page).
SCHEMA_MODULES = (
    "cbm.config.train", "cbm.config.intervene", "cbm.config.automate", "cbm.config.experiment",
    "cbm.models.config", "synthetic.robot.config", "synthetic.sudoku.config",
    "cbm.experiments.data_cli", "cbm.vlm.apps.concepts",
    "cbm.vlm.config", "cbm.vlm.edct.config", "cbm.vlm.finetune.config", "cbm.vlm.icl.config", "cbm.vlm.zoo.config",
)


def load(ref: str) -> type:
    mod, _, name = ref.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def registry_schemas() -> list[tuple[str, type]]:
    """``(prefix, Config)`` of every registered policy and intervener."""
    from cbm.interventions import registry

    out = []
    for kind in registry.KINDS:
        for name in registry.names(kind):
            cls = registry.component_class(kind, name)
            out.append((f"{kind}.{name}.", cls.Config))
    return out


def module_schemas() -> list[type]:
    """Every dataclass defined in :data:`SCHEMA_MODULES`, in source order."""
    out = []
    for mod in SCHEMA_MODULES:
        m = importlib.import_module(mod)
        for _, obj in inspect.getmembers(m, inspect.isclass):
            if dataclasses.is_dataclass(obj) and obj.__module__ == mod:
                out.append(obj)
    return sorted(out, key=lambda c: (c.__module__, inspect.getsourcelines(c)[1]))


def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# --- documentation of a field -----------------------------------------------------------------


def _class_node(cls: type) -> tuple[ast.ClassDef, list[str], int]:
    lines, start = inspect.getsourcelines(cls)
    src = "".join(lines)
    indent = len(lines[0]) - len(lines[0].lstrip())
    src = "\n".join(ln[indent:] if ln.strip() else ln for ln in src.splitlines())
    node = ast.parse(src).body[0]
    assert isinstance(node, ast.ClassDef)
    return node, src.splitlines(), start


def _comments(src_lines: list[str]) -> dict[int, str]:
    """Line number (1-based, in the class source) -> the comment on it."""
    out = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO("\n".join(src_lines) + "\n").readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string
    except (tokenize.TokenError, IndentationError):
        pass
    return out


def _attributes_section(doc: str | None) -> dict[str, str]:
    """``name : text`` entries of a NumPy-style ``Attributes`` section."""
    if not doc:
        return {}
    lines = inspect.cleandoc(doc).splitlines()
    out: dict[str, str] = {}
    try:
        i = next(i for i, ln in enumerate(lines) if ln.strip() == "Attributes" and lines[i + 1].strip().startswith("---"))
    except (StopIteration, IndexError):
        return out
    current: list[str] = []
    for ln in lines[i + 2 :]:
        if not ln.strip():
            continue
        if re.match(r"^\S.*?\s:\s", ln):
            for entry in re.split(r";\s+(?=\w+\s:\s)", ln):  # "blur : ...; noise : ..."
                names, _, text = entry.partition(" : ")
                current = []
                for n in names.split(","):
                    out[n.strip()] = text.strip()
                    current.append(n.strip())
        elif ln.startswith((" ", "\t")) and current:
            for n in current:
                out[n] += " " + ln.strip()
        else:
            break
    return out


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its documentation, for ``cls`` and its dataclass bases."""
    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        node, src, _ = _class_node(klass)
        comments = _comments(src)
        attrs = _attributes_section(klass.__doc__)
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            name = stmt.target.id
            above, ln = [], stmt.lineno - 1
            while ln >= 1 and src[ln - 1].strip().startswith("#:"):
                above.insert(0, src[ln - 1].strip()[2:].strip())
                ln -= 1
            trailing = comments.get(stmt.end_lineno or stmt.lineno, "")
            if above:
                docs[name] = " ".join(above)
            elif name in attrs:
                docs[name] = attrs[name]
            elif trailing and not trailing.startswith("# fmt"):
                docs[name] = trailing.lstrip("#").strip()
            elif name not in docs:
                docs[name] = ""
    return docs


def yaml_comments(path: Path) -> dict[str, str]:
    """Dotted key -> its comment in one config file: the comment at the end of the key's line, else
    the comment lines right above it. Keys are prefixed with the file's ``# @package`` (its folder
    when there is none; nothing for ``_global_`` and the top-level files)."""
    lines = path.read_text().splitlines()
    package = re.match(r"#\s*@package\s+(\S+)", lines[0]) if lines else None
    root = package.group(1) if package else (path.parent.name if path.parent != CONF else "")
    root = "" if root == "_global_" else root
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    above: list[str] = []
    for line in lines:
        text = line.strip()
        if text.startswith("#") and not text.startswith("# @package"):
            above.append(text.lstrip("#").strip())
            continue
        m = re.match(r"^(\s*)([A-Za-z_][\w-]*):(.*)$", line)
        if not m:
            above = []
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(2)))
        key = ".".join([root] * bool(root) + [k for _, k in stack])
        trailing = re.search(r"\s#\s?(.*)$", m.group(3))
        doc = trailing.group(1).strip() if trailing else " ".join(above)
        above = []
        if doc and key not in out:
            out[key] = doc
    return out


def group_yaml_docs(title: str) -> dict[str, str]:
    """Dotted key -> comment over every config file of one group (:data:`GROUP_YAML`; first file wins)."""
    out: dict[str, str] = {}
    for pattern in GROUP_YAML.get(title, ()):
        for path in sorted(CONF.glob(pattern)):
            for k, v in yaml_comments(path).items():
                out.setdefault(k, v)
    return out


# --- allowed values ---------------------------------------------------------------------------


def _choices(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        value = list(value)
    if isinstance(value, (frozenset, set)):
        value = sorted(value, key=str)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def allowed_values(cls: type) -> dict[str, list[Any]]:
    """Field name -> the values the schema accepts, where its code names them."""
    out: dict[str, list[Any]] = {}
    hints = {}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 (a forward reference the module cannot resolve: no Literal info)
        pass
    for name, hint in hints.items():
        if typing.get_origin(hint) is typing.Literal:
            out[name] = list(typing.get_args(hint))
    for klass in [k for k in cls.__mro__ if dataclasses.is_dataclass(k)]:
        module = sys.modules[klass.__module__]
        node, _, _ = _class_node(klass)

        def resolve(expr: ast.AST, module=module, klass=klass) -> list[Any] | None:
            if isinstance(expr, ast.Name):
                return _choices(getattr(module, expr.id, None))
            if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in ("self", klass.__name__):
                return _choices(getattr(klass, expr.attr, None))
            if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
                try:
                    return _choices(ast.literal_eval(expr))
                except ValueError:
                    return None
            return None

        for sub in ast.walk(node):
            if isinstance(sub, ast.Compare) and len(sub.ops) == 1 and isinstance(sub.ops[0], (ast.In, ast.NotIn)):
                name = _self_attr(sub.left)
                vals = resolve(sub.comparators[0])
                if name and vals and name not in out:
                    out[name] = vals
            elif isinstance(sub, ast.Call):
                names = [n for n in map(_self_attr, sub.args) if n]
                lists = [v for v in map(resolve, [a for a in sub.args if not _self_attr(a)]) if v]
                if len(names) == 1 and len(lists) == 1 and names[0] not in out:
                    out[names[0]] = lists[0]
    fields = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in out.items() if k in fields}


# --- rendering --------------------------------------------------------------------------------


def fmt_value(v: Any) -> str:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return f"`{type(v).__name__}` defaults"
    try:
        text = json.dumps(v, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(v)
    if isinstance(v, str):
        text = v if v else '""'
    if len(text) > 80:
        text = text[:77] + "..."
    return code(text)


def default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return fmt_value(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        try:
            return fmt_value(f.default_factory())  # type: ignore[misc]
        except Exception:  # noqa: BLE001
            return "(computed)"
    return "required"


def code(text: str) -> str:
    """Inline code that may hold ``|`` (a Markdown table would split a backtick span there)."""
    text = " ".join(text.split())
    if "|" not in text:
        return f"`{text}`"
    return "<code>" + html.escape(text).replace("|", "&#124;") + "</code>"


#: An inline code span (Python-Markdown's tables keep a ``|`` inside one in its cell).
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _cell_prose(text: str) -> str:
    """Prose of a table cell: ``|`` escaped (a cell boundary otherwise), ``<`` as an entity (``<name>``
    would be eaten by the browser as an unknown tag)."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def cell(text: str) -> str:
    """One table cell: one line, reST roles as code spans (as the API pages show them), pipes and
    ``<`` escaped in the prose and left as they are inside code spans."""
    text = " ".join(ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1] if '`~' in m.group(0) else m.group(1)}`", text).split())
    out, pos = [], 0
    for m in CODE_SPAN.finditer(text):
        out += [_cell_prose(text[pos : m.start()]), m.group(0)]
        pos = m.end()
    return "".join(out) + _cell_prose(text[pos:])


def anchor(cls: type) -> str:
    return re.sub(r"[^a-z0-9]+", "-", qualname(cls).lower()).strip("-")


def table(prefix: str | None, cls: type, seen: dict[type, str], yaml_docs: dict[str, str] | None = None) -> list[str]:
    docs, allowed, yaml_docs = field_docs(cls), allowed_values(cls), yaml_docs or {}
    bases = [b for b in cls.__bases__ if dataclasses.is_dataclass(b)]
    where = "(inside other keys)" if prefix is None else (prefix or "(top level)")
    prefix = prefix or ""
    head = f"### `{where}` — `{cls.__name__}` {{#{anchor(cls)}}}"
    lines = [head, "", f"Schema: `{qualname(cls)}`" + (f" (extends `{bases[0].__name__}`)" if bases else "") + "."]
    first = inspect.getdoc(cls)
    if first and not first.startswith(cls.__name__ + "("):
        para = first.split("\n\n")[0]
        lines += ["", cell(para)]
    keys = [f for f in dataclasses.fields(cls) if not f.name.startswith("_")]
    if not keys:
        return lines + ["", "It has no keys of its own.", ""]
    lines += ["", "| key | type | default | allowed values | meaning |", "|---|---|---|---|---|"]
    sub = {p.rstrip(".").removesuffix("[]"): c for p, c in nested(cls)}
    for f in keys:
        ftype = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        vals = ", ".join(f"`{v}`" for v in allowed.get(f.name, []))
        doc = docs.get(f.name, "") or yaml_docs.get(prefix + f.name, "") or yaml_docs.get(f"client.{f.name}" if cls.__name__ == "ClientConfig" else "", "")
        inner = sub.get(f.name)
        if not doc and inner is not None:
            doc = f"its keys: [`{inner.__name__}`](#{anchor(inner)})"
        doc = doc or GENERIC.get(f.name, "")
        lines.append(f"| `{prefix}{f.name}` | {code(ftype)} | {default(f)} | {vals} | {cell(doc)} |")
    return lines + [""]


def nested(cls: type) -> list[tuple[str, type]]:
    """Dataclass-typed fields of ``cls`` (``name.``, the field's class)."""
    out = []
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            try:
                v = f.default_factory()  # type: ignore[misc]
            except Exception:  # noqa: BLE001
                continue
            if dataclasses.is_dataclass(v) and not isinstance(v, type):
                out.append((f"{f.name}.", type(v)))
                continue
        # a dataclass of the same module named in the annotation (``Stage | None``, ``list[Rule]``)
        module = sys.modules[cls.__module__]
        for word in re.findall(r"[A-Za-z_]\w*", str(f.type)):
            other = getattr(module, word, None)
            if inspect.isclass(other) and dataclasses.is_dataclass(other) and other is not cls:
                many = re.search(rf"(list|tuple|Sequence)\[{word}", str(f.type))
                out.append((f"{f.name}[]." if many else f"{f.name}.", other))
                break
    return out


def render() -> str:
    out = [
        "# Configuration reference",
        "",
        "Every key every command accepts, generated from the typed schemas the commands validate with",
        "(`python docs/gen_config_reference.py`; a test fails when this page and the schemas differ).",
        "A key is set on the command line as `key=value` (`data.image_size=64`), a group as",
        "`group=option` (`model=cem`); `--help` of each command lists its groups and options, and",
        "`--cfg job` prints the composed config. Defaults here are the schema's: a config file of the",
        "group (`cbm/conf/`) may set another value (the robot presets set `data.*`, each",
        "`conf/model/<name>.yaml` its architecture's keys). Allowed values are listed where the",
        "schema names them; other checks (ranges, paths) run too and fail in one line naming the key.",
        "",
    ]
    seen: dict[type, str] = {}
    groups = []
    for title, how, items in GROUPS:
        items = [(p, load(r)) for p, r in items]
        if title == "Policies and interveners":
            items = registry_schemas()
        groups.append((title, how, items))
    out += ["Groups: " + ", ".join(f"[{t}](#{re.sub(r'[^a-z0-9]+', '-', t.lower()).strip('-')})" for t, _, _ in groups), ""]
    for title, how, items in groups:
        yaml_docs = group_yaml_docs(title)
        out += [f"## {title} {{#{re.sub(r'[^a-z0-9]+', '-', title.lower()).strip('-')}}}", "", f"Set by {how}.", ""]
        queue = list(items)
        while queue:
            prefix, cls = queue.pop(0)
            if cls in seen:
                if seen[cls] != prefix:
                    out += [f"`{prefix}*`: the keys of [`{cls.__name__}`](#{anchor(cls)}).", ""]
                continue
            seen[cls] = prefix
            out += table(prefix, cls, seen, yaml_docs)
            listed = {c for _, c in queue} | set(seen)
            queue[0:0] = [(prefix + p, c) for p, c in nested(cls) if c not in listed]
    rest = [c for c in module_schemas() if c not in seen]
    if rest:
        out += ["## Other schemas {#other-schemas}", "", "Dataclasses of the schema modules used inside the keys above.", ""]
        for cls in rest:
            seen[cls] = ""
            out += table(None, cls, seen)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed page differs")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run python docs/gen_config_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
