"""The GPU checks' dry run (``GPU_DRY_RUN=1``, ``benchmarks/gpu_lib.sh``) on a machine without CUDA:
on this folder's ``PYTHONPATH`` entry, torch reports one CUDA device, so every command line that
names ``cuda`` (``trainer=gpu``, ``device=cuda``, ``finetune=qlora``, ``repair.quant=4bit``) passes
its command-line checks, which stop there (``CBM_DRY_RUN=1``). Nothing is run on the fake device.
Inert unless ``GPU_DRY_RUN=1``; torch is patched when something imports it, not before."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys


class _FakeCuda(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 - the finder protocol
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):  # noqa: ANN001
            run(module)
            module.cuda.is_available = lambda: True
            module.cuda.device_count = lambda: 1
            module.cuda.get_device_name = lambda *a, **k: "dry run (no device)"

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("GPU_DRY_RUN") == "1":
    sys.meta_path.insert(0, _FakeCuda())
