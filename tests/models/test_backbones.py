"""The image CNN pools before its ReLU (cheaper); that must be the textbook conv-BN-ReLU-pool, bit for bit."""

from __future__ import annotations

import torch
from torch import nn

from cbm.models.backbones import SmallCNN
from cbm.models.config import BackboneConfig


def textbook_copy(cnn: SmallCNN) -> nn.Sequential:
    """The same modules (shared parameters) in conv-BN-ReLU-pool order."""
    mods = list(cnn.features)
    blocks: list[nn.Module] = []
    for i in range(0, len(mods) - 1, 4):
        conv, bn, pool, relu = mods[i : i + 4]
        assert isinstance(pool, nn.MaxPool2d) and isinstance(relu, nn.ReLU)
        blocks += [conv, bn, relu, pool]
    return nn.Sequential(*blocks, mods[-1], *cnn.proj)


def test_pool_then_relu_equals_textbook_order_bitwise() -> None:
    torch.manual_seed(0)
    cnn = SmallCNN(BackboneConfig(channels=[8, 16, 32], grid=2, out_dim=24), in_channels=3)
    ref = textbook_copy(cnn)
    x = torch.randn(16, 3, 31, 29)  # odd sides: ceil-mode windows at the border
    x[:4] = 0.0  # all-zero inputs: ties, and maxima at exactly 0
    grads = []
    for net in (cnn, ref):
        net.zero_grad()
        out = net(x)
        out.square().sum().backward()
        grads.append((out.detach(), [p.grad.clone() for p in cnn.parameters()]))
    (a, ga), (b, gb) = grads
    assert torch.equal(a, b)
    assert all(torch.equal(u, v) for u, v in zip(ga, gb))


def test_state_dict_keys_are_unchanged_by_the_order() -> None:
    """Checkpoints saved before the reorder load: only parameter-free modules moved."""
    cnn = SmallCNN(BackboneConfig(channels=[16, 32, 64], grid=4, out_dim=128), in_channels=3)
    keys = {k for k in cnn.state_dict() if k.startswith("features.")}
    assert {k.split(".")[1] for k in keys} == {"0", "1", "4", "5", "8", "9"}
