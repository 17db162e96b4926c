"""``llm``: ask a language / vision-language model through a client object (:class:`LLMClient`),
parse ``<answer concept="...">yes|no</answer>`` tags, and on a reply it cannot parse either fail
with one clear line or fall back to the model's own probability, counting and logging every fallback."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from cbm.interventions.interveners.base import Batch

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.registry import BuildContext
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
_YES = {"yes", "y", "true", "1", "present"}
_NO = {"no", "n", "false", "0", "absent"}


def parse_answers(reply: str, names: Sequence[str]) -> dict[str, float]:
    """The yes/no answers found in ``reply`` for ``names`` (1.0 / 0.0); concepts without a
    well-formed ``<answer concept="name">yes|no</answer>`` tag, or tagged twice with
    different answers, are left out."""
    wanted = set(names)
    found: dict[str, float] = {}
    clash: set[str] = set()
    for name, raw in _ANSWER.findall(reply or ""):
        name, word = name.strip(), raw.strip().strip(".").lower()
        if name not in wanted:
            continue
        value = 1.0 if word in _YES else 0.0 if word in _NO else None
        if value is None:
            continue
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
        #: ChatClient subclass or a factory marked with ``@cbm.vlm.client.client_factory``
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


def resolve_client(spec: str) -> Any:
    """The client factory ``spec`` (``module:name``) names: imported and checked, never called
    (:func:`cbm.core.targets.resolve`). Only a :class:`cbm.vlm.client.ChatClient` subclass or a
    function / class marked with :func:`cbm.vlm.client.client_factory` is accepted (the mark read
    statically: ``__getattr__`` cannot fake it): a config must not get an arbitrary callable
    (``os:system``, ``subprocess:Popen``) called with its ``client_kwargs``."""
    from cbm.core.targets import resolve
    from cbm.vlm.client import CLIENT_NEED, FACTORY_KIND, ChatClient

    return resolve(spec, "llm.client", kinds=(ChatClient,), mark=FACTORY_KIND, need=CLIENT_NEED)


def _takes_client_settings(factory: Any) -> bool:
    """The factory is built from :class:`cbm.vlm.config.ClientConfig` settings (so they can be
    validated before anything runs)."""
    from cbm.vlm.client import ChatClient, make_client

    return factory is make_client or (isinstance(factory, type) and issubclass(factory, ChatClient))


def check_client(spec: str, kwargs: Mapping[str, Any]) -> Any:
    """The checked factory (:func:`resolve_client`); ``kwargs`` validated too when they are
    client settings (a bad URL, a key bound for plain http: one line at start)."""
    factory = resolve_client(spec)
    if _takes_client_settings(factory):
        from cbm.vlm.config import ClientConfig

        try:
            ClientConfig.from_mapping(dict(kwargs))
        except ValueError as err:
            raise ValueError(f"llm.client_kwargs: {err}") from None
    return factory


def load_client(spec: str, kwargs: Mapping[str, Any]) -> Any:
    """The client ``spec`` builds from ``kwargs`` (checked first by :func:`check_client`; it must have ``ask``)."""
    factory = check_client(spec, kwargs)
    from cbm.vlm.client import ChatClient
    from cbm.vlm.config import ClientConfig

    try:
        if isinstance(factory, type) and issubclass(factory, ChatClient):
            client = factory(ClientConfig.from_mapping(dict(kwargs)))
        else:
            client = factory(**dict(kwargs))
    except TypeError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"llm.client: '{spec}'(**llm.client_kwargs) failed: {first}") from None
    if not callable(getattr(client, "ask", None)):
        raise ValueError(f"llm.client: '{spec}' returned a {type(client).__name__}, not a client with ask(prompt, image=None)")
    return client
