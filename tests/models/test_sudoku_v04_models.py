"""concept-benchmark 0.4.1's two-stage Sudoku models (model=sudoku_v04_cbm / sudoku_v04_dnn): its
digit models transcribed from experiments/models.py (MIT) give ours on copied weights; the OCR sees
the training boards only; training and validation read the true digits, encode the OCR's; the label
probability is the Monte-Carlo propagation, exact on 0/1 checks and the same alone or in a batch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cbm.models import build_model, ocr
from cbm.models.sudoku_v04 import GroupPoolingChecks, SudokuValidatorCNN
from synthetic.base import SPLITS
from synthetic.datamodule import SyntheticDataModule
from synthetic.sudoku.checker import CONCEPT_NAMES
from synthetic.sudoku.config import SudokuConfig
from synthetic.sudoku.dataset import generate

CONF = Path(__file__).resolve().parents[2] / "cbm" / "conf"
DATA = {"n_train": 12, "n_val": 4, "n_calib": 0, "n_test": 4, "n_mip_seeds": 1, "cell_size": 10, "style": "handwritten",
        "corruption": "swaps", "renderer": "v04"}  # fmt: skip
INFO = {"dataset": "sudoku", "modality": "image", "in_shape": [3, 94, 94], "concept_names": list(CONCEPT_NAMES),
        "class_names": ["invalid", "valid"]}  # fmt: skip


def preset(name: str, *over: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={name}", *over])
    return OmegaConf.to_container(cfg.model, resolve=True)


def make(name: str, *over: str):
    torch.manual_seed(0)
    return build_model(preset(name, "model.ocr.epochs=1", "model.mc_samples=512", *over), INFO, {**SudokuConfig(**DATA).to_dict()})


class RefGroupPooling(nn.Module):
    """0.4.1's ``GroupPoolingConceptSudokuCNN``, transcribed."""

    def __init__(self, embedding_dim=16, hidden_dim=64):
        super().__init__()
        self.embedding = nn.Linear(10, embedding_dim, bias=False)
        self.head = nn.Sequential(nn.Linear(2 * embedding_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 1))

    def _pool_groups(self, x, dim):
        return torch.cat([x.mean(dim=dim), x.amax(dim=dim)], dim=-1)

    def forward(self, x):
        x = self.embedding(F.one_hot(x.long(), 10).float()).view(x.size(0), 9, 9, -1)
        row, col = self._pool_groups(x, 2), self._pool_groups(x, 1)
        blocks = x.view(x.size(0), 3, 3, 3, 3, x.size(-1)).permute(0, 1, 3, 2, 4, 5).contiguous().view(x.size(0), 9, 9, x.size(-1))
        block = self._pool_groups(blocks, 2)
        return torch.cat([self.head(row).squeeze(-1), self.head(col).squeeze(-1), self.head(block).squeeze(-1)], dim=1)


class RefValidator(nn.Module):
    """0.4.1's ``SudokuValidatorCNN``, transcribed (it returns the sigmoid)."""

    def __init__(self, embedding_dim=16, hidden_dim=128):
        super().__init__()
        self.embedding = nn.Linear(10, embedding_dim, bias=False)
        self.conv1, self.conv2 = nn.Conv2d(embedding_dim, 64, 3, padding=1), nn.Conv2d(64, 128, 3, padding=1)
        self.conv3 = nn.Conv2d(128, 128, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.mlp = nn.Sequential(nn.Linear(128, hidden_dim), nn.ReLU(), nn.Dropout(0.2), nn.Linear(hidden_dim, 1))

    def forward(self, x):
        x = self.embedding(F.one_hot(x.long(), 10).float())
        x = x.permute(0, 2, 1).view(-1, x.size(2), 9, 9)
        x = F.relu(self.conv3(F.relu(self.conv2(F.relu(self.conv1(x))))))
        return torch.sigmoid(self.mlp(self.pool(x).view(x.size(0), -1)))


def test_the_digit_models_are_the_references():
    digits = torch.randint(0, 10, (5, 81), generator=torch.Generator().manual_seed(0))
    ours, ref = GroupPoolingChecks(), RefGroupPooling()
    ref.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(digits), ref(digits))
    ours, ref = SudokuValidatorCNN().eval(), RefValidator().eval()
    ref.load_state_dict({k.replace("convs.0", "conv1").replace("convs.2", "conv2").replace("convs.4", "conv3"): v for k, v in ours.state_dict().items()})
    torch.testing.assert_close(torch.sigmoid(ours(digits)), ref(digits).squeeze(-1))
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())


@pytest.fixture(scope="module")
def data():
    return generate(SudokuConfig(**DATA))


