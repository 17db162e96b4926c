"""``llm``: ask a language / vision-language model through a client object (:class:`LLMClient`),
parse ``<answer concept="...">yes|no</answer>`` tags, and on a reply it cannot parse either fail
with one clear line or fall back to the model's own probability, counting and logging every fallback."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from cbm.core.tags import clean_reply, match_option
from cbm.interventions.interveners.base import Batch

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.models.state import ConceptState

log = logging.getLogger("cbm.interventions")

@runtime_checkable
class LLMClient(Protocol):
    """What :class:`LLMIntervener` needs from a (vision-)language model client.

    ``ask(prompt, image=None) -> str``: one chat turn; ``image`` is a ``[3,H,W]`` float tensor
    in [0, 1] for image data, else ``None``. The client owns retries on transport errors,
    caching and rate limits; it returns the model's raw text reply.
    """

    def ask(self, prompt: str, image: Tensor | None = None) -> str: ...


class LLMAnswerError(ValueError):
    """The model's reply could not be parsed into an answer for a requested concept."""


_ANSWER = re.compile(r"<answer\s+concept\s*=\s*[\"']([^\"']+)[\"']\s*>\s*(.*?)\s*</answer\s*>", re.IGNORECASE | re.DOTALL)
#: The words read as yes and no (:func:`cbm.core.tags.match_option` also takes "**Yes**", "Yes.",
#: "The answer is no"); a value naming neither, or both, is no answer.
YES_NO_ALIASES = {"y": "yes", "true": "yes", "1": "yes", "present": "yes", "n": "no", "false": "no", "0": "no", "absent": "no"}


def parse_answers(reply: str, names: Sequence[str]) -> dict[str, float]:
    """The yes/no answers found in ``reply`` for ``names`` (1.0 / 0.0), read by the project's one reply
    parser (:mod:`cbm.core.tags`: reasoning blocks, code fences and escaped tags dropped first, values
    read as a person would); concepts without a readable ``<answer concept="name">yes|no</answer>`` tag,
    or tagged twice with different answers, are left out."""
    wanted = set(names)
    found: dict[str, float] = {}
    clash: set[str] = set()
    for name, raw in _ANSWER.findall(clean_reply(reply)):
        name = name.strip()
        if name not in wanted:
            continue
        word, _ = match_option(raw, ("yes", "no"), YES_NO_ALIASES)
        if word is None:
            continue
        value = 1.0 if word == "yes" else 0.0
        if name in found and found[name] != value:
            clash.add(name)
        found[name] = value
    return {k: v for k, v in found.items() if k not in clash}


