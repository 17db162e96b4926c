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


def numerics() -> dict[str, object]:
    """What a run's floating-point results depend on beyond its seed and config: the torch build, the
    CPU's vector kernels torch dispatches to (a generic-kernel run of the same seed trains other
    weights), the intra-op threads and the GPU. Written into each training's ``metrics.json`` so a
    rerun that differs can be told apart from one on other numerics."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "gpu": gpu}  # fmt: skip
