"""Is every runtime dependency of a GPU check importable? Answers in well under a second.

    python benchmarks/deps_check.py gpu      # what `make gpu-check` needs
    python benchmarks/deps_check.py qlora    # what `make qlora-check` needs

The project's GPU machine has no package index and, when last measured, lacked hydra-core,
omegaconf, antlr4, wandb, bitsandbytes and highspy; device minutes are scarce, so the check
scripts ask this first and stop with the list instead of an ImportError minutes in. It looks the
modules up (``importlib.util.find_spec``) without importing them: no torch import, no CUDA init.
Exit status 1 and one line ``deps_check: missing ...`` when anything is missing.

The lists follow pyproject.toml: tests/core/test_packaging.py checks that every dependency there
is in a group below or in :data:`NOT_NEEDED` with the reason.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

#: Distribution -> the module it provides (import name).
MODULES = {
    "torch": "torch", "torchvision": "torchvision", "lightning": "lightning", "torchmetrics": "torchmetrics",
    "hydra-core": "hydra", "omegaconf": "omegaconf", "antlr4-python3-runtime": "antlr4", "numpy": "numpy",
    "pillow": "PIL", "scipy": "scipy", "highspy": "highspy", "matplotlib": "matplotlib", "filelock": "filelock",
    "tqdm": "tqdm", "pyyaml": "yaml", "pytest": "pytest", "pytest-xdist": "xdist",
    "transformers": "transformers", "peft": "peft", "accelerate": "accelerate", "bitsandbytes": "bitsandbytes",
    "safetensors": "safetensors",
}  # fmt: skip
#: What each check script runs on: gpu_check.sh (tests, seed sweeps, intervene, automate with
#: logger=csv_only and WANDB_MODE=disabled) and qlora_gpu_check.sh (the fine-tuning path on top).
GROUPS = {
    "gpu": ["torch", "torchvision", "lightning", "torchmetrics", "hydra-core", "omegaconf", "antlr4-python3-runtime",
            "numpy", "pillow", "scipy", "highspy", "matplotlib", "filelock", "tqdm", "pyyaml", "pytest", "pytest-xdist"],
}  # fmt: skip
GROUPS["qlora"] = [*GROUPS["gpu"], "transformers", "peft", "accelerate", "bitsandbytes", "safetensors"]
#: Runtime dependencies the GPU checks do not import, and why.
NOT_NEEDED = {
    "wandb": "the checks log with logger=csv_only and WANDB_MODE=disabled (wandb is imported only by the W&B logger)",
    "hydra-submitit-launcher": "a Hydra launcher plugin, loaded only with hydra/launcher=slurm",
    "hydra-optuna-sweeper": "a Hydra sweeper plugin, loaded only with +tune=... (hydra/sweeper=optuna)",
    "hydra-joblib-launcher": "a Hydra launcher plugin, loaded only with hydra/launcher=parallel",
}
#: Distributions `make gpu-wheels` builds into .whl/ (the rest is on the GPU machine's image).
WHEELS = ["hydra-core", "omegaconf", "antlr4-python3-runtime", "highspy", "bitsandbytes"]


def missing(group: str) -> list[str]:
    """The distributions of ``group`` whose module cannot be found."""
    out = []
    for dist in GROUPS[group]:
        try:
            found = importlib.util.find_spec(MODULES[dist]) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(dist)
    return out


def wheels_missing(folder: Path) -> list[str]:
    """The distributions of :data:`WHEELS` without a wheel in ``folder``."""
    have = {re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower() for w in folder.glob("*.whl")}
    return [d for d in WHEELS if d not in have]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("group", nargs="?", choices=sorted(GROUPS))
    ap.add_argument("--wheels", type=Path, help="check instead that this folder holds every wheel to carry")
    a = ap.parse_args(argv)
    if a.wheels is not None:
        gone = wheels_missing(a.wheels)
        size = sum(w.stat().st_size for w in a.wheels.glob("*.whl")) / 2**20
        if gone:
            print(f"deps_check: {a.wheels} lacks wheels for {', '.join(gone)}", file=sys.stderr)
            return 1
        print(f"deps_check: {a.wheels} holds a wheel for each of {', '.join(WHEELS)} ({size:.1f} MiB in all)")
        return 0
    if a.group is None:
        ap.error("name a group, or --wheels DIR")
    gone = missing(a.group)
    if gone:
        carried = [d for d in gone if d in WHEELS]
        hint = " (in .whl/ after `make gpu-wheels`)" if len(carried) == len(gone) else ""
        print(f"deps_check: missing {len(gone)} of {len(GROUPS[a.group])} for {a.group}: {', '.join(gone)}{hint}", file=sys.stderr)
        return 1
    print(f"deps_check: all {len(GROUPS[a.group])} dependencies of {a.group} found (Python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
