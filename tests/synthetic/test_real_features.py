"""The feature cache (data.features.kind=precompute): a pretrained encoder's embeddings computed once,
keyed by the encoder's weights, read back without a single forward pass; and the encoders' refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cbm.core.validation import ConfigError
from synthetic.real import encoders, features
from synthetic.real.cub import CUBConfig, load
from synthetic.real.fixtures import write_cub


@pytest.fixture(scope="module")
def cub_root(tmp_path_factory):
    return write_cub(tmp_path_factory.mktemp("cubf") / "data", per_class=4)


def cfg(root, **feat) -> CUBConfig:
    return CUBConfig(root=str(root), concepts="voted", min_class_count=1, image_size=32,
                     features=features.FeaturesConfig(**{"kind": "precompute", "weights": "random", **feat}))  # fmt: skip


@pytest.fixture
def forward_calls(monkeypatch):
    """Counts the encoders' forward passes (every encoder build goes through build_encoder)."""
    calls = []
    real = encoders.build_encoder

    def counted(*a, **kw):
        enc = real(*a, **kw)
        enc.module.register_forward_hook(lambda *_: calls.append(1))
        return enc

    monkeypatch.setattr(encoders, "build_encoder", counted)
    return calls


def test_embeddings_once_then_from_the_cache_without_a_forward_pass(cub_root, tmp_path, forward_calls):
    cache = tmp_path / "cache"
    first = load(cfg(cub_root), cache)
    assert first.modality == "tabular" and first.x.shape == (16, 512) and first.x.dtype == np.float32
    assert len(forward_calls) == 1 and first.info["features"]["fingerprint"] == "resnet18:random:0"
    images = load(CUBConfig(root=str(cub_root), concepts="voted", min_class_count=1, image_size=32), cache)
    with torch.inference_mode():  # by hand: the same initialisation on the images / 255
        net = encoders.build_encoder("resnet18", "random", 0).module
        by_hand = net(torch.from_numpy(images.x).permute(0, 3, 1, 2).float() / 255.0).numpy()
    np.testing.assert_allclose(first.x, by_hand, rtol=1e-5, atol=1e-5)
    forward_calls.clear()
    again = load(cfg(cub_root), cache)
    assert forward_calls == [] and np.array_equal(again.x, first.x)  # a rerun computes no embedding
    np.testing.assert_array_equal(again.c, images.c)
    assert len(list(cache.glob("features-*.npz"))) == 1


def test_other_weights_never_read_these_features(cub_root, tmp_path, forward_calls):
    cache = tmp_path / "cache"
    a = load(cfg(cub_root), cache)
    b = load(cfg(cub_root, seed=1), cache)  # another initialisation: another entry, computed
    assert len(forward_calls) == 2 and not np.allclose(a.x, b.x) and len(list(cache.glob("features-*.npz"))) == 2
    from torchvision.models import get_model

    torch.manual_seed(3)
    path = tmp_path / "mine.pth"
    torch.save(get_model("resnet18", weights=None).state_dict(), path)
    c = load(cfg(cub_root, weights=str(path)), cache)
    assert c.info["features"]["fingerprint"] == f"resnet18:{encoders.file_hash(path)}"
    torch.manual_seed(4)
    torch.save(get_model("resnet18", weights=None).state_dict(), path)  # the same name, other weights
    d = load(cfg(cub_root, weights=str(path)), cache)
    assert len(forward_calls) == 4 and not np.allclose(c.x, d.x) and len(list(cache.glob("features-*.npz"))) == 4


def test_encoder_refusals_are_one_line(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="weights file .*missing.pth not found"):
        encoders.build_encoder("resnet18", str(tmp_path / "missing.pth"))
    from torchvision.models import get_model

    torch.save(get_model("resnet18", weights=None).state_dict(), tmp_path / "r18.pth")
    with pytest.raises(ConfigError, match="r18.pth does not fit resnet50"):
        encoders.build_encoder("resnet50", str(tmp_path / "r18.pth"))
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="junk.pth is not a readable state_dict"):
        encoders.build_encoder("resnet18", str(tmp_path / "junk.pth"))
    with pytest.raises(ConfigError, match="vit_b_16 reads 224 px images; the data's are 32 px"):
        encoders.build_encoder("vit_b_16", "random", image_size=32)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    with pytest.raises(ConfigError, match="torchvision's weights are not in the hub cache .*nothing is downloaded"):
        encoders.fingerprint("resnet18", "torchvision")
    with pytest.raises(ValueError, match="data.features.encoder"):
        features.FeaturesConfig(encoder="alexnet")


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """A CLIP image encoder with random weights, saved as transformers saves one (no download)."""
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("clip") / "tiny-clip"
    cfg = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8,
                           projection_dim=16)  # fmt: skip
    CLIPVisionModelWithProjection(cfg).save_pretrained(folder)
    return folder


def test_a_local_clip_folder_as_the_feature_encoder(cub_root, tmp_path, tiny_clip, forward_calls):
    """encoder=hf: CLIP's projected image embedding (0.4.1's CLIP features) of the images resized to the
    model's side and CLIP-normalised, cached by the folder's bytes."""
    from transformers import CLIPVisionModelWithProjection

    d = load(cfg(cub_root, encoder="hf", weights=str(tiny_clip)), tmp_path / "cache")
    assert d.x.shape == (16, 16) and len(forward_calls) == 1 and d.info["features"]["fingerprint"].startswith("hf:")
    images = load(CUBConfig(root=str(cub_root), concepts="voted", min_class_count=1, image_size=32), tmp_path / "cache")
    model = CLIPVisionModelWithProjection.from_pretrained(tiny_clip).eval()
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in encoders.HF_TYPES["clip"][1:])
    with torch.no_grad():  # by hand: 32 px images at CLIP's own side (32), CLIP's normalisation
        x = torch.from_numpy(images.x).permute(0, 3, 1, 2).float() / 255.0
        by_hand = model(pixel_values=(x - mean) / std).image_embeds.numpy()
    np.testing.assert_allclose(d.x, by_hand, rtol=1e-4, atol=1e-5)
    load(cfg(cub_root, encoder="hf", weights=str(tiny_clip)), tmp_path / "cache")
    assert len(forward_calls) == 1  # the rerun reads the cache
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ConfigError, match="holds a 'bert' model; an image encoder of"):
        encoders.build_encoder("hf", str(tmp_path / "bert"))
    with pytest.raises(ConfigError, match="weights must be a local folder saved by transformers"):
        encoders.fingerprint("hf", str(tmp_path / "nowhere"))
