"""Images become lossless PNG data URLs in the layouts the datasets use; bad images are one error."""

import numpy as np
import pytest
import torch

from cbm.vlm.messages import decode_image_part, image_part, user_message


def test_float_chw_tensor_round_trips_exactly():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (3, 9, 7), generator=g).float() / 255.0  # exact 8-bit levels
    back = np.asarray(decode_image_part(image_part(x)))
    assert back.shape == (9, 7, 3)
    assert np.array_equal(back, (x.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))


def test_uint8_hwc_and_gray_arrays():
    rgb = np.random.default_rng(0).integers(0, 256, (5, 6, 3), dtype=np.uint8)
    assert np.array_equal(np.asarray(decode_image_part(image_part(rgb))), rgb)
    gray = rgb[..., 0]
    assert np.array_equal(np.asarray(decode_image_part(image_part(gray))), gray)


def test_user_message_puts_images_before_text():
    msg = user_message("Is it a Glorp?", [np.zeros((4, 4, 3), dtype=np.uint8)])
    assert msg["role"] == "user"
    assert [p["type"] for p in msg["content"]] == ["image_url", "text"]
    assert msg["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")


@pytest.mark.parametrize(
    ("image", "match"),
    [(np.full((4, 4, 3), 2.0), r"in \[0, 1\]"), (np.zeros((4, 4, 5), dtype=np.uint8), "expected"), (np.zeros((4, 4), dtype=np.int64), "uint8 or float")],
)
def test_bad_images_are_one_clear_error(image, match):
    with pytest.raises(ValueError, match=match):
        image_part(image)


def test_the_one_reask_continues_the_conversation_and_cuts_the_problem():
    from cbm.vlm.messages import REASK_PROBLEM_CHARS, reask_turns

    msgs = [user_message("Which class?")]
    out = reask_turns(msgs, "Hmm.", "Your reply could not be read ({problem}). Answer again.", "x" * 1000)
    assert out[:1] == msgs and out[1] == {"role": "assistant", "content": "Hmm."}
    assert out[2] == user_message(f"Your reply could not be read ({'x' * REASK_PROBLEM_CHARS}). Answer again.")
    assert reask_turns([], "", "({problem})", "")[-1] == user_message("(no usable value)")