class LLMIntervener:
    """Ask a language model for the requested concepts of each example.

    Parameters
    ----------
    client : an :class:`LLMClient`.
    concept_names : the model's concept names (column order).
    questions : optional question per concept name (default: "Is <name> true?").
    on_unparseable : ``"error"`` raises :class:`LLMAnswerError` with one line; ``"model"`` keeps
        the model's own probability for the unanswered concepts, logs a warning and counts them
        in ``n_fallbacks``.
    retries : times to re-ask for the concepts a reply did not answer, before ``on_unparseable``.
    describe : optional ``(batch, i) -> str`` context for example ``i`` (text / tabular data);
        image batches send ``batch['x'][i]`` as the image.
    subject : how the prompt names an example ("robot", "board"...).

    Notes
    -----
    Answers are cached per ``(batch['idx'][i], concept)``, so a grid of policies and budgets asks
    each question once.
    """

    @dataclass
    class Config:
        #: ``module:callable`` returning an object with ``ask(prompt, image=None) -> str``: a
        #: ChatClient subclass or a factory marked with ``@cbm.core.clients.client_factory``
        #: (e.g. ``cbm.vlm.client:make_client``); anything else is refused before it is called.
        client: str | None = None
        #: Keyword arguments for ``client`` (a ChatClient subclass gets them as ``ClientConfig`` settings).
        client_kwargs: dict[str, Any] = field(default_factory=dict)
        #: error | model (keep the model's probability, counted and logged)
        on_unparseable: str = "error"
        #: Times (>= 0) to re-ask for the concepts a reply left unanswered, before ``on_unparseable``.
        retries: int = 1
        #: Question per concept name (default: "Is <name> true for this <subject>?").
        questions: dict[str, str] = field(default_factory=dict)
        #: How the prompt names an example ("robot", "board"...): "Answer each question about the <subject>".
        subject: str = "example"

        def __post_init__(self) -> None:
            if not self.client:
                raise ValueError("the llm intervener needs client: a 'module:callable' that returns the client")
            check_client(self.client, self.client_kwargs)  # imported and checked, never called here
            if self.on_unparseable not in ("error", "model"):
                raise ValueError(f"on_unparseable must be 'error' or 'model', got '{self.on_unparseable}'")
            if self.retries < 0:
                raise ValueError("retries must be >= 0")

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> LLMIntervener:
        client = load_client(cfg.client or "", cfg.client_kwargs)
        return cls(client, list(ctx.concept_names), cfg.questions, cfg.on_unparseable, cfg.retries, describe=ctx.describe, subject=cfg.subject)

    def __init__(
        self,
        client: LLMClient,
        concept_names: Sequence[str],
        questions: Mapping[str, str] | None = None,
        on_unparseable: str = "error",
        retries: int = 1,
        describe: Callable[[Batch, int], str] | None = None,
        subject: str = "example",
    ):
        if not callable(getattr(client, "ask", None)):
            raise ValueError("llm intervener: the client must have an ask(prompt, image=None) -> str method")
        if on_unparseable not in ("error", "model"):
            raise ValueError(f"llm.on_unparseable must be 'error' or 'model', got {on_unparseable!r}")
        if retries < 0:
            raise ValueError("llm.retries must be >= 0")
        unknown = sorted(set(questions or {}) - set(concept_names))
        if unknown:
            raise ValueError(f"llm.questions: unknown concept(s) {unknown} (have {list(concept_names)})")
        self.client = client
        self.concept_names = list(concept_names)
        self.questions = dict(questions or {})
        self.on_unparseable = on_unparseable
        self.retries = retries
        self.describe = describe
        self.subject = subject
        self.n_queries = 0
        self.n_fallbacks = 0
        self._cache: dict[tuple[int, str], float] = {}

    def question(self, name: str) -> str:
        return self.questions.get(name, f"Is '{name.replace('_', ' ')}' true for this {self.subject}?")

    def prompt(self, names: Sequence[str], context: str | None = None) -> str:
        """The prompt asking about ``names`` (documented format the parser expects)."""
        lines = [f"Answer each question about the {self.subject} with yes or no."]
        if context:
            lines += ["", context]
        lines += ["", "Questions:"]
        lines += [f"- {n}: {self.question(n)}" for n in names]
        lines += [
            "",
            "Reply with one line per question, exactly in this format:",
            *[f'<answer concept="{n}">yes or no</answer>' for n in names],
        ]
        return "\n".join(lines)

    def _ask(self, batch: Batch, i: int, names: list[str]) -> tuple[dict[str, float], str]:
        from torch import Tensor

        x = batch.get("x")
        image = x[i] if isinstance(x, Tensor) and x.ndim == 4 and x.is_floating_point() else None
        context = self.describe(batch, i) if self.describe else None
        self.n_queries += 1
        reply = self.client.ask(self.prompt(names, context), image=image)
        if not isinstance(reply, str):
            raise LLMAnswerError(f"llm intervener: client.ask returned {type(reply).__name__}, expected str")
        return parse_answers(reply, names), reply

    def __call__(self, batch: Batch, state: ConceptState, mask: Tensor) -> Tensor:
        m = state.n_concepts
        if m != len(self.concept_names):
            raise ValueError(f"llm intervener knows {len(self.concept_names)} concepts but the model has {m}")
        values = state.probs.detach().clone()
        ids = batch["idx"].tolist() if "idx" in batch else None
        rows = mask.any(1).nonzero(as_tuple=True)[0].tolist()
        mask_cpu = mask.cpu()
        for i in rows:
            names = [self.concept_names[j] for j in mask_cpu[i].nonzero(as_tuple=True)[0].tolist()]
            key = ids[i] if ids is not None else None
            answers = {n: self._cache[(key, n)] for n in names if key is not None and (key, n) in self._cache}
            todo = [n for n in names if n not in answers]
            reply = ""
            for _ in range(self.retries + 1):
                if not todo:
                    break
                got, reply = self._ask(batch, i, todo)
                answers.update(got)
                todo = [n for n in todo if n not in got]
            if todo:
                where = f"example {key}" if key is not None else f"row {i}"
                if self.on_unparseable == "error":
                    short = " ".join(reply.split())[:120]
                    raise LLMAnswerError(f"llm intervener: no parseable answer for {todo} ({where}); reply: {short!r}")
                self.n_fallbacks += len(todo)
                log.warning("llm intervener: no parseable answer for %s (%s); keeping the model's probability", todo, where)
            for n, v in answers.items():
                values[i, self.concept_names.index(n)] = v
                if key is not None:
                    self._cache[(key, n)] = v
        return values


def check_client(spec: str, kwargs: Mapping[str, Any]) -> Any:
    """The checked factory ``spec`` names (:func:`cbm.core.clients.check_client`): a marked client
    factory, its ``client_kwargs`` validated by its own settings check before anything runs."""
    from cbm.core.clients import check_client as check

    return check(spec, kwargs, "llm.client", "llm.client_kwargs")


def load_client(spec: str, kwargs: Mapping[str, Any]) -> Any:
    """The client ``spec`` builds from ``kwargs`` (checked first; it must have ``ask``)."""
    from cbm.core.clients import build_client

    return build_client(spec, kwargs, "llm.client", "llm.client_kwargs")
