"""IntCEM's intervention policy network ``psi``: its scores, its sequential selection, the
greedy-oracle targets it imitates and its loss. A model trains it (:class:`cbm.models.intcem.IntCEM`),
so it lives with the models; the learned policy (:mod:`cbm.interventions.policies.learned`) reads a
model's trained ``psi`` or fits one (:mod:`cbm.interventions.policies.imitation`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cbm.models.hooks import single_concept_logits

if TYPE_CHECKING:
    from cbm.models.state import ConceptState

#: The attribute under which a model carries its own trained ``psi`` (an IntCEM's).
MODEL_ATTR = "intervention_policy"


class PolicyNet(nn.Module):
    """``psi``: ``[probs of the concepts not asked, asked mask]`` (``2m``) -> ``m`` scores."""

    def __init__(self, n_concepts: int, hidden: int = 64, layers: int = 2):
        super().__init__()
        dims = [2 * n_concepts, *([hidden] * layers)]
        blocks: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            blocks += [nn.Linear(a, b), nn.LeakyReLU()]
        self.net = nn.Sequential(*blocks, nn.Linear(dims[-1], n_concepts))

    def forward(self, probs: Tensor, asked: Tensor) -> Tensor:
        """``[B,m]`` scores, larger = ask sooner (asked concepts are not masked here)."""
        a = asked.to(probs.dtype)
        return self.net(torch.cat([probs * (1 - a), a], dim=1))


def sequential_select(net: PolicyNet, probs: Tensor, asked: Tensor, avail: Tensor, k: int) -> Tensor:
    """Bool ``[B,m]``: ``k`` concepts (at most the available ones) asked one after another, each the
    best-scored available concept given those asked before it (and ``asked``, the state's own)."""
    chosen = torch.zeros_like(avail)
    p = probs.float()
    with torch.no_grad():
        for _ in range(min(k, avail.shape[1])):
            left = avail & ~chosen
            if not bool(left.any()):
                break
            scores = net(p, asked | chosen).float().masked_fill(~left, float("-inf"))
            pick = scores.argmax(1)
            chosen |= F.one_hot(pick, avail.shape[1]).bool() & left.any(1, keepdim=True)
    return chosen


def greedy_targets(model, state: ConceptState, asked: Tensor, truth: Tensor, y: Tensor, candidates: Tensor,
                   chunk_mb: float = 256.0) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``(target, stakes)``, each ``[B]``: the candidate whose true value, set on top of ``asked`` (set
    to ``truth``), gives class ``y`` the highest probability (lowest index on ties; ``-1`` where no
    candidate is left), and how much that raises ``log p(y)`` (>= 0; 0 without a candidate): where the
    model is already sure of the right class every choice is as good, and the target is noise.
    No gradient."""
    with torch.no_grad():
        st = model.intervene(state, asked, truth.to(state.probs.dtype)) if bool(asked.any()) else state
        now = torch.log_softmax(model.predict(st).float(), dim=-1).gather(1, y[:, None])[:, 0]
        logits = single_concept_logits(model, st, chunk_mb)  # [B, m, 2, C]
        at_truth = logits.gather(2, truth.long()[:, :, None, None].expand(-1, -1, 1, logits.shape[-1]))[:, :, 0]  # [B, m, C]
        gain = torch.log_softmax(at_truth.float(), dim=-1).gather(2, y[:, None, None].expand(-1, logits.shape[1], 1))[..., 0]
        gain = gain.masked_fill(~candidates, float("-inf"))
        best_gain, best = gain.max(1)
        live = candidates.any(1)
        stakes = torch.where(live, (best_gain - now).clamp_min(0.0), torch.zeros_like(now))
    return torch.where(live, best, torch.full_like(best, -1)), stakes


def imitation_loss(net: PolicyNet, probs: Tensor, asked: Tensor, candidates: Tensor, target: Tensor,
                   weight: Tensor | None = None) -> Tensor:  # fmt: skip
    """Cross-entropy of ``psi``'s scores over the candidates against the greedy target, averaged over
    the rows with a target, each weighted by ``weight`` (e.g. the stakes of :func:`greedy_targets`;
    ``None``: equally). Zero when no row has a target or every weight is 0."""
    valid = target >= 0 if weight is None else (target >= 0) & (weight > 0)
    if not bool(valid.any()):
        return probs.new_zeros(())
    scores = net(probs[valid], asked[valid]).masked_fill(~candidates[valid], float("-inf"))
    ce = F.cross_entropy(scores.float(), target[valid], reduction="none")
    if weight is None:
        return ce.mean()
    w = weight[valid].float()
    return (ce * w).sum() / w.sum()


def random_start(avail: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Bool ``[B,m]``: per row, a uniformly random number (0 to all but one) of the available
    concepts, chosen uniformly: the starting masks of the rollouts."""
    b, m = avail.shape
    drawn_on = generator.device if generator is not None else avail.device  # a seeded generator: same draws anywhere
    noise = torch.rand(b, m, generator=generator, device=drawn_on).to(avail.device).masked_fill(~avail, 2.0)
    rank = noise.argsort(1).argsort(1)  # the position of each concept in a random order of the available
    n_avail = avail.sum(1, keepdim=True)
    size = (torch.rand(b, 1, generator=generator, device=drawn_on).to(avail.device) * n_avail).floor()  # 0 .. n-1
    return (rank < size) & avail
