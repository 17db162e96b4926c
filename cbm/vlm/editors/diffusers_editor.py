"""Counterfactual edits by local diffusion pipelines: InstructPix2Pix, and inpainting of the concept's region.

A local alternative to :mod:`cbm.vlm.editors.hosted` (no requests leave the machine): the
``diffusers`` pipeline is loaded from a local path on the first edit. ``diffusers`` is optional;
without it the editor fails at construction with a :class:`MissingDependencyError` that says how
to install it. InstructPix2Pix edits anywhere (``mask=None``); the inpainting editor edits the
region the run's segmenter found; both leave the mask to the verifier (``mask=None``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from cbm.vlm.editors.base import EditError, EditInstruction, EditItem, EditResult, edit_prompt

DEFAULT_STEPS = 20
#: Classifier-free guidance of the text prompt (the Stable Diffusion pipelines' usual value).
DEFAULT_GUIDANCE = 7.5
MAX_STEPS = 1000
#: The VAE's downsampling: pipeline sides are multiples of it.
LATENT_STRIDE = 8
DEFAULT_RESOLUTION, MAX_RESOLUTION = 512, 2048
INSTALL_HINT = "DiffusersEditor needs the 'diffusers' package (and torch): pip install diffusers"


class MissingDependencyError(ImportError):
    """An optional dependency of an editor is not installed."""


def _diffusers() -> Any:
    try:
        import diffusers
    except ImportError as err:
        raise MissingDependencyError(INSTALL_HINT) from err
    return diffusers


class _LocalPipeline:
    """What the local diffusion editors share: settings checked without loading, and the pipeline
    (:attr:`PIPELINE` of ``diffusers``) loaded from a local directory on the first edit."""

    PIPELINE = ""
    #: What the model directory must hold (in refusals).
    HOLDS = ""

    def __init__(self, model_path: str, *, device: str | None, steps: int, guidance_scale: float, seed: int):
        self._diffusers = _diffusers()
        self.model_path = model_path
        self.device = device
        self.steps = steps
        self.guidance_scale = guidance_scale
        self.seed = seed
        self._pipe: Any | None = None
        self._lock = threading.Lock()  # EDCT edits items in threads: one load, one denoising loop at a time

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any], where: str = "editor") -> None:
        """A config's editor settings, checked without loading anything: known names of the right
        types, a model directory, sane numbers, ``diffusers`` installed."""
        import importlib.util

        from cbm.core.validation import check_kwargs

        check_kwargs(cls, settings, where)
        if not Path(settings["model_path"]).expanduser().is_dir():
            raise ValueError(f"{where}.model_path: no model directory at '{settings['model_path']}' ({cls.HOLDS}; no downloads)")
        if not 1 <= settings.get("steps", DEFAULT_STEPS) <= MAX_STEPS or settings.get("seed", 0) < 0:
            raise ValueError(f"{where}: steps must lie in [1, {MAX_STEPS}] and seed be >= 0")
        if min(settings.get("guidance_scale", 0.0), settings.get("image_guidance_scale", 0.0)) < 0:
            raise ValueError(f"{where}: guidance scales must be >= 0")
        cls._check_more(settings, where)
        if importlib.util.find_spec("diffusers") is None:
            raise ValueError(f"{where}.kind=diffusers: {INSTALL_HINT}")

    @classmethod
    def _check_more(cls, settings: Mapping[str, Any], where: str) -> None:
        """Settings of one editor only (none here)."""

    def _pipeline(self) -> Any:
        if self._pipe is None:
            import torch

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            dtype = torch.float16 if device.startswith("cuda") else torch.float32
            cls = getattr(self._diffusers, self.PIPELINE)
            pipe = cls.from_pretrained(self.model_path, torch_dtype=dtype, local_files_only=True)
            pipe.set_progress_bar_config(disable=True)
            self._pipe = pipe.to(device)
            self.device = device
        return self._pipe

    def _generator(self, attempt_seed: int = 0) -> Any:
        import torch

        return torch.Generator(device=self.device).manual_seed(self.seed + attempt_seed)


class DiffusersEditor(_LocalPipeline):
    """InstructPix2Pix editing from a local model directory.

    Parameters
    ----------
    model_path : local directory of a ``StableDiffusionInstructPix2PixPipeline``.
    device : torch device (``None``: ``cuda`` when available, else ``cpu``).
    steps, guidance_scale, image_guidance_scale : the pipeline's sampling settings.
    seed : generator seed, so an edit is reproducible.
    """

    PIPELINE = "StableDiffusionInstructPix2PixPipeline"
    HOLDS = "a local InstructPix2Pix pipeline"

    def __init__(
        self,
        model_path: str,
        *,
        device: str | None = None,
        steps: int = DEFAULT_STEPS,
        guidance_scale: float = DEFAULT_GUIDANCE,
        image_guidance_scale: float = 1.5,
        seed: int = 0,
    ):
        super().__init__(model_path, device=device, steps=steps, guidance_scale=guidance_scale, seed=seed)
        self.image_guidance_scale = image_guidance_scale

    def edit(self, item: EditItem, instruction: EditInstruction) -> EditResult:
        """Run the pipeline with the instruction's prompt; the output is resized back to the input size."""
        prompt = edit_prompt(instruction)
        image = item.image.convert("RGB")
        with self._lock:
            pipe = self._pipeline()
            out = pipe(
                prompt,
                image=image,
                num_inference_steps=self.steps,
                guidance_scale=self.guidance_scale,
                image_guidance_scale=self.image_guidance_scale,
                generator=self._generator(),
            ).images[0]
        if out.size != image.size:
            out = out.resize(image.size, Image.Resampling.BICUBIC)
        changed = {"attribute": instruction.concept, "from": None, "to": instruction.target or instruction.change}
        return EditResult(out, None, f"InstructPix2Pix edit: {prompt.splitlines()[0]}", changed)


