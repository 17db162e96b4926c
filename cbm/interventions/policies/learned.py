"""``intcem``: a learned intervention policy (Espinosa Zarlenga et al. 2023, "Learning to Receive
Help: Intervention-Aware Concept Embedding Models"), usable by every architecture.

A small network ``psi`` reads what every architecture has -- the concept probabilities of the
concepts not asked yet and the mask of those asked -- and scores the concept to ask next. It is
trained by imitating the *greedy oracle*: from a state where the concepts in ``asked`` were set to
their true values, the concept whose true value, set next, gives the true class the highest
probability (IntCEM's rollout target). ``select`` asks ``k`` concepts one after another, each step
on the mask the previous steps left.

``psi`` does not see the answers it received: the engine chooses a budget's concepts before the
intervener answers, so that every intervener is scored on the same requests. (IntCEM's own policy
reads the intervened embeddings; here the answers are unknown when the policy is asked.)

Where ``psi`` comes from (``source``):

* an :class:`~cbm.models.intcem.IntCEM` trains one jointly with the model (its rollouts also
  teach the model to use the answers); ``auto`` takes it;
* any other architecture: :meth:`LearnedPolicy.prepare` fits one on the validation split
  (behavioural cloning of the greedy oracle along ``rollouts`` trajectories per example, each from
  a random starting mask), the model frozen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cbm.interventions.policies.base import available_concepts, concept_mask
from cbm.models.policy_net import MODEL_ATTR, PolicyNet, sequential_select

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.interventions.context import BuildContext
    from cbm.models.state import ConceptState

SOURCES = ("auto", "model", "fit")
WEIGHTINGS = ("stakes", "uniform")
#: Where a model keeps the policy it trained with (an IntCEM's ``psi``).


class LearnedPolicy:
    """``k`` concepts asked one after another by a learned ``psi`` (module docstring)."""

    @dataclass
    class Config:
        #: auto (an IntCEM's own psi, else fit one) | model (the model's own; refused without one) | fit
        source: str = "auto"
        #: psi's width and hidden layers when it is fit here
        hidden: int = 64
        layers: int = 2
        #: greedy-oracle trajectories per validation example, each from a random starting mask
        rollouts: int = 2
        #: stakes (each step's imitation weighted by how much the oracle's choice raises log p(y): where
        #: the model is already sure every choice is as good) | uniform (IntCEM's plain cross-entropy)
        weighting: str = "stakes"
        epochs: int = 20
        lr: float = 3e-3
        batch_size: int = 256
        #: memory budget of one chunk of the single-concept predictions (MiB)
        chunk_mb: float = 256.0

        def __post_init__(self) -> None:
            if self.source not in SOURCES:
                raise ValueError(f"source must be one of {SOURCES}, got '{self.source}'")
            if self.weighting not in WEIGHTINGS:
                raise ValueError(f"weighting must be one of {WEIGHTINGS}, got '{self.weighting}'")
            for key in ("hidden", "layers", "rollouts", "epochs", "batch_size"):
                if getattr(self, key) < 1:
                    raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
            if not self.lr > 0 or not self.chunk_mb > 0:
                raise ValueError(f"lr and chunk_mb must be > 0, got {self.lr} and {self.chunk_mb}")

    def __init__(self, cfg: Config | None = None, seed: int = 0, allowed: Tensor | Sequence[int] | None = None):
        self.cfg = cfg or self.Config()
        self.seed = seed
        self.allowed = allowed
        #: the network that scores concepts (set by :meth:`prepare`)
        self.net: PolicyNet | None = None

    @classmethod
    def from_config(cls, cfg: Config, ctx: BuildContext) -> LearnedPolicy:
        return cls(cfg, seed=ctx.seed, allowed=ctx.allowed)

    def prepare(self, model, batch: dict[str, Any]) -> None:
        """Take the model's own ``psi`` (an IntCEM's) or fit one on ``batch`` (the validation split)."""
        from cbm.interventions.policies.imitation import fit_policy
        from cbm.models.devices import model_device

        own = getattr(model, MODEL_ATTR, None)
        if self.cfg.source == "model" and not isinstance(own, PolicyNet):
            raise ValueError(f"intcem policy: source=model, but {type(model).__name__} trained no policy (an IntCEM does; source=fit fits one)")
        if self.cfg.source != "fit" and isinstance(own, PolicyNet):
            self.net = own
            return
        m = int(batch["c"].shape[1])
        self.net = fit_policy(model, batch, concept_mask(self.allowed, m, model_device(model)), self.cfg, self.seed)

    def select(self, model, state: ConceptState, k: int) -> Tensor:
        if self.net is None:
            raise ValueError("intcem policy: call prepare(model, validation_batch) first (the commands do)")

        avail = available_concepts(state, self.allowed)
        return sequential_select(self.net, state.probs, state.intervened, avail, k)
