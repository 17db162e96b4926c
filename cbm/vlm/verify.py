"""Edit-locality verification for counterfactual image edits (EDCT).

A counterfactual edit ("close the robot's mouth") is only evidence about a model if it changed
the intended region and little else. :func:`verify_edit` checks that:

1. **align** ``after`` onto ``before`` (:func:`align`): ORB keypoints + RANSAC homography (images
   under ``min_size`` are upscaled for ORB, which needs ~31 px patches), then a Farneback dense-flow
   residual warp, smoothed and capped so it cannot undo the edit itself. Each stage is kept only
   when it lowers the grey-level residual outside the edit region by ``align_min_gain``, so an
   image that was already aligned is never resampled; too few keypoints/matches/inliers or a
   degenerate homography skip the stage and say why (never an error);
2. **change map** (:func:`change_map`): a pixel changed when the weighted score of RGB distance,
   HSV-cone distance (hue-aware, hue ignored where unsaturated) and gradient-magnitude difference
   (all in ``[0, 1]``) exceeds ``change_threshold``, OR its SSIM (``ssim_window`` window) is below
   ``ssim_threshold`` and its own score above the small ``ssim_gate`` (SSIM is a window statistic:
   ungated, it would flag every pixel within half a window of the edit). Pixels the alignment had
   to invent (warped in from outside ``after``) never count;
3. **locality**: the edit passes when the changed fraction of the mask is ``> tau_in`` and the
   changed fraction outside the mask dilated by ``dilate_px`` (the SSIM window and anti-aliasing
   spill over the mask's edge) is ``< tau_out``, and so is the changed fraction of the outside
   pixels with detail (``< tau_out_detail``): flat regions cannot show a blur, so on mostly flat
   images a whole-image blur hides below ``tau_out``.

:func:`verify_with_retry` (deprecated: ``cbm-edct``'s ``verify_retries`` is the one verify-and-retry
loop) runs an editor, verifies, and retries once on failure. Masks come from
the editor when it knows them (the synthetic renderers give exact masks) or from a pluggable
:class:`Segmenter`. Everything is vectorised numpy / OpenCV (plus scikit-image's SSIM).
"""

from __future__ import annotations

import abc
import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import cv2
import numpy as np
from skimage.metrics import structural_similarity

from cbm.core.targets import MARK_ATTR, mark, resolve
from cbm.vlm.messages import to_pil

F = TypeVar("F")

__all__ = [
    "AlignInfo",
    "Segmenter",
    "VerifyConfig",
    "VerifyResult",
    "align",
    "blur_sigma",
    "change_map",
    "mask_iou",
    "resolve_segmenter",
    "segmenter_factory",
    "segmenter_mask",
    "verify_edit",
    "verify_with_retry",
]

#: A homography whose linear part scales area outside ``[1/MAX_AREA_SCALE, MAX_AREA_SCALE]``, or
#: whose projective denominator varies by more than ``MAX_PERSPECTIVE`` across the image, is
#: degenerate (a small edit's realignment is close to a rigid motion).
MAX_AREA_SCALE = 2.0
MAX_PERSPECTIVE = 0.05


