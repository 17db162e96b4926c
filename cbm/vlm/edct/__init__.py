"""Explanation-driven counterfactual testing (EDCT): does a VLM's answer and explanation stay
consistent when the visual evidence it cites is edited? ``cbm-edct`` runs it; see
:mod:`cbm.vlm.edct.pipeline` for the stages and :mod:`cbm.vlm.edct.metrics` for the scores."""
