"""The ``device`` setting of the evaluation commands, as a torch device (torch imported only when
the device is resolved: validating a command line stays torch-free)."""

from __future__ import annotations

from cbm.config.names import DEVICES


def resolve_device(name: str):
    """``auto`` -> CUDA when available, else the CPU; ``cuda`` without a GPU is an error."""
    import torch

    if name not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got '{name}'")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda but no CUDA device is available")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
