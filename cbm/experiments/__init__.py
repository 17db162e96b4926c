"""Hydra entry points (``cbm-train``, ``cbm-data``, ``cbm-intervene``, ``cbm-automate``)."""
