"""``cbm-concepts``: let a (vision-)language model propose the concept vocabulary of the robot benchmark.

    cbm-concepts extract out=concepts/robot_vlm.yaml                  # conf/client/openai.yaml
    cbm-concepts extract out=vlm.yaml client=openrouter n_per_class=6 max_concepts=10
    cbm-train data.concept_set=vlm.yaml                                # train on what it proposed

The model sees ``n_per_class`` example images of every class in one request and answers with
concepts defined as expressions over the attribute vocabulary (:mod:`cbm.vlm.concept_extraction`);
the valid ones become a concept-set YAML file. Every setting is validated before the request,
so a typo costs no tokens and prints one line (``cbm-concepts: error: ...``, exit 2); an endpoint
that still fails after its retries exits 1.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cbm.core.common import CONF_DIR, clean_errors, dry_run, fail
from cbm.core.concurrency import stoppable
from cbm.core.validation import ConfigError, to_dataclass
from cbm.vlm.concept_extraction import (
    ExtractionResult,
    example_images,
    example_rows,
    extract_concepts,
    render_instruction,
    write_concept_set,
)
from synthetic.base import SPLITS
from synthetic.robot.attributes import EXPRESSION_NAMES

PROG = "cbm-concepts"
CONFIG_NAME = "concepts"
COMMANDS = ("extract",)
#: Exit code when the endpoint fails after its retries (bad input exits 2).
ENDPOINT_FAILED = 1
#: Width of the name column in the printed tables.
NAME_WIDTH = 28
#: Characters of the raw reply shown when nothing in it was usable.
REPLY_PREVIEW_CHARS = 300


@dataclass
class PromptConfig:
    """The prompt: an optional system turn and the instruction template (see ``conf/concepts.yaml``)."""

    #: System message sent before the user turn of images and instruction; ``null`` / empty: none.
    system: str | None = None
    instruction: str = ""


@dataclass
class ConceptsConfig:
    """Settings of ``cbm-concepts extract`` (``conf/concepts.yaml`` without ``client`` and ``data``)."""

    out: str | None = None
    name: str | None = None
    description: str | None = None
    n_per_class: int = 4
    max_concepts: int = 8
    split: str = "train"
    seed: int = 0
    cache_dir: str | None = ".cache/cbm"
    prompt: PromptConfig = field(default_factory=PromptConfig)
    vocabulary: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.out:
            raise ValueError("out: required (the concept-set file to write, e.g. out=concepts/robot_vlm.yaml)")
        if Path(self.out).suffix not in (".yaml", ".yml"):
            raise ValueError(f"out: must end in .yaml or .yml (a concept-set file), got '{self.out}'")
        if Path(self.out).is_dir():
            raise ValueError(f"out: '{self.out}' is a directory")
        if self.name is not None and not str(self.name).strip():
            raise ValueError("name: must not be empty (null: the stem of out)")
        if self.n_per_class < 1:
            raise ValueError(f"n_per_class: must be >= 1, got {self.n_per_class}")
        if self.max_concepts < 1:
            raise ValueError(f"max_concepts: must be >= 1, got {self.max_concepts}")
        if self.split not in SPLITS:
            raise ValueError(f"split: must be one of {list(SPLITS)}, got '{self.split}'")
        if self.seed < 0:
            raise ValueError(f"seed: must be >= 0, got {self.seed}")
        if not self.vocabulary:
            raise ValueError("vocabulary: must name at least one attribute (name: meaning)")
        unknown = sorted(set(self.vocabulary) - set(EXPRESSION_NAMES))
        if unknown:
            raise ValueError(f"vocabulary: unknown attribute(s) {unknown} (known: {', '.join(EXPRESSION_NAMES)})")
        blank = sorted(k for k, v in self.vocabulary.items() if not str(v).strip())
        if blank:
            raise ValueError(f"vocabulary: attribute(s) {blank} need a meaning (it goes into the prompt)")
        if not self.prompt.instruction.strip():
            raise ValueError("prompt.instruction: required (the instruction template)")
        render_instruction(self.prompt.instruction, self.max_concepts, self.vocabulary, ["a", "b"], self.n_per_class)


USAGE = f"usage: {PROG} {{{','.join(COMMANDS)}}} out=FILE.yaml [client=<name>] [key=value ...]"
HELP = f"""{USAGE}

Ask a (vision-)language model for concepts that tell the robot classes apart, each defined as an
expression over the robot attributes, and write the valid ones as a concept-set YAML file.

  extract  out=FILE.yaml: one request with n_per_class example images of every class; prints the
           concepts kept, those rejected with reasons, the token usage and how to train on the set

clients (client=): CLIENTS; any client.<key>=value of conf/client/<name>.yaml.
settings: n_per_class=4 max_concepts=8 split=train seed=0 name= description= prompt.system=
          prompt.instruction= vocabulary.<attribute>=<meaning> (~vocabulary.<attribute> drops one)
          data.<key>=value (see conf/concepts.yaml)