class DiffusersInpaintEditor(_LocalPipeline):
    """Inpainting of the concept's region (a ``StableDiffusionInpaintPipeline`` from a local directory).

    The region comes from the run's segmenter (EDCT hands it over as ``region``: the concept's
    pixels on the image being edited); without one the edit fails with an :class:`EditError`
    (an addition, whose concept is not in the image yet, has no region to inpaint). The image is
    resized to ``resolution`` (a multiple of the VAE's 8) for the pipeline and back, and with
    ``blend`` the result keeps the original's pixels outside the region, so the edit is local
    by construction (the VAE's round trip would otherwise touch every pixel).

    Parameters
    ----------
    model_path : local directory of a ``StableDiffusionInpaintPipeline``.
    device : torch device (``None``: ``cuda`` when available, else ``cpu``).
    steps, guidance_scale : the pipeline's sampling settings.
    seed : generator seed (a retry adds its attempt number, so a retried edit differs).
    resolution : side of the square the pipeline works at.
    blend : keep the original outside the region.
    """

    PIPELINE = "StableDiffusionInpaintPipeline"
    HOLDS = "a local Stable Diffusion inpainting pipeline"
    #: EDCT passes ``region=`` (the concept's mask on the image being edited) to editors that say so.
    uses_region = True

    def __init__(
        self,
        model_path: str,
        *,
        device: str | None = None,
        steps: int = DEFAULT_STEPS,
        guidance_scale: float = DEFAULT_GUIDANCE,
        seed: int = 0,
        resolution: int = DEFAULT_RESOLUTION,
        blend: bool = True,
    ):
        super().__init__(model_path, device=device, steps=steps, guidance_scale=guidance_scale, seed=seed)
        self.resolution = resolution
        self.blend = blend

    @classmethod
    def _check_more(cls, settings: Mapping[str, Any], where: str) -> None:
        res = settings.get("resolution", DEFAULT_RESOLUTION)
        if not (LATENT_STRIDE <= res <= MAX_RESOLUTION and res % LATENT_STRIDE == 0):
            raise ValueError(f"{where}.resolution: must be a multiple of {LATENT_STRIDE} in [{LATENT_STRIDE}, {MAX_RESOLUTION}], got {res}")

    def edit(self, item: EditItem, instruction: EditInstruction, region: np.ndarray | None = None, attempt: int = 0) -> EditResult:
        """Inpaint ``region`` (``bool [H, W]``) with the instruction's prompt; ``attempt`` varies the seed."""
        image = item.image.convert("RGB")
        size = (image.height, image.width)
        if region is None or not np.asarray(region).any():
            raise EditError(f"inpainting needs the region of '{instruction.concept}' in the image (the segmenter found none)")
        region = np.asarray(region, bool)
        if region.shape != size:
            raise EditError(f"inpainting region of shape {list(region.shape)} for an image of {list(size)}")
        prompt = edit_prompt(instruction)
        side = (self.resolution, self.resolution)
        mask_image = Image.fromarray(region.astype(np.uint8) * 255).resize(side, Image.Resampling.NEAREST)
        with self._lock:
            pipe = self._pipeline()
            out = pipe(prompt, image=image.resize(side, Image.Resampling.BICUBIC), mask_image=mask_image, height=self.resolution,
                       width=self.resolution, num_inference_steps=self.steps, guidance_scale=self.guidance_scale,
                       generator=self._generator(attempt)).images[0]  # fmt: skip
        out = out.convert("RGB").resize(image.size, Image.Resampling.BICUBIC)
        if self.blend:
            out = Image.fromarray(np.where(region[..., None], np.asarray(out), np.asarray(image)))
        changed = {"attribute": instruction.concept, "from": None, "to": instruction.target or instruction.change}
        return EditResult(out, None, f"inpainting edit: {prompt.splitlines()[0]}", changed)