@dataclass(frozen=True)
class VerifyConfig:
    """Every threshold of the verifier. Distances and scores are in ``[0, 1]``; sizes in pixels of
    the input images unless stated.

    Defaults, measured on a 128 px textured scene: ``change_threshold=0.06`` is a uniform shift of
    ~28 grey levels (11%); Gaussian noise (sigma 3 levels) scores < 0.01 and the resampling error
    left after realigning a 2-degree rotation < 0.04 (99th percentiles), a recolouring scores
    > 0.3. ``ssim_threshold=0.6``: noise and realignment keep SSIM above ~0.78 (1st percentile)
    on textured content; a Gaussian blur of sigma 1.5 takes the median below 0.55. Flat regions
    are blind to blur and SSIM alike: a blur only counts where there was detail to lose.
    """

    align: bool = True  # ORB + RANSAC homography alignment of ``after`` onto ``before``
    orb_features: int = 500
    match_ratio: float = 0.8  # Lowe ratio test on the two nearest ORB descriptors
    ransac_reproj_px: float = 3.0  # RANSAC inlier threshold, pixels of the (upscaled) ORB image
    min_matches: int = 10  # fewer ratio-test matches, or fewer RANSAC inliers: no homography
    min_size: int = 256  # shorter side below this: upscale (integer factor) for ORB only
    flow: bool = True  # Farneback dense-flow residual warp after the homography
    flow_winsize: int = 15
    flow_smooth_px: float = 4.0  # Gaussian sigma of the (edit-masked) flow smoothing
    flow_max_px: float = 3.0  # cap on the residual flow magnitude
    align_min_gain: float = 0.05  # keep a warp only if it lowers the outside residual by this fraction
    w_rgb: float = 0.4
    w_hsv: float = 0.3
    w_grad: float = 0.3
    blur_sigma: float = 0.7  # Gaussian pre-smoothing of both images before the pixel score (0: none)
    # ... at a shorter side of ``blur_ref_px`` and above; smaller images get a proportionally smaller
    # sigma (a thin 20-pixel hand edit at 32 px is erased by sigma 0.7). 0: the same sigma at every size.
    blur_ref_px: int = 128
    change_threshold: float = 0.06
    ssim_threshold: float = 0.6  # 0: SSIM off
    ssim_gate: float = 0.02  # an SSIM-flagged pixel counts only if its own score exceeds this (0: plain OR)
    ssim_window: int = 7  # odd, >= 3 (shrunk to fit tiny images)
    dilate_px: int = 3
    tau_in: float = 0.10
    tau_out: float = 0.30
    # Flat regions cannot show a blur, so on mostly flat images (synthetic renders) a whole-image
    # blur changes few pixels overall. Also bound the changed share of the out-of-mask *detail*
    # pixels (gradient magnitude of ``before`` above ``detail_threshold``); 1.0 turns it off.
    tau_out_detail: float = 0.50
    detail_threshold: float = 0.05

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type in ("bool", bool) and not isinstance(v, (bool, np.bool_)):
                raise ValueError(f"VerifyConfig.{f.name}: expected a bool, got {v!r}")
            if f.type in ("int", int) and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
                raise ValueError(f"VerifyConfig.{f.name}: expected an int, got {v!r}")
            if f.type in ("float", float) and (
                isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not math.isfinite(v)
            ):
                raise ValueError(f"VerifyConfig.{f.name}: expected a finite number, got {v!r}")
        checks = {
            "orb_features": self.orb_features >= 10,
            "match_ratio": 0.0 < self.match_ratio <= 1.0,
            "ransac_reproj_px": self.ransac_reproj_px > 0,
            "min_matches": self.min_matches >= 4,  # a homography needs 4 correspondences
            "min_size": self.min_size >= 0,
            "flow_winsize": self.flow_winsize >= 3,
            "flow_smooth_px": self.flow_smooth_px >= 0,
            "flow_max_px": self.flow_max_px > 0,
            "align_min_gain": 0.0 <= self.align_min_gain < 1.0,
            "w_rgb": self.w_rgb >= 0,
            "w_hsv": self.w_hsv >= 0,
            "w_grad": self.w_grad >= 0,
            "blur_sigma": self.blur_sigma >= 0,
            "blur_ref_px": self.blur_ref_px >= 0,
            "change_threshold": 0.0 < self.change_threshold < 1.0,
            "ssim_threshold": 0.0 <= self.ssim_threshold <= 1.0,
            "ssim_gate": 0.0 <= self.ssim_gate <= self.change_threshold,
            "ssim_window": self.ssim_window >= 3 and self.ssim_window % 2 == 1,
            "dilate_px": self.dilate_px >= 0,
            "tau_in": 0.0 <= self.tau_in < 1.0,
            "tau_out": 0.0 < self.tau_out <= 1.0,
            "tau_out_detail": 0.0 < self.tau_out_detail <= 1.0,
            "detail_threshold": 0.0 <= self.detail_threshold < 1.0,
        }
        rules = {
            "orb_features": ">= 10", "match_ratio": "in (0, 1]", "min_matches": ">= 4",
            "flow_winsize": ">= 3", "align_min_gain": "in [0, 1)", "change_threshold": "in (0, 1)",
            "ssim_threshold": "in [0, 1]",
            "ssim_gate": "in [0, change_threshold]", "ssim_window": "odd and >= 3", "tau_in": "in [0, 1)",
            "tau_out": "in (0, 1]", "ransac_reproj_px": "> 0", "flow_max_px": "> 0",
            "tau_out_detail": "in (0, 1]", "detail_threshold": "in [0, 1)",
        }  # fmt: skip
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"VerifyConfig.{name} must be {rules.get(name, '>= 0')}, got {getattr(self, name)!r}")
        if self.w_rgb + self.w_hsv + self.w_grad <= 0:
            raise ValueError("VerifyConfig: w_rgb + w_hsv + w_grad must be > 0")


