"""Fitting the learned policy's ``psi`` on validation rollouts for a model that has none of its own
(the network, its targets and loss are IntCEM's: :mod:`cbm.models.policy_net`;
:mod:`cbm.interventions.policies.learned` explains the policy)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from cbm.models.policy_net import PolicyNet, greedy_targets, imitation_loss, random_start, sequential_select  # noqa: F401


def collect_rollouts(model, batch: dict[str, Any], allowed: Tensor | None, s: Any,
                     seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``(probs, asked, candidates, target, stakes)`` rows along ``s.rollouts`` greedy-oracle trajectories of
    every validation example, each from a random starting mask (:func:`random_start`)."""
    from cbm.interventions.interveners.base import true_concepts
    from cbm.models.devices import model_device

    dev = model_device(model)
    x, y = batch["x"].to(dev), batch["y"].to(dev)
    if len(y) == 0:
        raise ValueError("intcem policy: the validation split is empty")
    truth = true_concepts(batch).to(dev)
    with torch.no_grad():
        state = model.encode(x)
    b, m = state.probs.shape
    allowed_rows = torch.ones(b, m, dtype=torch.bool, device=dev) if allowed is None else allowed[None].expand(b, m)
    gen = torch.Generator().manual_seed(seed)
    out: list[tuple[Tensor, Tensor, Tensor, Tensor, Tensor]] = []
    for _ in range(s.rollouts):
        asked = random_start(allowed_rows, gen)
        while True:
            candidates = allowed_rows & ~asked
            live = candidates.any(1)
            if not bool(live.any()):
                break
            target, stakes = greedy_targets(model, state, asked, truth, y, candidates, s.chunk_mb)
            out.append((state.probs[live].float(), asked[live], candidates[live], target[live], stakes[live]))
            asked = asked | (F.one_hot(target.clamp_min(0), m).bool() & live[:, None])
    return tuple(torch.cat(parts) for parts in zip(*out))  # type: ignore[return-value]


def fit_policy(model, batch: dict[str, Any], allowed: Tensor | None, s: Any, seed: int = 0) -> PolicyNet:
    """``psi`` fit to imitate the greedy oracle on ``batch`` (the validation split), ``model`` frozen
    (``s``: the policy's settings: network size, rollouts, epochs, rate, batch, chunk)."""
    probs, asked, candidates, target, stakes = collect_rollouts(model, batch, allowed, s, seed)
    weight = stakes if s.weighting == "stakes" else None
    torch.manual_seed(seed)  # the network's initialisation
    net = PolicyNet(probs.shape[1], s.hidden, s.layers).to(probs.device)
    opt = torch.optim.Adam(net.parameters(), lr=s.lr)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.enable_grad():
        for _ in range(s.epochs):
            order = torch.randperm(len(target), generator=gen).to(probs.device)
            for i in range(0, len(order), s.batch_size):
                rows = order[i : i + s.batch_size]
                loss = imitation_loss(net, probs[rows], asked[rows], candidates[rows], target[rows],
                                      None if weight is None else weight[rows])  # fmt: skip
                if not loss.requires_grad:  # nothing at stake in these rows
                    continue
                opt.zero_grad()
                loss.backward()
                opt.step()
    return net.eval()
