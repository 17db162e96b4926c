"""Deprecated alias: ``cbm.experiments.common`` moved to :mod:`cbm.core.common` (the command-line
front's plumbing) and ``resolve_device`` to :mod:`cbm.training.device`; these names work for one more
release (see CHANGELOG)."""

import warnings

from cbm.core.common import *  # noqa: F403
from cbm.core.common import (  # noqa: F401
    CONF_DIR,
    DRY_RUN_ENV,
    USER_ERRORS,
    clean_errors,
    describe,
    dry_run,
    fail,
    hydra_run_dir,
    log_to,
    markdown_table,
    one_line,
    remove_fresh,
    remove_if_unused,
    run_stamp,
    say,
    write_json_atomic,
    write_text_atomic,
)
from cbm.training.device import resolve_device  # noqa: F401

warnings.warn("cbm.experiments.common moved to cbm.core.common", DeprecationWarning, stacklevel=2)
