"""Intervention-aware Concept Embedding Model (IntCEM; Espinosa Zarlenga et al., NeurIPS 2023,
"Learning to Receive Help").

A CEM (same embeddings, same interventions, same head) trained to *receive* interventions, with a
learned policy ``psi`` trained beside it. Each training batch:

1. starting interventions ``mu_0``: each concept of each example set to its annotated value with
   probability ``randint_prob`` (RandInt); the task loss is taken on that state;
2. a rollout of ``T ~ U{1 .. max_horizon}`` steps: at each, the greedy oracle's target (the concept
   whose true value, set next, gives the true class the highest probability) teaches ``psi``
   (cross-entropy, ``policy_loss_weight``), and the next concept is drawn from ``psi``'s softmax;
3. the task loss after the rollout, weighted ``intervention_task_discount ** T``
   (``rollout_task_weight``): the model learns to use what a human tells it.

``psi`` reads the concept probabilities of the concepts not asked yet and the mask of those asked
(:class:`~cbm.interventions.policies.imitation.PolicyNet`), so the ``intcem`` policy uses it for
this model and fits the same network for any other architecture. Its input is detached: ``psi``
learns to choose, it does not shape the concept encoder.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from cbm.models.base import Batch
from cbm.models.cem import CEM
from cbm.models.config import IntCEMConfig
from cbm.models.policy_net import MODEL_ATTR, PolicyNet, greedy_targets, imitation_loss
from cbm.models.state import ConceptState

#: Where ``task_logits_for_training`` leaves a batch's starting interventions for ``extra_losses``.
_START = "_rollout_start"


class IntCEM(CEM):
    """A CEM trained with intervention rollouts, and the policy ``psi`` that chose them."""

    config_cls = IntCEMConfig
    cfg: IntCEMConfig
    supports_typed_concepts = False  # its rollouts and policy assume binary concepts

    def build(self) -> None:
        super().build()
        setattr(self, MODEL_ATTR, PolicyNet(self.n_concepts, self.cfg.policy_hidden, self.cfg.policy_layers))

    @property
    def policy_net(self) -> PolicyNet:
        """``psi``, the policy trained with this model (the ``intcem`` policy's source)."""
        return getattr(self, MODEL_ATTR)

    def task_logits_for_training(self, batch: Batch, state: ConceptState) -> Tensor:
        """The task logits on the starting interventions ``mu_0`` (RandInt), kept for the rollout."""
        if not self.training:
            return self.predict(state)
        start = torch.rand_like(state.probs) < self.cfg.randint_prob
        self.__dict__[_START] = start
        return self.predict(self.intervene(state, start, batch["c"].to(state.probs)))

    def extra_losses(self, batch: Batch, state: ConceptState, y_logits: Tensor) -> dict[str, Tensor]:
        """The rollout from ``mu_0``: psi's imitation loss at each step and the discounted task loss
        after the last (module docstring)."""
        asked = self.__dict__.pop(_START, None)
        if not self.training or asked is None:
            return {}
        truth = batch["c"].to(state.probs)
        y = batch["y"]
        probs = state.probs.detach()
        horizon = int(torch.randint(1, min(self.cfg.max_horizon, self.n_concepts) + 1, (1,)))
        policy_losses = []
        steps = 0
        for _ in range(horizon):
            candidates = ~asked
            live = candidates.any(1)
            if not bool(live.any()):
                break
            target, stakes = greedy_targets(self, state, asked, truth, y, candidates)
            weight = stakes if self.cfg.policy_weighting == "stakes" else None
            policy_losses.append(imitation_loss(self.policy_net, probs, asked, candidates, target, weight))
            with torch.no_grad():
                scores = self.policy_net(probs[live], asked[live]).float().masked_fill(~candidates[live], float("-inf"))
                pick = torch.multinomial(torch.softmax(scores, dim=1), 1)[:, 0]
            step = torch.zeros_like(asked)
            step[live] = F.one_hot(pick, self.n_concepts).bool()
            asked = asked | step
            steps += 1
        rolled = self.predict(self.intervene(state, asked, truth))
        weight = self.cfg.rollout_task_weight * self.cfg.intervention_task_discount**steps
        out = {"rollout_task_loss": weight * F.cross_entropy(rolled, y)}
        if policy_losses:
            out["policy_loss"] = self.cfg.policy_loss_weight * torch.stack(policy_losses).mean()
        return out
