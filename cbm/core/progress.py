"""When to draw progress bars: the one rule every command and tool shares."""

from __future__ import annotations

import sys


def progress_bar_wanted(setting: bool | str | None) -> bool:
    """``auto`` or ``None``: a progress bar only when stderr is a terminal (no carriage-return spam in logs)."""
    return sys.stderr.isatty() if setting in ("auto", None) else bool(setting)
