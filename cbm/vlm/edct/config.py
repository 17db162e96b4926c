"""Typed settings of ``cbm-edct`` (``conf/edct.yaml``), validated before any request: every field
of its type, every number in range, the editor's settings and endpoint, the segmenter's target
(imported and checked, never called here), every prompt template with only its placeholders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cbm.core.tags import REASK_PROMPT
from cbm.core.validation import check_fields, nested, within_split
from cbm.vlm.config import ClientConfig
from cbm.vlm.images import MAX_IMAGE_PIXELS, check_pixel_limit
from cbm.vlm.templates import check_template

ANSWER_MODES = ("generate", "score")
#: How the VLM is asked for its answer and explanation: 2 = the paper's (the answer, then the
#: explanation in a second turn of the same conversation); 1 = one prompt asking for both.
BASELINE_TURNS = (1, 2)
#: Prompts only the two-turn protocol uses (left out of a one-turn run's settings digest).
TWO_TURN_PROMPTS = ("answer_only", "explain")
#: ``synthetic``: the exact editor of the item source (robot parts, Sudoku cells).
EDITOR_KINDS = ("synthetic", "synthetic_robot", "synthetic_sudoku", "hosted", "diffusers", "diffusers_inpaint")
ITEM_SOURCES = ("robot", "sudoku", "files")
#: The splits of each item source.
SPLITS = {"robot": ("train", "calib", "test"), "sudoku": ("train", "val", "calib", "test"), "files": ("test",)}
#: Prompt templates every run needs, and the placeholders each may use.
PROMPT_FIELDS: dict[str, tuple[str, ...]] = {
    "answer": ("question", "options"),
    "answer_only": ("question", "options"),
    "explain": ("question",),
    "extract": ("question", "options", "answer", "explanation", "k"),
    "chain": ("question", "answer", "explanation", "concepts", "n"),
    "judge": ("question", "options", "answer", "explanation", "edit", "new_answer", "new_explanation"),
    "reask": ("problem",),
    "retry": ("concept", "problem"),
}
#: The constraint a retried edit adds to its instruction, after the verifier rejected the first one.
RETRY_PROMPT = ("Change only the {concept}, in place, and leave every other pixel exactly as it is: the previous edit was "
                "rejected ({problem}).")  # fmt: skip
#: Turn 1 of the two-turn protocol (``baseline_turns: 2``): the answer only.
ANSWER_ONLY_PROMPT = ("{question}\nOptions: {options}.\nLook at the image. Give your answer, exactly one of the options, in "
                      "<answer></answer>.")  # fmt: skip
#: Turn 2, in the same conversation after the answer: the explanation.
EXPLAIN_PROMPT = ("Explain your answer: which visual evidence in the image supports it? Reply in "
                  "<explanation></explanation>.")  # fmt: skip
#: Templates a config may leave out, and what stands in for them.
PROMPT_DEFAULTS: dict[str, str] = {"reask": REASK_PROMPT, "retry": RETRY_PROMPT, "answer_only": ANSWER_ONLY_PROMPT,
                                   "explain": EXPLAIN_PROMPT}  # fmt: skip
#: Fewest runs a standard deviation over runs needs.
STABILITY_MIN_RUNS = 2
#: Upper bounds that keep a typo from becoming a run that never ends.
MAX_ITEMS, MAX_WORKERS, MAX_RESAMPLES, MAX_RETRIES = 100_000, 256, 1_000_000, 10


def split_size(dcfg: Any, split: str) -> int:
    """Items in ``split`` of a robot or Sudoku data config (a robot split's robots times its renders)."""
    size = int(getattr(dcfg, f"n_{split}", -1))
    if size < 0:
        raise ValueError(f"items.split: unknown split '{split}' for data={getattr(dcfg, 'name', 'this data')}")
    return size * int(getattr(dcfg, "renders_per_robot", 1))


@dataclass
class ItemsConfig:
    #: Where items come from: ``robot`` / ``sudoku`` (generated from ``data``) or ``files`` (``path``).
    source: str = "robot"
    #: The split items are taken from (robot: train | calib | test; sudoku adds val; files: test).
    split: str = "test"
    n: int = 20  # items (the first n positions of the split, or a seeded sample)
    #: true: a sample of ``n`` positions drawn with ``seed`` (kept in order); false: the first ``n``.
    sample: bool = False
    seed: int = 0
    #: source=files: the data (a JSONL file, an image folder, a saved datasets dataset), its format
    #: and the shape of its rows (cbm.vlm.edct.items)
    path: str | None = None
    format: str = "auto"
    #: How a files row reads: generic | okvqa | drivelm | 3dsrbench (fields per shape: cbm.vlm.edct.items).
    shape: str = "generic"

    def __post_init__(self) -> None:
        from cbm.vlm.edct.items import FORMATS, SHAPES

        check_fields(self, "items.")
        if self.source == "files" and not (isinstance(self.path, str) and self.path.strip()):
            raise ValueError("items.path: items.source=files needs the data's path (a JSONL file, an image folder or a saved dataset)")
        if self.source != "files" and self.path is not None:
            raise ValueError(f"items.path: only read with items.source=files (got source={self.source})")
        if self.format not in FORMATS:
            raise ValueError(f"items.format: unknown format '{self.format}' (choose from: {', '.join(FORMATS)})")
        if self.shape not in SHAPES:
            raise ValueError(f"items.shape: unknown shape '{self.shape}' (choose from: {', '.join(SHAPES)})")
        if self.source not in ITEM_SOURCES:
            raise ValueError(f"items.source: unknown source '{self.source}' (choose from: {', '.join(ITEM_SOURCES)})")
        if self.split not in SPLITS[self.source]:
            raise ValueError(f"items.split: unknown split '{self.split}' ({', '.join(SPLITS[self.source])})")
        if not 1 <= self.n <= MAX_ITEMS:
            raise ValueError(f"items.n: must be >= 1, got {self.n}" if self.n < 1 else f"items.n: at most {MAX_ITEMS}, got {self.n}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"items.seed: must lie in [0, 2**32), got {self.seed}")


@dataclass
class BootstrapConfig:
    n_resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields(self, "bootstrap.")
        if not 100 <= self.n_resamples <= MAX_RESAMPLES:
            raise ValueError(f"bootstrap.n_resamples: must lie in [100, {MAX_RESAMPLES}], got {self.n_resamples}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"bootstrap.confidence: must lie in (0.5, 1), got {self.confidence}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"bootstrap.seed: must lie in [0, 2**32), got {self.seed}")


@dataclass
class EDCTConfig:
    output_dir: str
    #: Client settings (``ClientConfig``) of the model under test: answers, explains, answers each edit.
    vlm: dict[str, Any]
    #: Client settings of the LLM that extracts the cited concepts and writes the edit chain.
    llm: dict[str, Any]
    #: Client settings of the judge that scores answer consistency, faithfulness and the rubric.
    judge: dict[str, Any]
    #: Prompt templates by stage (answer, explain, extract, chain, judge, reask, retry ...), each checked
    #: for its placeholders; reask, retry, answer_only and explain may be left out (built-in defaults).
    prompts: dict[str, Any]
    judge2: dict[str, Any] | None = None
    data: dict[str, Any] = field(default_factory=lambda: {"name": "robot"})
    cache_dir: str | None = None
    items: ItemsConfig = field(default_factory=ItemsConfig)
    #: The question asked about every item (an items file row with its own question overrides it).
    question: str = "Is this robot a Glorp or a Drent?"
    options: list[str] | None = None  # null: the dataset's class names
    answer_by: str = "generate"
    #: 2: the answer, then the explanation in a second turn of the same conversation (the paper);
    #: 1: one prompt asking for both (``prompts.answer``). Baseline and every re-query alike.
    baseline_turns: int = 2
    k: int = 2
    #: The image editor: ``{kind: synthetic | hosted | diffusers | diffusers_inpaint, ...its settings}``.
    editor: dict[str, Any] = field(default_factory=lambda: {"kind": "synthetic"})
    verify: dict[str, Any] = field(default_factory=dict)
    #: Masks for editors that report none (hosted, diffusion): ``{target: "module:Class", kwargs: {...}}``,
    #: a :class:`cbm.vlm.verify.Segmenter` class or a ``@segmenter_factory`` function; null: such edits go unverified.
    segmenter: dict[str, Any] | None = None
    #: Edits re-made when the verifier rejects one, each with the ``retry`` prompt added to the
    #: instruction's constraints (and, for local editors, another seed).
    verify_retries: int = 1
    #: A free-form edit with no mask to verify it (no segmenter): judged anyway (true) or its item
    #: excluded from every score, counted as ``unverified`` (false, as the paper).
    score_unverified: bool = False
    #: Re-asks (0 or 1) of a reply that could not be read, in the same conversation with the
    #: ``reask`` prompt naming the problem, before the stage is given up (counted per stage).
    reask: int = 1
    gate_exact_edits: bool = False  # exact (synthetic) edits: record the verifier's verdict, or stop the chain on a fail
    workers: int = 4
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    #: A CSV of human labels per step (:mod:`cbm.vlm.edct.agreement`): the run also writes the paper's
    #: Table 4 (``human_agreement.md`` / ``.csv``); null: off.
    human_scores: str | None = None
    #: Finished ``cbm-edct`` run directories of one configuration: no run is made, their scores'
    #: mean and SD over runs are written (``stability.md`` / ``.csv``, the paper's Table 5); null: off.
    stability_runs: list[str] | None = None
    progress: bool | None = None
    #: Largest image (pixels) read back on resume or received from an image-edit service; refused undecoded.
    max_image_pixels: int = MAX_IMAGE_PIXELS
    #: W&B (``logger.wandb``, as cbm-train's; the command line's default logs offline; a config built in code: none).
    logger: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.items = nested(ItemsConfig, self.items, "items")
        if self.logger:
            from cbm.config.train import LoggerConfig
            from cbm.core.validation import to_dataclass

            to_dataclass(LoggerConfig, self.logger, "logger")
        self.bootstrap = nested(BootstrapConfig, self.bootstrap, "bootstrap")
        for role in ("vlm", "llm", "judge", "judge2"):
            settings = getattr(self, role)
            if settings is None and role == "judge2":
                continue
            try:
                ClientConfig.from_mapping(settings)
            except ValueError as err:
                raise ValueError(f"{role}: {err}") from None
        check_fields(self)
        if self.answer_by not in ANSWER_MODES:
            raise ValueError(f"answer_by: '{self.answer_by}' is not one of {', '.join(ANSWER_MODES)}")
        if self.answer_by == "score" and dict(self.vlm).get("backend") != "local":
            raise ValueError("answer_by=score needs vlm.backend=local (hosted endpoints return text, not option log-probabilities)")
        if isinstance(self.baseline_turns, bool) or self.baseline_turns not in BASELINE_TURNS:
            raise ValueError(f"baseline_turns: must be 1 (answer and explanation in one prompt) or 2 (the paper: the explanation "
                             f"asked in a second turn), got {self.baseline_turns!r}")  # fmt: skip
        if not 1 <= self.k <= 10:
            raise ValueError(f"k: must lie in [1, 10], got {self.k}")
        if not 0 <= self.verify_retries <= MAX_RETRIES or not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"verify_retries must lie in [0, {MAX_RETRIES}] and workers in [1, {MAX_WORKERS}]")
        if isinstance(self.reask, bool) or self.reask not in (0, 1):
            raise ValueError(f"reask: must be 0 or 1 (re-asks of an unreadable reply), got {self.reask!r}")
        if not self.question.strip():
            raise ValueError("question: empty")
        if self.options is not None:
            if len(self.options) < 2 or len({o.strip().lower() for o in self.options}) < len(self.options) or not all(o.strip() for o in self.options):
                raise ValueError(f"options: at least two distinct, non-empty answer options (or null for the class names), got {self.options}")
        check_pixel_limit(self.max_image_pixels)
        if self.stability_runs is not None and len(self.stability_runs) < STABILITY_MIN_RUNS:
            raise ValueError(f"stability_runs: at least {STABILITY_MIN_RUNS} run directories, got {len(self.stability_runs)}")
        self._check_data()
        self._check_editor()
        if self.segmenter is not None:
            check_segmenter(self.segmenter)
        check_prompts(self.prompts)
        from cbm.vlm.verify import VerifyConfig

        try:
            VerifyConfig(**self.verify)
        except TypeError as err:
            raise ValueError(f"verify: {err}") from None

    def _check_data(self) -> None:
        from synthetic.registry import data_config

        if self.items.source == "files":
            if self.editor.get("kind", "").startswith("synthetic"):
                raise ValueError("editor.kind: photographs need an image editor (hosted or diffusers), not a synthetic one")
            return
        if self.items.source != str(self.data.get("name", "")).split("_")[0]:
            raise ValueError(f"items.source={self.items.source} needs data={self.items.source} (got data.name={self.data.get('name')})")
        dcfg = data_config(dict(self.data))  # the generator's own checks, one line each
        if getattr(dcfg, "block_size", 3) != 3:
            raise ValueError(f"data.block_size={dcfg.block_size}: EDCT's Sudoku items and editor are 9x9 boards")
        within_split("items.n", self.items.n, split_size(dcfg, self.items.split), self.items.split, f"data.n_{self.items.split}")

    def _check_editor(self) -> None:
        from cbm.vlm.editors import check_editor

        kind = self.editor.get("kind")
        if kind not in EDITOR_KINDS:
            raise ValueError(f"editor.kind: unknown editor '{kind}' (choose from: {', '.join(EDITOR_KINDS)})")
        if kind in ("synthetic_robot", "synthetic_sudoku") and kind != f"synthetic_{self.items.source}":
            raise ValueError(f"editor.kind={kind} cannot edit items.source={self.items.source} (use editor.kind=synthetic)")
        check_editor(kind, {k: v for k, v in self.editor.items() if k != "kind"}, "editor")


def check_segmenter(spec: dict[str, Any]) -> None:
    """``{target, kwargs}``: the target imported and checked (a Segmenter class or a marked factory,
    :func:`cbm.vlm.verify.resolve_segmenter`), the kwargs matching its parameters; nothing called."""
    from cbm.core.validation import check_kwargs
    from cbm.vlm.verify import resolve_segmenter

    unknown = sorted(str(k) for k in spec if k not in ("target", "kwargs"))
    if unknown:
        raise ValueError(f"segmenter: unknown key(s) {unknown} (target, kwargs)")
    kwargs = spec.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ValueError(f"segmenter.kwargs: must be a mapping, got {type(kwargs).__name__}")
    factory = resolve_segmenter(spec.get("target"))
    check_kwargs(factory, kwargs, "segmenter.kwargs")
    from cbm.vlm.segmenters import DetectorSegmenter

    if isinstance(factory, type) and issubclass(factory, DetectorSegmenter):  # this project's: its values checked too (nothing loaded)
        DetectorSegmenter.check_settings(kwargs)


def check_prompts(prompts: dict[str, str]) -> None:
    """Every stage has a template, and each template uses only its stage's placeholders, written plainly."""
    missing = sorted(set(PROMPT_FIELDS) - set(prompts) - set(PROMPT_DEFAULTS))
    if missing:
        raise ValueError(f"prompts: missing template(s) {missing}")
    extra = sorted(set(prompts) - set(PROMPT_FIELDS))
    if extra:
        raise ValueError(f"prompts: unknown template(s) {extra} (known: {', '.join(PROMPT_FIELDS)})")
    for name, allowed in PROMPT_FIELDS.items():
        check_template(name, prompts.get(name, PROMPT_DEFAULTS.get(name)), allowed)
