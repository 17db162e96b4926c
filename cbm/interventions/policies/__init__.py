"""Policies: which concepts to request under a budget ``k`` (one module each; see
:mod:`cbm.interventions.registry`)."""
