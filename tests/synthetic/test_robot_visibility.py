"""Robot generator knobs that make parts hard to see: per-part ``visibility`` and ``pixel_noise``."""

from __future__ import annotations

import numpy as np
import pytest

from synthetic.base import SPLITS
from synthetic.cache import config_hash
from synthetic.robot import META_NAMES, PART_NAMES, RobotConfig, generate, part_mask, render
from synthetic.robot.generator import cache_key

COL = {name: i for i, name in enumerate(META_NAMES)}


def small(**kw) -> RobotConfig:
    base = {"n_train": 80, "n_calib": 20, "n_test": 40}
    return RobotConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def meta():
    return generate(small(modality="tabular")).meta


# --------------------------------------------------------------------------- neutral values
def test_neutral_knobs_leave_data_and_cache_key_unchanged():
    base = small(image_size=32, blur=0.5, occlude=["hands"])
    ref = generate(base)
    for kw in ({"visibility": None}, {"visibility": {}}, {"visibility": {p: 1.0 for p in PART_NAMES}}, {"pixel_noise": 0.0}):
        cfg = small(image_size=32, blur=0.5, occlude=["hands"], **kw)
        data = generate(cfg)
        for name in ("x", "c", "c_true", "y", "split", "meta"):
            np.testing.assert_array_equal(getattr(data, name), getattr(ref, name))
    # the knobs at their neutral values are not part of the cache key (entries made before they existed stay valid)
    assert config_hash(cache_key(small(visibility={}, pixel_noise=0.0))) == config_hash(cache_key(small()))
    assert "visibility" not in cache_key(small())["config"] and "pixel_noise" not in cache_key(small())["config"]
    assert config_hash(cache_key(small(visibility={"knees": 0.5}))) != config_hash(cache_key(small()))
    assert config_hash(cache_key(small(pixel_noise=4.0))) != config_hash(cache_key(small()))


def test_full_visibility_is_byte_identical(meta):
    for size in (16, 32, 64):
        np.testing.assert_array_equal(render(meta, size, visibility={"knees": 1.0, "mouth": 1.0}), render(meta, size))


# --------------------------------------------------------------------------- visibility
def test_zero_visibility_draws_nothing(meta):
    """``visibility = 0``: the image is that of the same robot without the part's attribute."""
    without = meta.copy()
    without[:, COL["knees"]] = 0
    np.testing.assert_array_equal(render(meta, 32, visibility={"knees": 0.0}), render(without, 32))
    has = meta[:, COL["knees"]] == 1
    assert has.any() and (render(meta, 32)[has] != render(without, 32)[has]).any()


@pytest.mark.parametrize("part", ["knees", "mouth", "feet"])
def test_faint_part_changes_only_its_own_pixels(meta, part):
    plain, faint = render(meta, 32), render(meta, 32, visibility={part: 0.25})
    changed = (plain != faint).any(axis=-1)
    assert changed.any()
    assert not (changed & ~part_mask(meta, part, 32)).any(), "only pixels the part covers may change"


def test_faint_part_lies_between_absent_and_full(meta):
    """Where the part covers a pixel fully, a faint part blends ``v`` of its colour into what lies below."""
    m = meta
    # the mouth layer always draws something: compare with the same image with the mouth invisible
    plain = render(m, 32).astype(int)
    none = render(m, 32, visibility={"mouth": 0.0}).astype(int)
    half = render(m, 32, visibility={"mouth": 0.5}).astype(int)
    cover = part_mask(m, "mouth", 32)
    d_full, d_half = (plain - none)[cover], (half - none)[cover]
    assert np.abs(d_full).sum() > 0
    # half the contrast, up to rounding (partial coverage is rounded twice)
    assert np.abs(2 * d_half - d_full).max() <= 3
    assert np.abs(d_half).sum() < np.abs(d_full).sum()


# --------------------------------------------------------------------------- pixel noise
def test_pixel_noise_changes_only_x_with_the_given_sigma():
    ref = generate(small(image_size=32))
    noisy = generate(small(image_size=32, pixel_noise=6.0))
    for name in ("c", "c_true", "y", "split", "meta"):
        np.testing.assert_array_equal(getattr(noisy, name), getattr(ref, name))
    d = noisy.x.astype(float) - ref.x.astype(float)
    inside = (ref.x > 30) & (ref.x < 225)  # away from clipping
    assert abs(d[inside].mean()) < 0.2
    assert 5.5 < d[inside].std() < 6.5
    np.testing.assert_array_equal(generate(small(image_size=32, pixel_noise=6.0)).x, noisy.x)  # deterministic


def test_pixel_noise_streams_are_per_split():
    """Changing the test size leaves the (noisy) training images unchanged."""
    a = generate(small(image_size=16, pixel_noise=5.0))
    b = generate(small(image_size=16, pixel_noise=5.0, n_test=90))
    tr = SPLITS["train"]
    np.testing.assert_array_equal(a.x[a.split == tr], b.x[b.split == tr])


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "kw, match",
    [
        ({"visibility": {"tail": 0.5}}, "visibility"),
        ({"visibility": {"knees": 1.5}}, "visibility.knees"),
        ({"visibility": {"knees": -0.1}}, "visibility.knees"),
        ({"visibility": ["knees"]}, "visibility"),
        ({"pixel_noise": -1.0}, "pixel_noise"),
        ({"pixel_noise": "loud"}, "pixel_noise"),
    ],
)
def test_bad_knob_raises_clear_value_error(kw, match):
    with pytest.raises(ValueError, match=match) as err:
        RobotConfig(**kw)
    assert "\n" not in str(err.value)


def test_render_refuses_out_of_range_visibility(meta):
    with pytest.raises(ValueError, match="visibility"):
        render(meta, 32, visibility={"knees": 2.0})
    with pytest.raises(ValueError, match="unknown part"):
        render(meta, 32, visibility={"tail": 0.5})
