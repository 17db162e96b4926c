"""Interventions that cost: per-concept costs, budgets counted in cost units, value-per-cost ranking.

A concept's cost is what asking a person for it costs (concept-benchmark 0.4.1's ``concept_costs``:
``{concept: cost}``, every other concept 1; here ``cbm-intervene costs.concepts``). With costs, a budget ``k`` is a number of cost units:
a policy's concepts are taken in its order of preference and each is asked when it still fits,
``spent + cost[c] <= k`` (one that does not fit is skipped, a cheaper one after it may still fit).

The order of preference comes from the policy itself, so every policy works under costs:

- a policy with ``values(model, state)`` (non-negative: what an answer is worth, e.g. the
  uncertainty policy's) ranks by value per cost when ``per_cost`` (the default) and by value alone
  otherwise;
- a policy with ``scores`` (every ranking policy) ranks by its scores;
- any other policy (responsiveness, a learned policy, a user's own ``select``) ranks by the budget
  at which it first asks for a concept: ``select`` at ``1, 2, ..., m`` concepts; a concept it never
  asks for (a thresholded policy) is never asked under costs either.

>>> costs = cost_vector(["knees", "ears", "mouth"], {"knees": 5})
>>> costs.tolist()
[5.0, 1.0, 1.0]
>>> import torch
>>> within_budget(torch.tensor([[3.0, 2.0, 1.0]]), costs, 5).tolist()    # knees alone fills 5
[[True, False, False]]
>>> within_budget(torch.tensor([[3.0, 2.0, 1.0]]), costs, 4).tolist()    # knees does not fit
[[False, True, True]]
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cbm.config.budgets import REST, check_costs

if TYPE_CHECKING:
    from torch import Tensor

    from cbm.models.state import ConceptState

#: Slack of the budget check (costs are sums of floats).
EPS = 1e-9


def as_budget(k: Any) -> float | int:
    """A cost budget or total as written in results: an ``int`` when it is a whole number (``5``),
    else the number (rounded to 9 decimals, so a sum of float costs reads as written)."""
    k = round(float(k), 9)
    return int(k) if k.is_integer() else k


def cost_list(names: Sequence[str], spec: Mapping[str, Any] | None, where: str = "costs.concepts") -> list[float] | None:
    """Per-concept costs in the order of ``names`` (``None``: no spec, every concept costs 1 and
    budgets count concepts). A name is priced by its exact key, else by the first glob that matches it
    (``block_*``), else by ``rest`` (default 1); a key that prices no concept is an error (a typo)."""
    spec = check_costs(spec, where)
    if spec is None:
        return None
    rest = spec.get(REST, 1.0)
    keys = [k for k in spec if k != REST]
    unused = [k for k in keys if k not in names and not any(fnmatch.fnmatchcase(n, k) for n in names)]
    if unused:
        raise ValueError(f"{where}: unknown concept(s) {unused} (the model has {list(names)})")
    out = []
    for n in names:
        key = n if n in spec else next((k for k in keys if fnmatch.fnmatchcase(n, k)), None)
        out.append(spec[key] if key is not None else rest)
    return out


def cost_vector(names: Sequence[str], spec: Mapping[str, Any] | None) -> Tensor | None:
    """:func:`cost_list` as a float tensor ``[m]`` (``None`` without a spec)."""
    import torch

    costs = cost_list(names, spec)
    return None if costs is None else torch.tensor(costs, dtype=torch.float32)


def within_budget(priority: Tensor, costs: Tensor, budget: float, unit_of: Tensor | None = None) -> Tensor:
    """Bool ``[B,m]``: concepts taken in decreasing ``priority`` while they fit ``budget``
    (``-inf``: never taken); one that does not fit is skipped. ``unit_of`` (``long [m]``, typed
    concepts): a column whose unit (categorical concept) was asked already is not asked again, the
    answer covers it. A loop over the ``m`` ranks, vectorised over the batch."""
    import torch

    order = priority.argsort(dim=1, descending=True, stable=True)
    ranked = priority.gather(1, order)
    cost = costs.to(priority.device, torch.float64)[order]
    spent = torch.zeros(priority.shape[0], dtype=torch.float64, device=priority.device)
    take = torch.zeros_like(priority, dtype=torch.bool)
    unit = None if unit_of is None else unit_of.to(priority.device)[order]  # [B, m]
    asked = None if unit_of is None else torch.zeros(priority.shape[0], int(unit_of.max()) + 1, dtype=torch.bool, device=priority.device)
    for j in range(priority.shape[1]):
        t = (ranked[:, j] > float("-inf")) & (spent + cost[:, j] <= budget + EPS)
        if asked is not None:
            t &= ~asked.gather(1, unit[:, j : j + 1]).squeeze(1)
            asked.scatter_(1, unit[:, j : j + 1], t[:, None] | asked.gather(1, unit[:, j : j + 1]))
        spent += t * cost[:, j]
        take[:, j] = t
    return torch.zeros_like(take).scatter_(1, order, take)


def budget_total(costs: Tensor | None, requestable: list[int], unit_of: Tensor | None = None) -> float | int:
    """What asking every requestable concept takes: their number (a categorical concept counted once)
    without costs, else the sum of their costs (a categorical concept at its dearest value)."""
    units: dict[int, float] = {}
    for j in requestable:
        u = j if unit_of is None else int(unit_of[j])
        units[u] = max(units.get(u, 0.0), 1.0 if costs is None else float(costs[j]))
    return len(units) if costs is None else as_budget(sum(units.values()))


def priority(policy: Any, model: Any, state: ConceptState, costs: Tensor, per_cost: bool = True) -> Tensor:
    """``[B,m]`` the policy's order of preference under costs, ``-inf`` where it may not ask
    (already intervened, not allowed, or never asked by a thresholded policy); see the module doc."""
    import torch

    from cbm.interventions.policies.base import available_concepts

    avail = available_concepts(state, getattr(policy, "allowed", None))
    values = getattr(policy, "values", None)
    scores = getattr(policy, "scores", None)
    if callable(values):
        v = values(model, state).float()
        pr = v / costs.to(v.device) if per_cost else v
    elif callable(scores):
        pr = scores(model, state).float()
    else:
        m = state.n_concepts
        first = torch.full(state.probs.shape, m + 1, dtype=torch.long, device=state.probs.device)
        for j in range(1, m + 1):
            asked = policy.select(model, state, j) & (first > m)
            first[asked] = j
        pr = torch.where(
            first <= m, -first.float(), torch.full_like(first, float("-inf"), dtype=torch.float32)
        )
    return pr.masked_fill(~avail, float("-inf"))


def spent(mask: Tensor, costs: Tensor | None) -> Tensor:
    """``[B]`` what the requests ``mask`` cost (their number without costs)."""
    if costs is None:
        return mask.sum(1).float()
    return (mask.float() * costs.to(mask.device)[None]).sum(1)
