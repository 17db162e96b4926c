"""The intervener protocol and the ground truth every intervener starts from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.models.state import ConceptState

Batch = dict[str, "Tensor"]

#: A concept probability (or an intervened value) above this reads as "present": the hard CBM's readout.
THRESHOLD = 0.5


@runtime_checkable
class Intervener(Protocol):
    """Who supplies concept values."""

    def __call__(self, batch: Batch, state: ConceptState, mask: Tensor) -> Tensor:
        """Values ``[B,m]`` in [0,1] for the requested concepts ``mask`` (others are ignored)."""
        ...


def true_concepts(batch: Batch) -> Tensor:
    """Noise-free concept values under the dataset's concept set (``c_clean`` when the
    generator added annotation noise, else the annotated ``c``)."""
    return batch["c_clean"] if "c_clean" in batch else batch["c"]


class WithoutSettings:
    """Base of an intervener that has no settings (``oracle``, ``self``): an empty ``Config`` and a
    ``from_config`` that builds it, as the registry expects of every component."""

    @dataclass
    class Config:
        pass

    @classmethod
    def from_config(cls, cfg: Any, ctx: BuildContext) -> Any:
        return cls()
