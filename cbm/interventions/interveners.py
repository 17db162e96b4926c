"""Interveners: who supplies the values of the requested concepts.

* :class:`OracleIntervener` — the true value (no annotation noise).
* :class:`ExpertIntervener` — a simulated human who is right with a given accuracy
  (overall or per concept). Answers are a deterministic function of ``(seed, example
  id, concept)``, so the same expert gives the same answer to the same question
  whichever policy, budget or batch asked it.
* :class:`LLMIntervener` — asks a language / vision-language model through a client
  object (:class:`LLMClient`), parses ``<answer concept="...">yes|no</answer>`` tags,
  and on a reply it cannot parse either fails with one clear line or falls back to
  the model's own probability, counting and logging every fallback.

Every intervener is a callable ``(batch, state, mask) -> values [B,m]``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from cbm.interventions.base import Batch, OracleIntervener
from cbm.models.state import ConceptState

log = logging.getLogger("cbm.interventions")

__all__ = [
    "ExpertIntervener",
    "LLMAnswerError",
    "LLMClient",
    "LLMIntervener",
    "OracleIntervener",
    "parse_answers",
    "uniform_hash",
]

_M32 = 0xFFFFFFFF


def _mul32(x: Tensor, c: int) -> Tensor:
    """``(x * c) mod 2^32`` for ``0 <= x < 2^32`` without int64 overflow."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M32


def _hash32(x: Tensor) -> Tensor:
    """A 32-bit integer mixer (Wellons' ``lowbias32``) on int64 tensors holding 32-bit values."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniform_hash(seed: int, keys: Tensor) -> Tensor:
    """Uniform ``[0, 1)`` floats that are a pure function of ``(seed, key)`` (int64 ``keys``, any device)."""
    keys = keys.long()
    lo, hi = seed & _M32, ((seed >> 32) & _M32) ^ 0x5BD1E995
    s = int(_hash32(torch.tensor(lo)) ^ _hash32(torch.tensor(hi)))
    x = _hash32((keys & _M32) ^ s)
    x = _hash32(x ^ ((keys >> 32) & _M32) ^ 0x27D4EB2F)
    return x.double().div(2.0**32).float()


class ExpertIntervener:
    """A simulated expert who gives the true value with probability ``accuracy`` and the
    opposite value otherwise.

    Parameters
    ----------
    accuracy : one probability for every concept, or one per concept (``[m]``).
    seed : answers are a function of ``(seed, batch['idx'], concept)``; without an ``idx`` in
        the batch they come from a generator seeded with ``seed`` (then they depend on the order
        of the calls).

    Examples
    --------
    >>> import torch
    >>> from cbm.models.state import ConceptState
    >>> batch = {"c": torch.ones(4, 2), "idx": torch.arange(4)}
    >>> state = ConceptState(logits=torch.zeros(4, 2), probs=torch.full((4, 2), 0.5))
    >>> ExpertIntervener(accuracy=1.0)(batch, state, torch.ones(4, 2, dtype=torch.bool)).tolist()
    [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    """

    def __init__(self, accuracy: float | Sequence[float] | Tensor = 0.8, seed: int = 0):
        acc = torch.as_tensor(accuracy, dtype=torch.float32)
        if acc.ndim > 1 or bool(((acc < 0) | (acc > 1)).any()):
            raise ValueError(f"expert accuracy must be in [0, 1] (one value or one per concept), got {accuracy!r}")
        self.accuracy = acc
        self.seed = seed
        self._generator = torch.Generator().manual_seed(seed)

    @classmethod
    def from_names(
        cls, concept_names: Sequence[str], accuracy: float = 0.8, per_concept: Mapping[str, float] | None = None, seed: int = 0
    ) -> ExpertIntervener:
        """Expert with a default ``accuracy`` and overrides ``per_concept`` by concept name."""
        acc = torch.full((len(concept_names),), float(accuracy))
        for name, value in (per_concept or {}).items():
            if name not in concept_names:
                raise ValueError(f"expert.per_concept: unknown concept '{name}' (have {list(concept_names)})")
            acc[list(concept_names).index(name)] = float(value)
        return cls(acc, seed)

    def correct(self, batch: Batch, shape: tuple[int, int], device: torch.device) -> Tensor:
        """``[B,m]`` bool: whether the expert answers each (example, concept) correctly."""
        b, m = shape
        acc = self.accuracy.to(device)
        if acc.ndim == 1 and acc.shape[0] != m:
            raise ValueError(f"expert has {acc.shape[0]} per-concept accuracies but the model has {m} concepts")
        if "idx" in batch:
            keys = batch["idx"].to(device).long()[:, None] * m + torch.arange(m, device=device)[None]
            u = uniform_hash(self.seed, keys)
        else:
            u = torch.rand((b, m), generator=self._generator).to(device)
        return u < acc

    def __call__(self, batch: Batch, state: ConceptState, mask: Tensor) -> Tensor:
        truth = OracleIntervener()(batch, state, mask)
        ok = self.correct(batch, tuple(truth.shape), truth.device)
        return torch.where(ok, truth, 1.0 - truth)


# ----------------------------------------------------------------------------- LLM / VLM
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

    Answers are cached per ``(batch['idx'][i], concept)``, so a grid of policies and budgets asks
    each question once.
    """

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