@dataclass(frozen=True)
class AlignInfo:
    """What :func:`align` did. ``method``: ``"none"``, ``"homography"``, ``"flow"`` or
    ``"homography+flow"``; ``skipped``: why a stage was not applied (``"; "``-joined, ``""`` if none);
    ``residual_*``: mean absolute grey difference (0..255) outside the edit region before / after;
    ``valid_fraction``: share of pixels that map inside ``after`` (the rest are ignored)."""

    method: str = "none"
    skipped: str = ""
    scale: int = 1  # ORB upscale factor
    n_keypoints: int = 0  # in ``before`` / ``after``, the smaller
    n_matches: int = 0
    n_inliers: int = 0
    homography: tuple[tuple[float, ...], ...] | None = None  # after -> before, input pixels
    flow_px: float = 0.0  # mean magnitude of the applied residual flow
    residual_before: float = 0.0
    residual_after: float = 0.0
    valid_fraction: float = 1.0


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :func:`verify_edit`: ``changed`` is the ``bool [H,W]`` change map in ``before``'s frame."""

    passed: bool
    in_ratio: float
    out_ratio: float
    changed: np.ndarray
    alignment: AlignInfo
    reason: str


class Segmenter(abc.ABC):
    """A pluggable mask source (detector / segmenter / VLM grounding): the pixels showing ``concept``.
    A config's ``segmenter.target`` names a subclass (or a :func:`segmenter_factory`)."""

    @abc.abstractmethod
    def mask(self, image: Any, concept: str) -> np.ndarray:  # bool [H, W]
        ...


#: The kind :func:`segmenter_factory` marks (:func:`cbm.core.targets.mark`).
FACTORY_KIND = "segmenter_factory"
#: The attribute :func:`segmenter_factory` sets on a function (or class) that builds a :class:`Segmenter`.
FACTORY_MARK = MARK_ATTR.format(FACTORY_KIND)
#: Mark a function (or class) as a factory of :class:`Segmenter` objects, so a config may name it as
#: a ``segmenter.target`` (an unmarked function is never called from a config).
segmenter_factory: Callable[[F], F] = mark(FACTORY_KIND)
#: What a ``segmenter.target`` must name (in refusals).
SEGMENTER_NEED = "a Segmenter class or a factory marked @cbm.vlm.verify.segmenter_factory"


def resolve_segmenter(target: Any) -> Callable[..., Segmenter]:
    """The class or marked factory a ``segmenter.target`` (``"module:name"``) names, imported and
    checked but not called (:func:`cbm.core.targets.resolve`): a concrete subclass of
    :class:`Segmenter`, or a function / class marked by :func:`segmenter_factory`. Anything else
    (``os:system``, ``builtins:eval``, a module, a class with a ``mask`` method that does not
    derive from :class:`Segmenter`) is one ``ValueError`` line and is never called."""
    return resolve(target, "segmenter.target", kinds=(Segmenter,), mark=FACTORY_KIND, need=SEGMENTER_NEED,
                   check=lambda cls: not inspect.isabstract(cls))  # fmt: skip


