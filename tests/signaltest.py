"""Signal tests run in a process they own: a fresh interpreter whose SIGINT is *inherited ignored*, as
in a background job of a non-interactive shell (``make test &``, a CI runner) or after Lightning has
handled a Ctrl-C. No test changes the signal state of the pytest process, and the product must stop on
a signal whatever it inherited."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

#: Starts ``argv[1:]`` with SIGINT ignored and blocked: both survive ``exec``, as they do for a shell's
#: background job (the ignored disposition) or a thread that inherited a blocked mask.
HOSTILE_START = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def hostile_argv(*args: str) -> list[str]:
    """``python args...`` started the hostile way (:data:`HOSTILE_START`)."""
    return [sys.executable, "-c", HOSTILE_START, *args]


def run_snippet(code: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh interpreter started the hostile way; its output."""
    return subprocess.run(hostile_argv("-c", textwrap.dedent(code)), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})  # fmt: skip


def inherited_sigint(pid: int) -> tuple[bool, bool]:
    """(ignored, blocked) of SIGINT in the process ``pid``'s main thread, read from ``/proc``."""
    fields = dict(line.split(":\t", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in line)
    bit = 1 << (signal.SIGINT - 1)
    return bool(int(fields["SigIgn"], 16) & bit), bool(int(fields["SigBlk"], 16) & bit)
