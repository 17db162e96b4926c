"""Interveners: who supplies the values of the requested concepts (one module each; see
:mod:`cbm.interventions.registry`). Every intervener is a callable ``(batch, state, mask) -> values [B,m]``."""
