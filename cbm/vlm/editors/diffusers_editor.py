"""Counterfactual edits by a local InstructPix2Pix-style diffusion pipeline.

A local alternative to :mod:`cbm.vlm.editors.hosted` (no requests leave the machine): the
``diffusers`` pipeline is loaded from a local path on the first edit. ``diffusers`` is optional;
without it the editor fails at construction with a :class:`MissingDependencyError` that says how
to install it. The edit region is unknown (``mask=None``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from cbm.vlm.editors.base import EditInstruction, EditItem, EditResult, edit_prompt

INSTALL_HINT = "DiffusersEditor needs the 'diffusers' package (and torch): pip install diffusers"


class MissingDependencyError(ImportError):
    """An optional dependency of an editor is not installed."""


def _diffusers() -> Any:
    try:
        import diffusers
    except ImportError as err:
        raise MissingDependencyError(INSTALL_HINT) from err
    return diffusers


class DiffusersEditor:
    """InstructPix2Pix editing from a local model directory.

    Parameters
    ----------
    model_path : local directory of a ``StableDiffusionInstructPix2PixPipeline``.
    device : torch device (``None``: ``cuda`` when available, else ``cpu``).
    steps, guidance_scale, image_guidance_scale : the pipeline's sampling settings.
    seed : generator seed, so an edit is reproducible.
    """

    def __init__(
        self,
        model_path: str,
        *,
        device: str | None = None,
        steps: int = 20,
        guidance_scale: float = 7.5,
        image_guidance_scale: float = 1.5,
        seed: int = 0,
    ):
        self._diffusers = _diffusers()
        self.model_path = model_path
        self.device = device
        self.steps = steps
        self.guidance_scale = guidance_scale
        self.image_guidance_scale = image_guidance_scale
        self.seed = seed
        self._pipe: Any | None = None

    @staticmethod
    def check_settings(settings: Mapping[str, Any], where: str = "editor") -> None:
        """A config's editor settings (``editor.kind=diffusers``), checked without loading anything:
        known names of the right types, a model directory, sane numbers, ``diffusers`` installed."""
        import importlib.util

        from cbm.vlm.typed import check_kwargs

        check_kwargs(DiffusersEditor, settings, where)
        if not Path(settings["model_path"]).expanduser().is_dir():
            raise ValueError(f"{where}.model_path: no model directory at '{settings['model_path']}' (a local InstructPix2Pix pipeline; no downloads)")
        if not 1 <= settings.get("steps", 20) <= 1000 or settings.get("seed", 0) < 0:
            raise ValueError(f"{where}: steps must lie in [1, 1000] and seed be >= 0")
        if min(settings.get("guidance_scale", 7.5), settings.get("image_guidance_scale", 1.5)) < 0:
            raise ValueError(f"{where}: guidance scales must be >= 0")
        if importlib.util.find_spec("diffusers") is None:
            raise ValueError(f"{where}.kind=diffusers: {INSTALL_HINT}")

    def _pipeline(self) -> Any:
        if self._pipe is None:
            import torch

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            dtype = torch.float16 if device.startswith("cuda") else torch.float32
            cls = self._diffusers.StableDiffusionInstructPix2PixPipeline
            pipe = cls.from_pretrained(self.model_path, torch_dtype=dtype, local_files_only=True)
            self._pipe = pipe.to(device)
            self.device = device
        return self._pipe

    def edit(self, item: EditItem, instruction: EditInstruction) -> EditResult:
        """Run the pipeline with the instruction's prompt; the output is resized back to the input size."""
        import torch

        pipe = self._pipeline()
        prompt = edit_prompt(instruction)
        image = item.image.convert("RGB")
        out = pipe(
            prompt,
            image=image,
            num_inference_steps=self.steps,
            guidance_scale=self.guidance_scale,
            image_guidance_scale=self.image_guidance_scale,
            generator=torch.Generator(device=self.device).manual_seed(self.seed),
        ).images[0]
        if out.size != image.size:
            out = out.resize(image.size, Image.Resampling.BICUBIC)
        changed = {"attribute": instruction.concept, "from": None, "to": instruction.target or instruction.change}
        return EditResult(out, None, f"InstructPix2Pix edit: {prompt.splitlines()[0]}", changed)
