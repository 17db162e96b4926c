"""Vision-tower pretraining of the zoo's tiny Qwen2-VL (``cbm.vlm.zoo.vision``): it teaches the
tower each cell's digit, moves nothing of the language model and refuses labels of the wrong shape."""

from __future__ import annotations

import pytest
import torch

from cbm.vlm.zoo import model as zm
from cbm.vlm.zoo.boards import ANSWERS, CELLS, make_boards
from cbm.vlm.zoo.config import ZooData, ZooModel, ZooSudoku
from cbm.vlm.zoo.vision import image_tokens, pretrain_vision


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    boards = make_boards(ZooSudoku(n_train=256, n_test=8))
    model, proc = zm.fresh(tmp_path_factory.mktemp("vision") / "m", ZooModel(hidden=64, vision_width=32, vision_heads=2),
                           ZooData(image_size=64), ANSWERS)  # fmt: skip
    enc = zm.Encoder(proc)
    idx = boards.train
    y = boards.y[idx]
    return model, enc.pixels(boards.images(idx, y == 1, y)), boards.digits(idx, y == 1)


def test_pretraining_teaches_the_tower_the_digits_and_leaves_the_language_model_alone(setup, monkeypatch):
    import cbm.vlm.zoo.vision as vision

    model, pixels, digits = setup
    assert image_tokens(model, pixels[0][:3], pixels[1][:3]).shape[:2] == (3, CELLS)  # one merged token per cell
    handed: list[torch.Tensor] = []
    original = vision.train_loop

    def spy(model_, params, *args, **kwargs):  # records what the optimiser is handed
        handed.extend(params)
        return original(model_, params, *args, **kwargs)

    monkeypatch.setattr(vision, "train_loop", spy)
    lm = {k: v.detach().clone() for k, v in model.named_parameters() if ".visual." not in f".{k}"}
    tower = {k: v.detach().clone() for k, v in model.named_parameters() if ".visual." in f".{k}"}
    losses = pretrain_vision(model, pixels, digits, epochs=6, lr=3e-3, batch_size=16, seed=0)
    assert len(losses) == 6 and losses[-1] < 0.1 and losses[-1] < losses[0] / 10  # measured 1.22 -> 0.003
    # the optimiser holds the tower and the head (10 digit classes) and nothing of the language model
    ids = {id(p) for p in handed}
    assert {id(p) for p in model.model.visual.parameters()} <= ids and not ids & {id(p) for p in model.model.language_model.parameters()}
    assert len(ids) == len(list(model.model.visual.parameters())) + 2 and any(p.shape == (10, 64) for p in handed)
    params = dict(model.named_parameters())
    assert all(torch.equal(v, params[k]) for k, v in lm.items())
    assert any(not torch.equal(v, params[k]) for k, v in tower.items())
    assert not model.training


def test_labels_of_the_wrong_shape_are_one_line_before_any_training(setup):
    model, pixels, digits = setup
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"labels must be \[n_images, tokens\] for 256 images, got \(255, 16\)"):
        pretrain_vision(model, pixels, digits[:-1], 1, 1e-3, 16, 0)
    with pytest.raises(ValueError, match="16 image tokens per image, 15 labels"):
        pretrain_vision(model, pixels, digits[:, :-1], 1, 1e-3, 16, 0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())) and not model.training