# --------------------------------------------------------------------------- inputs
def _rgb(image: Any, name: str) -> np.ndarray:
    """``uint8 [H,W,3]`` from a PIL image or an array (grey, RGB, float in [0, 1], ``[3,H,W]``)."""
    try:
        pil = to_pil(image)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None
    arr = np.asarray(pil.convert("RGB"), dtype=np.uint8)
    if min(arr.shape[:2]) < 2:
        raise ValueError(f"{name}: image is too small ({arr.shape[0]}x{arr.shape[1]})")
    return arr


def _pair(before: Any, after: Any) -> tuple[np.ndarray, np.ndarray]:
    b, a = _rgb(before, "before"), _rgb(after, "after")
    if b.shape != a.shape:
        raise ValueError(f"before and after sizes differ: {b.shape[1]}x{b.shape[0]} vs {a.shape[1]}x{a.shape[0]} (WxH)")
    return b, a


def _mask(mask: Any, shape: tuple[int, ...], name: str = "mask") -> np.ndarray:
    m = np.asarray(mask)
    if m.ndim == 3 and m.shape[0] == 1:
        m = m[0]
    if m.shape != tuple(shape[:2]):
        raise ValueError(f"{name}: expected shape {tuple(shape[:2])} (the image's HxW), got {m.shape}")
    return m.astype(bool)


def _dilate(mask: np.ndarray, px: int) -> np.ndarray:
    if px <= 0:
        return mask.copy()
    k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * px + 1, 2 * px + 1))
    return cv2.dilate(mask.astype(np.uint8), k).astype(bool)


def _grey(rgb: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)


# --------------------------------------------------------------------------- alignment
def _residual(b: np.ndarray, a: np.ndarray, region: np.ndarray) -> float:
    return float(np.abs(b.astype(np.float32) - a.astype(np.float32))[region].mean()) if region.any() else 0.0


def _homography(
    b_grey: np.ndarray, a_grey: np.ndarray, keep: np.ndarray, cfg: VerifyConfig
) -> tuple[np.ndarray | None, dict[str, Any]]:
    """ORB + ratio test + RANSAC: the ``after -> before`` homography in input pixels, or ``None``
    and the reason. ``keep``: where keypoints may lie (outside the edit)."""
    h, w = b_grey.shape
    f = max(1, math.ceil(cfg.min_size / min(h, w))) if min(h, w) < cfg.min_size else 1
    info: dict[str, Any] = {"scale": f}
    size = (w * f, h * f)

    def up(x: np.ndarray, interp: int = cv2.INTER_CUBIC) -> np.ndarray:
        return cv2.resize(x, size, interpolation=interp) if f > 1 else x

    det_mask = up(keep.astype(np.uint8) * 255, cv2.INTER_NEAREST)
    orb = cv2.ORB_create(nfeatures=cfg.orb_features)
    kb, db = orb.detectAndCompute(up(b_grey), det_mask)
    ka, da = orb.detectAndCompute(up(a_grey), det_mask)
    info["n_keypoints"] = min(len(kb), len(ka))
    if db is None or da is None or min(len(kb), len(ka)) < cfg.min_matches:
        return None, {**info, "skipped": f"homography: too few ORB keypoints ({info['n_keypoints']} < {cfg.min_matches})"}
    pairs = cv2.BFMatcher(cv2.NORM_HAMMING).knnMatch(da, db, k=2)
    good = [p[0] for p in pairs if len(p) == 2 and p[0].distance < cfg.match_ratio * p[1].distance]
    info["n_matches"] = len(good)
    if len(good) < cfg.min_matches:
        return None, {**info, "skipped": f"homography: too few ORB matches ({len(good)} < {cfg.min_matches})"}
    src = np.float32([ka[m.queryIdx].pt for m in good])
    dst = np.float32([kb[m.trainIdx].pt for m in good])
    hb, inl = cv2.findHomography(src, dst, cv2.RANSAC, cfg.ransac_reproj_px)
    n_in = int(inl.sum()) if inl is not None else 0
    info["n_inliers"] = n_in
    if hb is None or n_in < cfg.min_matches:
        return None, {**info, "skipped": f"homography: too few RANSAC inliers ({n_in} < {cfg.min_matches})"}
    # back to input pixels: x_big = f * x + (f - 1) / 2 (pixel centres)
    s = np.array([[f, 0, (f - 1) / 2], [0, f, (f - 1) / 2], [0, 0, 1]], dtype=np.float64)
    hs = np.linalg.inv(s) @ hb @ s
    hs = hs / hs[2, 2]
    area = float(np.linalg.det(hs[:2, :2]))
    bend = abs(hs[2, 0]) * w + abs(hs[2, 1]) * h
    if not np.isfinite(hs).all() or not (1 / MAX_AREA_SCALE <= area <= MAX_AREA_SCALE) or bend > MAX_PERSPECTIVE:
        return None, {**info, "skipped": "homography: degenerate estimate"}
    return hs, info


