"""Pretrained encoders as a model's backbone (model.backbone.weights / freeze): the encoder the
feature cache uses, a projection to out_dim, and a frozen encoder that training leaves as it was."""

from __future__ import annotations

import pytest
import torch

from cbm.models.backbones import PretrainedEncoder, build_backbone
from cbm.models.config import BackboneConfig, DataInfo
from synthetic.real.encoders import build_encoder

INFO = DataInfo(dataset="cub", modality="image", in_shape=[3, 32, 32], concept_names=["a", "b"], class_names=["x", "y"])


def test_a_frozen_encoder_stays_as_it_was_and_its_projection_learns():
    torch.manual_seed(0)
    bb = build_backbone(BackboneConfig(name="resnet50", weights="random", freeze=True, out_dim=16), INFO)
    assert isinstance(bb, PretrainedEncoder) and bb.out_dim == 16
    before = {k: v.clone() for k, v in bb.encoder.state_dict().items()}
    proj = [p.clone() for p in bb.proj.parameters()]
    assert all(not p.requires_grad for p in bb.encoder.parameters()) and all(p.requires_grad for p in bb.proj.parameters())
    opt = torch.optim.SGD([p for p in bb.parameters() if p.requires_grad], lr=0.1)
    bb.train()
    assert not bb.encoder.training and bb.proj.training  # frozen batch norm keeps its running statistics
    for _ in range(2):
        opt.zero_grad()
        bb(torch.rand(4, 3, 32, 32)).square().mean().backward()
        opt.step()
    after = bb.encoder.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and batch-norm statistics alike
    assert any(not torch.equal(a, b) for a, b in zip(proj, bb.proj.parameters()))
    # the same encoder as the feature cache's: the features before the projection are its embeddings
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(bb.encoder(x), build_encoder("resnet50", "random", 0).module(x))


def test_fine_tuned_encoder_trains_and_the_old_resnet18_is_unchanged():
    bb = build_backbone(BackboneConfig(name="resnet18", weights="random", out_dim=8), INFO)
    assert isinstance(bb, PretrainedEncoder) and all(p.requires_grad for p in bb.encoder.parameters())
    bb.train()
    assert bb.encoder.training
    assert not isinstance(build_backbone(BackboneConfig(name="resnet18"), INFO), PretrainedEncoder)  # weights null: from scratch


def test_bad_settings_are_one_line():
    with pytest.raises(ValueError, match="backbone.name=resnet50 is a pretrained encoder: set backbone.weights"):
        BackboneConfig(name="resnet50")
    with pytest.raises(ValueError, match="backbone.freeze needs a pretrained encoder"):
        BackboneConfig(name="cnn", freeze=True)
    with pytest.raises(ValueError, match="vit_b_16 reads 224 px images; the data's are 32 px"):
        build_backbone(BackboneConfig(name="vit_b_16", weights="random"), INFO)


def test_a_local_siglip_folder_as_a_frozen_backbone(tmp_path):
    from transformers import SiglipVisionConfig, SiglipVisionModel

    torch.manual_seed(0)
    cfg = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=8)
    SiglipVisionModel(cfg).save_pretrained(tmp_path / "siglip")
    bb = build_backbone(BackboneConfig(name="hf", weights=str(tmp_path / "siglip"), freeze=True, out_dim=8), INFO)
    assert isinstance(bb, PretrainedEncoder) and bb(torch.rand(2, 3, 32, 32)).shape == (2, 8)  # 32 px resized to its 16
    assert all(not p.requires_grad for p in bb.encoder.parameters())
    with pytest.raises(ValueError, match="backbone.name=hf is a pretrained encoder: set backbone.weights"):
        BackboneConfig(name="hf")
