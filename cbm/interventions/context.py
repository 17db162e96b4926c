"""What an intervention component (a policy, an intervener) may need besides its own settings,
handed to it when the registry builds it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class BuildContext:
    """What components may need besides their own settings."""

    #: The command's seed (random policies, simulated experts).
    seed: int = 0
    #: The model's concept names (per-concept settings, LLM questions).
    concept_names: tuple[str, ...] = ()
    #: Indices of the concepts a policy may request (``None``: all).
    allowed: list[int] | None = None
    #: The study's per-concept costs in concept order (``costs.concepts``; ``None``: none), for the
    #: policies that weigh cost in their own score (CooP).
    costs: list[float] | None = None
    #: Returns the training split's concept labels ``[N, m]`` (empirical priors), loaded on demand.
    labels: Callable[[], Any] | None = None
    #: ``(batch, i) -> str``: example ``i`` as text, for data a language model cannot see as an
    #: image (the text modality's descriptions); ``None`` for image data.
    describe: Callable[[Any, int], str] | None = None
    #: The model the components will serve, and ``() -> batch`` of the validation split (``x``,
    #: ``c``, ``y`` ...): a component with ``prepare(model, batch)`` (a global concept order, a
    #: learned policy) runs it once when built. ``None``: not prepared (the Python API's caller does).
    model: Any = None
    validation: Callable[[], Any] | None = None