def _flow(b_grey: np.ndarray, a_grey: np.ndarray, keep: np.ndarray, cfg: VerifyConfig) -> np.ndarray:
    """Farneback flow ``before -> after`` (``before(p) ~ after(p + flow(p))``), smoothed by
    normalised convolution over ``keep`` (so the edit region borrows its neighbours' flow instead
    of warping the edit away) and capped at ``flow_max_px``."""
    h, w = b_grey.shape
    win = max(3, min(cfg.flow_winsize, min(h, w) // 2))
    levels = max(1, min(4, int(math.log2(max(min(h, w), 8) / 8)) + 1))  # layers incl. the image; top >= 8 px
    flow = cv2.calcOpticalFlowFarneback(b_grey, a_grey, None, 0.5, levels, win, 3, 5, 1.1, 0)
    wgt = keep.astype(np.float32)
    if cfg.flow_smooth_px > 0:
        blur = lambda x: cv2.GaussianBlur(x, (0, 0), cfg.flow_smooth_px, borderType=cv2.BORDER_REFLECT)  # noqa: E731
        den = blur(wgt)
        flow = np.stack([blur(flow[..., i] * wgt) for i in range(2)], axis=-1) / np.maximum(den, 1e-6)[..., None]
        flow[den < 1e-3] = 0.0
    else:
        flow = flow * wgt[..., None]
    mag = np.linalg.norm(flow, axis=-1, keepdims=True)
    return (flow * np.minimum(1.0, cfg.flow_max_px / np.maximum(mag, 1e-9))).astype(np.float32)


def _align(b: np.ndarray, a: np.ndarray, cfg: VerifyConfig, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, AlignInfo]:
    """:func:`align` plus the ``bool [H,W]`` map of pixels that came from inside ``after``."""
    h, w = b.shape[:2]
    keep = ~_dilate(mask, cfg.dilate_px) if mask is not None else np.ones((h, w), bool)
    valid = np.ones((h, w), bool)
    bg, ag = _grey(b), _grey(a)
    res0 = _residual(bg, ag, keep)
    out: dict[str, Any] = {"residual_before": res0, "residual_after": res0}
    if not cfg.align:
        return a, valid, AlignInfo(skipped="alignment disabled", **out)
    if not keep.any():
        return a, valid, AlignInfo(skipped="no pixels outside the (dilated) edit region to align on", **out)
    if res0 == 0.0:  # identical outside the edit: any resampling could only add error
        return a, valid, AlignInfo(skipped="already aligned (no difference outside the edit)", **out)
    methods, skipped = [], []
    cur, cur_valid, cur_res = a, valid, res0
    ones = np.ones((h, w), np.float32)

    try:
        hom, hinfo = _homography(bg, ag, keep, cfg)
    except cv2.error as err:  # odd content must never stop a sweep
        hom, hinfo = None, {"skipped": f"homography: OpenCV error ({str(err).strip().splitlines()[-1]})"}
    out.update({k: hinfo[k] for k in ("scale", "n_keypoints", "n_matches", "n_inliers") if k in hinfo})
    if hom is None:
        skipped.append(hinfo["skipped"])
    else:
        cand = cv2.warpPerspective(a, hom, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        cvalid = cv2.warpPerspective(ones, hom, (w, h), flags=cv2.INTER_LINEAR, borderValue=0) > 0.999
        res = _residual(bg, _grey(cand), keep & cvalid)
        if res < cur_res * (1 - cfg.align_min_gain):
            cur, cur_valid, cur_res = cand, cvalid, res
            methods.append("homography")
            out["homography"] = tuple(tuple(float(v) for v in row) for row in hom)
        else:
            skipped.append(f"homography: no gain (residual {res:.2f} vs {cur_res:.2f})")

    flow = None
    if cfg.flow:
        try:
            flow = _flow(bg, _grey(cur), keep & cur_valid, cfg)
        except cv2.error as err:
            skipped.append(f"flow: OpenCV error ({str(err).strip().splitlines()[-1]})")
    if flow is not None:
        mean_px = float(np.linalg.norm(flow, axis=-1).mean())
        if float(np.abs(flow).max()) < 0.05:
            skipped.append("flow: negligible residual motion")
        else:
            gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
            mx, my = gx + flow[..., 0], gy + flow[..., 1]
            cand = cv2.remap(cur, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            cvalid = cv2.remap(cur_valid.astype(np.float32), mx, my, cv2.INTER_LINEAR, borderValue=0) > 0.999
            res = _residual(bg, _grey(cand), keep & cvalid)
            if res < cur_res * (1 - cfg.align_min_gain):
                cur, cur_valid, cur_res = cand, cvalid, res
                methods.append("flow")
                out["flow_px"] = mean_px
            else:
                skipped.append(f"flow: no gain (residual {res:.2f} vs {cur_res:.2f})")
    out["residual_after"] = cur_res
    info = AlignInfo(method="+".join(methods) or "none", skipped="; ".join(skipped),
                     valid_fraction=float(cur_valid.mean()), **out)  # fmt: skip
    return cur, cur_valid, info


def align(before: Any, after: Any, cfg: VerifyConfig | None = None, *, mask: Any = None) -> tuple[np.ndarray, AlignInfo]:
    """``after`` warped onto ``before`` (``uint8 [H,W,3]``) and what was done. ``mask`` (optional,
    the intended edit region): excluded from keypoints, flow and the residual that decides whether
    a warp is kept. Never raises for hard-to-align content: it returns ``after`` unchanged and says why."""
    cfg = cfg or VerifyConfig()
    b, a = _pair(before, after)
    m = _mask(mask, b.shape) if mask is not None else None
    aligned, _, info = _align(b, a, cfg, m)
    return aligned, info


# --------------------------------------------------------------------------- change map
def _hsv_cone(rgb: np.ndarray) -> np.ndarray:
    """HSV as points of the cone ``(s v cos h, s v sin h, v)``: hue matters only where saturated."""
    hsv = cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV)  # float input: h in degrees, s and v in [0, 1]
    rad = np.deg2rad(hsv[..., 0])
    sv = hsv[..., 1] * hsv[..., 2]
    return np.stack([sv * np.cos(rad), sv * np.sin(rad), hsv[..., 2]], axis=-1)


def _grad(rgb: np.ndarray) -> np.ndarray:
    g = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    gx = cv2.Sobel(g, cv2.CV_32F, 1, 0, ksize=3, scale=0.25, borderType=cv2.BORDER_REPLICATE)
    gy = cv2.Sobel(g, cv2.CV_32F, 0, 1, ksize=3, scale=0.25, borderType=cv2.BORDER_REPLICATE)
    return np.minimum(np.hypot(gx, gy), 1.0)


def blur_sigma(shape: tuple[int, ...], cfg: VerifyConfig) -> float:
    """The pre-smoothing sigma for an image of ``shape`` (``H, W``): ``cfg.blur_sigma`` scaled by the
    shorter side over ``cfg.blur_ref_px`` (capped at 1), so the blur never outgrows the details a
    small image's edit is made of."""
    if cfg.blur_ref_px <= 0:
        return cfg.blur_sigma
    return cfg.blur_sigma * min(1.0, min(shape[:2]) / cfg.blur_ref_px)


def _score(b: np.ndarray, a: np.ndarray, cfg: VerifyConfig) -> np.ndarray:
    """Per-pixel change score in ``[0, 1]``: weighted RGB, HSV-cone and gradient-magnitude distances."""
    fb, fa = b.astype(np.float32) / 255.0, a.astype(np.float32) / 255.0
    sigma = blur_sigma(b.shape[:2], cfg)
    if sigma > 0:
        fb, fa = (cv2.GaussianBlur(x, (0, 0), sigma, borderType=cv2.BORDER_REPLICATE) for x in (fb, fa))
    total = np.zeros(b.shape[:2], np.float32)
    if cfg.w_rgb:
        total += cfg.w_rgb * np.linalg.norm(fb - fa, axis=-1) / math.sqrt(3.0)
    if cfg.w_hsv:
        total += cfg.w_hsv * np.linalg.norm(_hsv_cone(fb) - _hsv_cone(fa), axis=-1) / 2.0
    if cfg.w_grad:
        total += cfg.w_grad * np.abs(_grad(fb) - _grad(fa))
    return total / (cfg.w_rgb + cfg.w_hsv + cfg.w_grad)


def _ssim_map(b: np.ndarray, a: np.ndarray, cfg: VerifyConfig) -> np.ndarray | None:
    win = min(cfg.ssim_window, min(b.shape[:2]) - (1 - min(b.shape[:2]) % 2))  # largest odd that fits
    if cfg.ssim_threshold <= 0 or win < 3:
        return None
    _, s = structural_similarity(b, a, win_size=win, channel_axis=-1, data_range=255, full=True)
    return s.mean(axis=-1)


def _changed(b: np.ndarray, a: np.ndarray, valid: np.ndarray, cfg: VerifyConfig) -> np.ndarray:
    score = _score(b, a, cfg)
    changed = score > cfg.change_threshold
    s = _ssim_map(b, a, cfg)
    if s is not None:
        changed |= (s < cfg.ssim_threshold) & (score > cfg.ssim_gate)
    return changed & valid


def change_map(before: Any, after: Any, cfg: VerifyConfig | None = None, *, mask: Any = None) -> np.ndarray:
    """``bool [H,W]``: pixels of ``before`` that ``after`` changed, after :func:`align` (``mask``
    as there). Pixels the alignment had to invent are reported unchanged."""
    cfg = cfg or VerifyConfig()
    b, a = _pair(before, after)
    m = _mask(mask, b.shape) if mask is not None else None
    aligned, valid, _ = _align(b, a, cfg, m)
    return _changed(b, aligned, valid, cfg)


# --------------------------------------------------------------------------- verification
def verify_edit(before: Any, after: Any, mask: Any, cfg: VerifyConfig | None = None) -> VerifyResult:
    """Did ``after`` change ``before`` inside ``mask`` (``bool [H,W]``, the intended edit region)
    and little outside it? ``in_ratio``: changed share of the mask; ``out_ratio``: changed share
    of the pixels outside the mask dilated by ``dilate_px`` (pixels invented by the alignment are
    left out of both)."""
    cfg = cfg or VerifyConfig()
    b, a = _pair(before, after)
    m = _mask(mask, b.shape)
    if not m.any():
        raise ValueError("mask: empty (no pixel of the intended edit region is set)")
    aligned, valid, info = _align(b, a, cfg, m)
    changed = _changed(b, aligned, valid, cfg)
    inside, outside = m & valid, ~_dilate(m, cfg.dilate_px) & valid
    in_ratio = float(changed[inside].mean()) if inside.any() else 0.0
    out_ratio = float(changed[outside].mean()) if outside.any() else 0.0
    detail = outside & (_grad(b.astype(np.float32) / 255.0) > cfg.detail_threshold)
    out_detail = float(changed[detail].mean()) if detail.any() else 0.0
    problems = []
    if not inside.any():
        problems.append("the edit region falls outside the aligned image")
    elif in_ratio <= cfg.tau_in:
        problems.append(f"too little change inside the mask ({in_ratio:.3f} <= tau_in {cfg.tau_in:g})")
    if out_ratio >= cfg.tau_out:
        problems.append(f"too much change outside the mask ({out_ratio:.3f} >= tau_out {cfg.tau_out:g})")
    if out_detail >= cfg.tau_out_detail:
        problems.append(f"too much of the detail outside the mask changed ({out_detail:.3f} >= tau_out_detail {cfg.tau_out_detail:g})")
    passed = not problems
    reason = f"ok: in {in_ratio:.3f} > {cfg.tau_in:g}, out {out_ratio:.3f} < {cfg.tau_out:g}" if passed else "; ".join(problems)
    return VerifyResult(passed, in_ratio, out_ratio, changed, info, reason)


#: The intended edit region: a ``bool [H,W]`` array, or ``(before, after) -> bool [H,W]``.
MaskSource = np.ndarray | Callable[[Any, Any], np.ndarray]


def segmenter_mask(segmenter: Segmenter, concept: str) -> Callable[[Any, Any], np.ndarray]:
    """A mask source for :func:`verify_with_retry`: the union of ``concept``'s pixels before and
    after the edit (where it was and where it is now)."""

    def source(before: Any, after: Any) -> np.ndarray:
        return np.asarray(segmenter.mask(before, concept), bool) | np.asarray(segmenter.mask(after, concept), bool)

    return source


def verify_with_retry(
    make_edit: Callable[[int], Any], mask: MaskSource, before: Any, cfg: VerifyConfig | None = None, *, retries: int = 1
) -> tuple[VerifyResult, Any, int]:
    """Edit, verify, and on failure edit again (``retries`` more times, the "one retry" by default).

    ``make_edit(attempt)`` (0-based, so an editor can vary its seed / prompt) returns the edited
    image; ``mask`` is the intended region (``bool [H,W]``) or a callable ``(before, after) -> mask``
    (e.g. :func:`segmenter_mask`). Returns the first passing (or the last) result, its image and
    the number of attempts made.

    Deprecated (removed in the next release): the EDCT pipeline's loop (``verify_retries``, with its
    ``retry`` prompt and early stops) is the one verify-and-retry; this helper was used by no command.
    """
    warnings.warn("verify_with_retry is deprecated: cbm-edct's verify_retries is the one verify-and-retry loop",
                  DeprecationWarning, stacklevel=2)  # fmt: skip
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    cfg = cfg or VerifyConfig()
    for attempt in range(retries + 1):
        after = make_edit(attempt)
        m = mask(before, after) if callable(mask) else mask
        result = verify_edit(before, after, m, cfg)
        if result.passed:
            break
    return result, after, attempt + 1


def mask_iou(a: Any, b: Any) -> float:
    """Intersection over union of two ``bool [H,W]`` masks (1.0 when both are empty)."""
    x, y = np.asarray(a, bool), np.asarray(b, bool)
    if x.shape != y.shape:
        raise ValueError(f"mask_iou: shapes differ: {x.shape} vs {y.shape}")
    union = np.logical_or(x, y).sum()
    return float(np.logical_and(x, y).sum() / union) if union else 1.0
