"""Responsiveness of concept subsets and the search for the most responsive one.

Following Cheon et al., *Feature Responsiveness Scores* (ICLR 2025), the responsiveness of a subset
``S`` of concepts for one example is the probability that a human's answer about ``S`` changes the
prediction::

    resp(S) = sum_{a in {0,1}^|S|} p(a | S) * [ y_hat != y_hat^a ]

where ``y_hat^a`` is the prediction after setting ``S`` to ``a`` through the architecture's own
intervention and ``p(a | S)`` a prior over the answers (:mod:`.priors`).

* :mod:`.tables` — every subset of size ``1..k``, level by level, as index tensors;
* :mod:`.exact` — ``resp`` of every subset: the additive fast path (:mod:`.additive`) when the
  model's head is additive in the concepts, else the model's ``pair_logits`` hook on every
  (example, subset, assignment), in memory-bounded chunks;
* :mod:`.greedy` — grow ``S`` one concept at a time when the budget forbids the exact search;
* :mod:`.whole` — ``resp`` of the whole set of requestable concepts (KFlip's ``k = max``);
* :mod:`.search` — the best subset / prefix (ties: smaller, then first) and which search a budget gets;
* :mod:`.reference` — a plain per-subset loop (tests, the benchmark's baseline).

The policy that uses all of this is :class:`cbm.interventions.policies.responsiveness.ResponsivenessPolicy`.
"""

from cbm.interventions.responsiveness.common import Additive, additive, trim_state
from cbm.interventions.responsiveness.exact import exact_pairs, pair_weights, subset_responsiveness
from cbm.interventions.responsiveness.greedy import greedy_chain, greedy_search
from cbm.interventions.responsiveness.priors import EmpiricalPrior, IndependentPrior, Prior, make_prior
from cbm.interventions.responsiveness.reference import responsiveness_loop
from cbm.interventions.responsiveness.search import (
    DEFAULT_CHUNK_MB,
    DEFAULT_EXACT_MAX_CANDIDATES,
    DEFAULT_MAX_ASSIGNMENTS,
    TIE_TOL,
    SearchResult,
    choose_exact,
    choose_prefix,
    first_within,
    search_method,
)
from cbm.interventions.responsiveness.tables import (
    Level,
    SubsetTable,
    assignment_bits,
    n_candidate_pairs,
    subset_table,
)
from cbm.interventions.responsiveness.whole import whole_responsiveness

__all__ = [
    "DEFAULT_CHUNK_MB", "DEFAULT_EXACT_MAX_CANDIDATES", "DEFAULT_MAX_ASSIGNMENTS", "TIE_TOL", "Additive",
    "EmpiricalPrior", "IndependentPrior", "Level", "Prior", "SearchResult", "SubsetTable", "additive",
    "assignment_bits", "choose_exact", "choose_prefix", "exact_pairs", "first_within", "greedy_chain",
    "greedy_search", "make_prior", "n_candidate_pairs", "pair_weights", "responsiveness_loop",
    "search_method", "subset_responsiveness", "subset_table", "trim_state", "whole_responsiveness",
]  # fmt: skip
