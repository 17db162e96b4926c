"""Experiment tracking: W&B runs that a W&B user can slice, group, query and resume
(:mod:`cbm.tracking.wandb_run`), and a reader of offline runs (:mod:`cbm.tracking.offline`)."""