def attach(model, data) -> SyntheticDataModule:
    dm = SyntheticDataModule(lambda: data, batch_size=8, eval_batch_size=64, device_resident=False)
    dm.setup()
    model._trainer = SimpleNamespace(datamodule=dm)  # what setup("fit") reads: the datamodule's splits
    model.log = model.log_dict = lambda *a, **kw: None  # steps run outside a Trainer
    return dm


def test_the_ocr_trains_on_the_training_boards_only_and_the_cbm_and_dnn_read_the_same(monkeypatch, data):
    seen = []
    real = ocr.fit_ocr

    def spy(net, images, boards, *args, **kw):
        seen.append((images.clone(), boards.clone()))
        return real(net, images, boards, *args, **kw)

    monkeypatch.setattr(ocr, "fit_ocr", spy)
    cbm, dnn = make("sudoku_v04_cbm"), make("sudoku_v04_dnn")
    for model in (cbm, dnn):
        attach(model, data)
        model.setup("fit")
    train = data.split == SPLITS["train"]
    for images, boards in seen:
        np.testing.assert_array_equal(images.numpy(), data.x[train])  # every training board, and nothing else
        np.testing.assert_array_equal(boards.numpy(), data.extra["board"][train])
    assert cbm.ocr_report["cells"] == 12 * 81 and cbm.ocr_report["held_out_cells"] == min(600, 12 * 81 // 2)
    for a, b in zip(cbm.ocr.state_dict().values(), dnn.ocr.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # one seed, one OCR: both models read the same digits
    assert not any(p.requires_grad for p in cbm.ocr.parameters()) and not any(p.requires_grad for p in cbm.head.parameters())


def test_training_reads_true_digits_and_encode_reads_the_ocrs(data):
    model = make("sudoku_v04_cbm")
    dm = attach(model, data)
    batch = next(iter(dm.loader("train", batch_size=6)))
    read = torch.randint(1, 10, (6, 81), generator=torch.Generator().manual_seed(3))
    calls = []
    model.read = lambda x: calls.append(x) or read  # the OCR's digits, whatever the pixels
    fed = []
    forward = model.checks.forward
    model.checks.forward = lambda digits: fed.append(digits) or forward(digits)
    model.training_step(batch, 0)
    model.validation_step(batch, 0)
    assert not calls  # training and validation never run the OCR
    for digits in fed:
        torch.testing.assert_close(digits, batch["board"].reshape(6, 81).long())  # 0.4.1 trains and validates on the true digits
    fed.clear()
    model.encode(batch["x"])
    assert len(calls) == 1 and len(fed) == 1 and torch.equal(fed[0], read)  # scored on the OCR's argmax digits


def test_the_label_probability_is_the_propagation_exact_on_checks_and_batch_free():
    model = make("sudoku_v04_cbm").eval()
    from cbm.models.state import ConceptState

    torch.nn.init.normal_(model.head.weight)
    c = (torch.rand(7, 27, generator=torch.Generator().manual_seed(1)) > 0.3).float()
    state = ConceptState(logits=c * 40 - 20, probs=c)
    expect = torch.softmax(model.head(c).double(), dim=1)
    torch.testing.assert_close(torch.softmax(model.predict(state), dim=1), expect)  # 0/1 checks: every draw is c itself
    p = torch.rand(7, 27, generator=torch.Generator().manual_seed(2))
    soft = ConceptState(logits=torch.logit(p), probs=p)
    whole = model.predict(soft)
    one = model.predict(ConceptState(logits=torch.logit(p[3:4]), probs=p[3:4]))
    torch.testing.assert_close(whole[3:4], one, rtol=0, atol=0)
    mc = torch.softmax(model.head((torch.rand(200_000, 27, generator=torch.Generator().manual_seed(9)) < p[0]).float()).double(), 1)[:, 1].mean()
    assert abs(float(torch.softmax(whole[0], 0)[1]) - float(mc)) < 0.03  # 512 draws estimate the expectation


def test_the_dnn_is_a_bce_on_one_logit(data):
    model = make("sudoku_v04_dnn")
    dm = attach(model, data)
    batch = next(iter(dm.loader("train", batch_size=6)))
    model.eval()  # no dropout: the same logit twice
    loss = model.training_step(batch, 0)
    z = model.dnn(batch["board"].reshape(6, 81))
    torch.testing.assert_close(loss, F.binary_cross_entropy_with_logits(z, batch["y"].float()))
    assert model.n_concepts == 0


def test_the_models_refuse_other_boards():
    from cbm.core.validation import ConfigError

    with pytest.raises(ConfigError, match="read boards drawn by data.renderer=v04"):
        build_model(preset("sudoku_v04_cbm"), INFO, SudokuConfig(cell_size=10, style="handwritten").to_dict())
