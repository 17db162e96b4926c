"""Text-prompted masks for EDCT's edit verification: an open-vocabulary detector's boxes, then SAM.

:class:`DetectorSegmenter` is the paper's "open-vocabulary detector followed by a segmentation
model": the concept's name prompts a ``transformers`` detector (OWLv2,
``Owlv2ForObjectDetection``, or Grounding DINO, ``GroundingDinoForObjectDetection``; the
``detector`` kind picks the prompt format and post-processing), its best boxes above
``box_threshold`` prompt SAM (``SamModel``), and the union of SAM's masks is the concept's region.
Both models load from local directories (``local_files_only``: no downloads) on the first mask;
:mod:`cbm.vlm.tiny_edit` writes tiny random ones to smoke-test the path. A config names it as
``segmenter: {target: cbm.vlm.segmenters:DetectorSegmenter, kwargs: {detector_path: ..., sam_path: ...}}``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cbm.vlm.verify import Segmenter

__all__ = ["DETECTOR_KINDS", "DetectorSegmenter"]

#: Detector kinds: ``owlv2`` (``Owlv2ForObjectDetection``), ``grounding_dino`` (``GroundingDinoForObjectDetection``).
DETECTOR_KINDS = ("owlv2", "grounding_dino")
#: Upper bound on ``max_boxes`` (each box is one SAM prompt).
MAX_BOXES = 100


class DetectorSegmenter(Segmenter):
    """Concept masks from a text-prompted detector's boxes refined by SAM.

    Parameters
    ----------
    detector_path : local directory of the detector and its processor (``save_pretrained`` layout).
    sam_path : local directory of a ``SamModel`` and its ``SamProcessor``.
    detector : ``owlv2`` or ``grounding_dino``.
    box_threshold : smallest detector score of a box kept.
    text_threshold : Grounding DINO's smallest text-token score (ignored by OWLv2).
    mask_threshold : SAM logit above which a pixel is in the mask.
    max_boxes : the best boxes (by score) that prompt SAM.
    device : torch device (``None``: ``cuda`` when available, else ``cpu``).
    """

    def __init__(
        self,
        detector_path: str,
        sam_path: str,
        *,
        detector: str = "owlv2",
        box_threshold: float = 0.1,
        text_threshold: float = 0.25,
        mask_threshold: float = 0.0,
        max_boxes: int = 3,
        device: str | None = None,
    ):
        self.check_settings({"detector_path": detector_path, "sam_path": sam_path, "detector": detector, "box_threshold": box_threshold,
                             "text_threshold": text_threshold, "mask_threshold": mask_threshold, "max_boxes": max_boxes})  # fmt: skip
        self.detector_path, self.sam_path, self.detector = detector_path, sam_path, detector
        self.box_threshold, self.text_threshold, self.mask_threshold = box_threshold, text_threshold, mask_threshold
        self.max_boxes, self.device = max_boxes, device
        self._models: tuple[Any, Any, Any, Any] | None = None
        self._lock = threading.Lock()  # EDCT runs items in threads: one load, one forward at a time

    @staticmethod
    def check_settings(settings: Mapping[str, Any], where: str = "segmenter.kwargs") -> None:
        """The settings' values, checked without loading anything (one line each): model
        directories that exist, a known detector kind, thresholds in range."""
        for key in ("detector_path", "sam_path"):
            if key in settings and not Path(str(settings[key])).expanduser().is_dir():
                raise ValueError(f"{where}.{key}: no model directory at '{settings[key]}' (a local checkpoint; no downloads)")
        if settings.get("detector", "owlv2") not in DETECTOR_KINDS:
            raise ValueError(f"{where}.detector: unknown detector '{settings.get('detector')}' (choose from: {', '.join(DETECTOR_KINDS)})")
        for key in ("box_threshold", "text_threshold"):
            value = settings.get(key, 0.0)
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                raise ValueError(f"{where}.{key}: must lie in [0, 1], got {value!r}")
        mask_threshold = settings.get("mask_threshold", 0.0)
        if not (isinstance(mask_threshold, int | float) and math.isfinite(mask_threshold)):
            raise ValueError(f"{where}.mask_threshold: must be a finite number (a SAM logit), got {mask_threshold!r}")
        boxes = settings.get("max_boxes", 1)
        if isinstance(boxes, bool) or not isinstance(boxes, int) or not 1 <= boxes <= MAX_BOXES:
            raise ValueError(f"{where}.max_boxes: must lie in [1, {MAX_BOXES}], got {boxes!r}")

    # ------------------------------------------------------------------ loading
    def _load(self) -> tuple[Any, Any, Any, Any]:
        if self._models is None:
            import torch
            from transformers import (
                AutoModelForZeroShotObjectDetection,
                AutoProcessor,
                SamModel,
                SamProcessor,
            )

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            det_proc = AutoProcessor.from_pretrained(self.detector_path, local_files_only=True)
            det = AutoModelForZeroShotObjectDetection.from_pretrained(self.detector_path, local_files_only=True).to(device).eval()
            sam_proc = SamProcessor.from_pretrained(self.sam_path, local_files_only=True)
            sam = SamModel.from_pretrained(self.sam_path, local_files_only=True).to(device).eval()
            self.device = device
            self._models = (det_proc, det, sam_proc, sam)
        return self._models

    # ------------------------------------------------------------------ masks
    def boxes(self, image: Any, concept: str) -> np.ndarray:
        """The detector's best boxes for ``concept`` (``float [n, 4]``, ``x0, y0, x1, y1`` in pixels,
        clipped to the image, at least one pixel wide), best first; ``n`` may be 0."""
        import torch

        from cbm.vlm.messages import to_pil

        pil = to_pil(image).convert("RGB")
        w, h = pil.size
        with self._lock:
            det_proc, det, _, _ = self._load()
            if self.detector == "owlv2":
                inputs = det_proc(text=[[concept]], images=pil, return_tensors="pt", padding=True, truncation=True).to(self.device)
                with torch.no_grad():
                    out = det(**inputs)
                side = max(w, h)  # OWLv2 pads to a square at the bottom / right: boxes are in its frame
                found = det_proc.post_process_grounded_object_detection(out, threshold=self.box_threshold, target_sizes=[(side, side)])[0]
            else:
                prompt = concept.strip().lower().rstrip(".") + "."  # Grounding DINO's phrase format
                inputs = det_proc(images=pil, text=prompt, return_tensors="pt").to(self.device)
                with torch.no_grad():
                    out = det(**inputs)
                found = det_proc.post_process_grounded_object_detection(out, inputs["input_ids"], threshold=self.box_threshold,
                                                                        text_threshold=self.text_threshold, target_sizes=[(h, w)])[0]  # fmt: skip
        boxes = found["boxes"].detach().float().cpu().numpy().reshape(-1, 4)
        scores = found["scores"].detach().float().cpu().numpy().reshape(-1)
        boxes = boxes[np.argsort(-scores, kind="stable")[: self.max_boxes]]
        boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, w - 1)
        boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, h - 1)
        boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2] + 1)  # a degenerate box still prompts one pixel
        return boxes

    def mask(self, image: Any, concept: str) -> np.ndarray:
        """``bool [H, W]``: the union of SAM's masks for the detector's boxes (empty: nothing found)."""
        import torch

        from cbm.vlm.messages import to_pil

        pil = to_pil(image).convert("RGB")
        boxes = self.boxes(pil, concept)
        if not len(boxes):
            return np.zeros((pil.height, pil.width), bool)
        with self._lock:
            _, _, sam_proc, sam = self._load()
            inputs = sam_proc(images=pil, input_boxes=[boxes.tolist()], return_tensors="pt").to(self.device)
            with torch.no_grad():
                out = sam(**inputs, multimask_output=False)
            masks = sam_proc.image_processor.post_process_masks(out.pred_masks.cpu(), inputs["original_sizes"].cpu(),
                                                                inputs["reshaped_input_sizes"].cpu(), mask_threshold=self.mask_threshold)  # fmt: skip
        return masks[0].numpy().reshape(-1, pil.height, pil.width).any(axis=0)