examples:
  {PROG} extract out=concepts/robot_vlm.yaml
  {PROG} extract out=vlm.yaml client=openrouter n_per_class=6 max_concepts=10
  {PROG} extract out=vlm.yaml client.base_url=http://localhost:8000/v1 client.model=Qwen/Qwen2.5-VL-7B-Instruct
  cbm-train data.concept_set=vlm.yaml"""


def report(result: ExtractionResult) -> str:
    """The console report: the concepts kept and the proposals rejected, with reasons."""
    lines = [f"kept {len(result.concepts)} concept(s):"]
    lines += [f"  {c.name:<{NAME_WIDTH}} {c.expr}    # {c.description}" for c in result.concepts]
    if result.rejected:
        lines.append(f"rejected {len(result.rejected)}:")
        lines += [f"  {r}" for r in result.rejected]
    if not result.concepts:
        preview = " ".join(result.raw.split())
        cut = "..." if len(preview) > REPLY_PREVIEW_CHARS else ""
        lines.append(f"the reply began: {preview[:REPLY_PREVIEW_CHARS]!r}{cut}")
    if result.truncated:
        lines.append("note: the reply stopped at client.max_tokens; raise it if the last concept is cut off")
    return "\n".join(lines)


@clean_errors(PROG)
def run(argv: list[str]) -> None:
    from hydra.errors import HydraException

    from cbm.core.cli import explain, group_options
    from cbm.core.safe_paths import check_creatable
    from cbm.vlm.client import ChatClient
    from cbm.vlm.config import ClientConfig
    from cbm.vlm.reply import ChatError
    from synthetic.registry import data_config, load_data

    if argv and argv[0] in ("-h", "--help", "help"):
        print(HELP.replace("CLIENTS", ", ".join(group_options("client"))))
        return
    if not argv or argv[0] not in COMMANDS:
        got = f" (got '{argv[0]}')" if argv else ""
        fail(PROG, f"{USAGE}{got}")
    overrides = argv[1:]
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name=CONFIG_NAME, overrides=overrides)
    except HydraException as err:  # unknown group option or key, bad override syntax
        fail(PROG, explain(err, overrides, CONFIG_NAME))
    raw = OmegaConf.to_container(cfg, resolve=True)
    client_raw, data_raw = raw.pop("client"), raw.pop("data")
    opts = to_dataclass(ConceptsConfig, raw, "config")
    client_cfg = ClientConfig.from_mapping(client_raw)  # endpoint, key and transport checked: no connection yet
    if data_raw.get("name") != "robot":
        raise ConfigError(f"data: concept sets are robot-attribute expressions; use data=robot (got '{data_raw.get('name')}')")
    data_cfg = data_config(data_raw)
    if data_cfg.modality != "image":
        raise ConfigError(f"data.modality: the model is shown images; use data.modality=image (got '{data_cfg.modality}')")
    out = Path(str(opts.out))
    check_creatable(str(out.parent), "out")

    if dry_run(PROG):  # CBM_DRY_RUN=1: the command line is valid
        return
    data = load_data(data_cfg, opts.cache_dir)
    rows = example_rows(data, opts.split, opts.n_per_class, opts.seed)
    images = example_images(data, rows)
    client = ChatClient(client_cfg)
    n_images = sum(len(v) for v in images.values())
    print(f"asking {client.model} for up to {opts.max_concepts} concepts from {n_images} images "
          f"({opts.n_per_class} per class: {', '.join(images)}; split {opts.split}, seed {opts.seed})")  # fmt: skip
    try:
        result = extract_concepts(client, images, opts.prompt.instruction, opts.vocabulary, opts.max_concepts,
                                  system=opts.prompt.system, rows=rows)  # fmt: skip
    except ChatError as err:
        fail(PROG, f"the model endpoint failed after {err.attempts} attempt(s): {err}", code=ENDPOINT_FAILED)
    print(report(result))
    print(f"usage: {client.usage.summary()}")
    result.require_concepts()
    name = opts.name or out.stem
    description = opts.description or (f"Concepts proposed by {client.model} from {opts.n_per_class} example images "
                                       f"per class ({', '.join(result.classes)}).")  # fmt: skip
    shown = "; ".join(f"{k} {v}" for k, v in result.example_rows.items())
    header = (f"Written by `{PROG} extract`: model {client.model}, {opts.n_per_class} examples per class from split "
              f"'{opts.split}' (seed {opts.seed}).\nExample rows: {shown}")  # fmt: skip
    write_concept_set(out, name, description, result.concepts, header=header)
    print(f"wrote {len(result.concepts)} concept(s) to {out}")
    print(f"use it: cbm-train data.concept_set={out}")


@stoppable("cbm-concepts")
def main() -> None:
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
