"""concept-benchmark 0.4.1's two-stage Sudoku models (``model=sudoku_v04_cbm`` / ``sudoku_v04_dnn``).

0.4.1's pipeline (``scripts/sudoku_pipeline.py``) never shows its check model or its DNN a pixel:
an OCR (:mod:`cbm.models.ocr`) reads every cell, and both models are trained on the training
boards' *true* digits and scored on the OCR's argmax digits. Here both are
:class:`~cbm.models.base.ConceptModel` s over board images: ``encode(x)`` runs the OCR and the
digit model, ``setup("fit")`` trains the OCR on the training split's cells (and the CBM's label
head on its true concepts) before Lightning trains the digit model on true digits, and validation
(early stopping) reads true digits too, as 0.4.1's tabular stage does; tests read the OCR's.

* :class:`OCRCheckCBM` (``ocr_cbm``): 0.4.1's ``GroupPoolingConceptSudokuCNN``, one shared MLP
  over the mean and max of the digit embeddings of each row, column and block, gives the 27 checks
  (BCE, Adam 1e-3); the label predictor is ``LogisticRegression(C=1)`` on the training concepts
  (L-BFGS, :mod:`cbm.models.head_fit`), read by Monte-Carlo propagation of the check
  probabilities (0.4.1's ``propagate_predict_proba``), in float64.
* :class:`OCRDigitDNN` (``ocr_dnn``): 0.4.1's ``SudokuValidatorCNN``: embedded 9 x 9 grid, three
  3x3 convs, global average pool, MLP, one logit (BCE as a two-class cross-entropy on ``[0, z]``).

Both build the OCR first from the run's seed, on a random stream of its own, so the CBM and the
DNN of one seed train the same OCR and read the same digits.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric

from cbm.core.validation import ConfigError
from cbm.models import ocr
from cbm.models.base import Batch, ConceptModel
from cbm.models.head_fit import fit_head
from cbm.models.ocr_config import OCRPipelineConfig
from cbm.models.state import ConceptState
from synthetic.cache import cached_block_arrays

log = logging.getLogger("cbm")

#: Digit classes the digit models embed (0 = empty, as the OCR may read it; 1..9).
N_DIGITS = 10
#: Bump when the OCR's training changes (cached OCRs then stop matching).
OCR_VERSION = 1


class GroupPoolingChecks(nn.Module):
    """0.4.1's ``GroupPoolingConceptSudokuCNN``: digits ``long [B, 81]`` -> check logits ``[B, 27]``
    (``row1..9, col1..9, box1..9``)."""

    def __init__(self, embed_dim: int = 16, hidden: int = 64):
        super().__init__()
        self.embedding = nn.Linear(N_DIGITS, embed_dim, bias=False)
        self.head = nn.Sequential(nn.Linear(2 * embed_dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, digits: Tensor) -> Tensor:
        b = len(digits)
        x = self.embedding(F.one_hot(digits.long(), N_DIGITS).to(self.embedding.weight.dtype)).view(b, 9, 9, -1)
        blocks = x.view(b, 3, 3, 3, 3, -1).permute(0, 1, 3, 2, 4, 5).reshape(b, 9, 9, -1)
        groups = [(x, 2), (x, 1), (blocks, 2)]  # rows, columns, blocks: pool over the group's cells
        feats = torch.cat([torch.cat([g.mean(dim=d), g.amax(dim=d)], dim=-1) for g, d in groups], dim=1)  # [B, 27, 2D]
        return self.head(feats).squeeze(-1)


class SudokuValidatorCNN(nn.Module):
    """0.4.1's DNN: digits ``long [B, 81]`` -> one validity logit ``[B]``."""

    def __init__(self, embed_dim: int = 16, channels: tuple[int, ...] = (64, 128, 128), hidden: int = 128, dropout: float = 0.2):
        super().__init__()
        self.embedding = nn.Linear(N_DIGITS, embed_dim, bias=False)
        convs, c = [], embed_dim
        for width in channels:
            convs += [nn.Conv2d(c, width, 3, padding=1), nn.ReLU()]
            c = width
        self.convs = nn.Sequential(*convs)
        self.mlp = nn.Sequential(nn.Linear(c, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1))

    def forward(self, digits: Tensor) -> Tensor:
        x = self.embedding(F.one_hot(digits.long(), N_DIGITS).to(self.embedding.weight.dtype))  # [B, 81, D]
        x = self.convs(x.permute(0, 2, 1).reshape(len(digits), -1, 9, 9))
        return self.mlp(x.mean(dim=(2, 3))).squeeze(-1)


class _NoBackbone(nn.Module):
    """The two-stage models read digits, not features: no encoder (and no random draws)."""

    out_dim = 0

    def make_concept_layer(self, n_concepts: int) -> None:
        return None

    def aux_loss(self, features, batch) -> None:
        return None


class _OCRModel(ConceptModel):
    """The OCR stage both models share; subclasses add the digit model."""

    config_cls = OCRPipelineConfig

    def make_backbone(self) -> nn.Module:
        return _NoBackbone()

    def build_ocr(self) -> None:
        try:
            self.cell_size, self.margin = ocr.layout(self.hparams.get("data_cfg"))
        except ValueError as err:
            raise ConfigError(f"model {self.cfg.name}: {err}") from None
        self.ocr_seed = int(torch.initial_seed())  # the run's seed (seed_everything), so the CBM's and DNN's OCRs agree
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.ocr_seed)
            o = self.cfg.ocr
            self.ocr = ocr.TinyResNet(o.width, o.input_px, o.hidden)
        self.ocr_report: dict | None = None
        self._ocr_test = nn.ModuleDict({"cell": MeanMetric(), "boards": MeanMetric()})

    def ocr_key(self) -> dict:
        """What the trained OCR depends on (its cache key)."""
        from dataclasses import asdict

        from synthetic.registry import data_config

        data = data_config(dict(self.hparams.get("data_cfg") or {})).to_dict()
        return {"kind": "ocr", "version": OCR_VERSION, "data": data, "ocr": asdict(self.cfg.ocr), "seed": self.ocr_seed,
                "torch": torch.__version__.split("+")[0]}  # fmt: skip

    def check_data(self, data) -> None:
        if "board" not in data.extra:
            raise ConfigError(f"model {self.cfg.name}: needs the boards' digits (data.extra['board']): Sudoku data only")

    def read(self, x: Tensor) -> Tensor:
        """The OCR's argmax digits ``long [B, 81]``."""
        return ocr.read_digits(self.ocr, x, self.cell_size, self.margin)

    def true_digits(self, batch: Batch) -> Tensor:
        return batch["board"].reshape(len(batch["y"]), 81).long()

    def fit_ocr(self) -> None:
        """Train the OCR on the training split's cells (only those), then freeze it. Under a cache
        directory (``cbm-train``'s) the trained OCR is kept there, keyed by the data, the OCR settings
        and the seed: the CBM and the DNN of one seed train it once and read the same digits."""
        split = getattr(getattr(self._trainer, "datamodule", None), "split", None)
        if split is None:
            raise ValueError(f"model {self.cfg.name}: the OCR trains on the training split of a SyntheticDataModule")
        train = split("train").tensors

        def build() -> dict[str, np.ndarray]:
            report = ocr.fit_ocr(self.ocr, train["x"], train["board"], self.cell_size, self.margin, self.cfg.ocr, self.ocr_seed)
            arrays = {f"w.{k}": v.detach().cpu().numpy() for k, v in self.ocr.state_dict().items()}
            arrays["report"] = np.frombuffer(json.dumps(report).encode(), dtype=np.uint8)
            return arrays

        arrays = cached_block_arrays(self.ocr_key(), build, "ocr", required=("report",))
        self.ocr.load_state_dict({k[2:]: torch.from_numpy(np.array(v)) for k, v in arrays.items() if k.startswith("w.")})
        self.ocr_report = json.loads(bytes(np.asarray(arrays["report"], dtype=np.uint8)).decode())
        self.ocr.requires_grad_(False)
        log.info("OCR trained on %d cells of the training boards: best held-out cell accuracy %.4f (epoch %d)",
                 self.ocr_report["cells"], self.ocr_report["held_out_acc"], self.ocr_report["best_epoch"])  # fmt: skip

    def train(self, mode: bool = True):
        super().train(mode)
        if hasattr(self, "ocr"):
            self.ocr.eval()  # trained before the digit model, frozen since
        return self

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        super().test_step(batch, batch_idx)
        wrong = self.read(batch["x"]) != self.true_digits(batch)
        self._ocr_test["cell"].update((~wrong).float().flatten())
        self._ocr_test["boards"].update(wrong.any(1).float())
        self.log("test/ocr_cell_acc", self._ocr_test["cell"], on_step=False, on_epoch=True, batch_size=len(wrong))
        self.log("test/boards_misread", self._ocr_test["boards"], on_step=False, on_epoch=True, batch_size=len(wrong))


class OCRCheckCBM(_OCRModel):
    """OCR -> 0.4.1's group-pooling check model -> its logistic label predictor (module docstring)."""

    def build(self) -> None:
        self.build_ocr()
        self.checks = GroupPoolingChecks(self.cfg.embed_dim, self.cfg.check_hidden)
        self.head = nn.Linear(self.n_concepts, self.n_classes)
        if self.n_concepts != 27 or self.n_classes != 2:
            raise ConfigError(f"model {self.cfg.name}: reads the 27 checks of a 9x9 board into valid / invalid, "
                              f"got {self.n_concepts} concepts and {self.n_classes} classes")  # fmt: skip
        g = torch.Generator().manual_seed(self.cfg.mc_seed)
        self.register_buffer("mc_noise", torch.rand(self.cfg.mc_samples, self.n_concepts, generator=g, dtype=torch.float64), persistent=False)

    def setup(self, stage: str) -> None:
        if stage != "fit":
            return
        self.fit_ocr()
        train = self._trainer.datamodule.split("train").tensors
        c, y = train["c"], train["y"]
        h = self.cfg.head
        fit = fit_head(self.head, c, y, h.l2_for(len(y), self.n_classes), h.max_iter, h.tol)
        self.head.requires_grad_(False)
        log.info("label predictor (LogisticRegression C=%s) fit on %d training concept rows: training accuracy %.2f%%", h.C, fit.rows, 100 * fit.train_acc)

    def encode(self, x: Tensor) -> ConceptState:
        digits = self.read(x)
        logits = self.checks(digits)
        return ConceptState(logits=logits, probs=torch.sigmoid(logits), extras={"digits": digits})

    def predict(self, state: ConceptState) -> Tensor:
        """``[log(1 - p), log p]`` (float64) with ``p`` the head's mean P(valid) over the fixed Bernoulli
        draws of the checks (0.4.1's Monte-Carlo propagation; intervened checks are 0 / 1, so exact)."""
        p = state.probs.double()
        w, b = self.head.weight.double() * self.concept_keep.double(), self.head.bias.double()
        noise = self.mc_noise
        rows = max(1, (1 << 21) // (len(noise) * p.shape[1]))
        out = []
        for a in range(0, len(p), rows):
            draws = (noise[None] < p[a : a + rows, None]).double()  # [b, S, m]
            out.append(torch.softmax(draws @ w.T + b, dim=-1)[..., 1].mean(dim=1))
        pv = torch.cat(out) if out else p.new_zeros(0)
        return torch.stack([torch.log1p(-pv.clamp(max=1 - 1e-16)), torch.log(pv.clamp(min=1e-300))], dim=1)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        logits = self.checks(self.true_digits(batch))
        loss = F.binary_cross_entropy_with_logits(logits, batch["c"].to(logits))
        self.log("train/concept_loss", loss, on_step=False, on_epoch=True, batch_size=len(logits), prog_bar=True)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        """On the true digits, as 0.4.1's tabular stage validates (its early stopping: concept F1)."""
        logits = self.checks(self.true_digits(batch))
        state = ConceptState(logits=logits, probs=torch.sigmoid(logits))
        self._update_metrics("val", batch, state, self.predict(state))


class OCRDigitDNN(_OCRModel):
    """OCR -> 0.4.1's ``SudokuValidatorCNN`` (module docstring)."""

    has_concepts = False

    def build(self) -> None:
        self.build_ocr()
        c = self.cfg
        self.dnn = SudokuValidatorCNN(c.embed_dim, tuple(c.dnn_channels), c.dnn_hidden, c.dnn_dropout)
        if self.n_classes != 2:
            raise ConfigError(f"model {self.cfg.name}: one validity logit needs two classes, got {self.n_classes}")

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.fit_ocr()

    def encode(self, x: Tensor) -> ConceptState:
        digits = self.read(x)
        empty = digits.new_zeros(len(digits), 0, dtype=torch.float32)
        return ConceptState(logits=empty, probs=empty, extras={"digits": digits})

    def intervene(self, state: ConceptState, mask: Tensor, values: Tensor) -> ConceptState:
        raise ValueError("the DNN has no concepts to intervene on")

    def logits_of(self, digits: Tensor) -> Tensor:
        z = self.dnn(digits)
        return torch.stack([torch.zeros_like(z), z], dim=1)

    def predict(self, state: ConceptState) -> Tensor:
        return self.logits_of(state.extras["digits"])

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss = F.cross_entropy(self.logits_of(self.true_digits(batch)), batch["y"])
        self.log("train/task_loss", loss, on_step=False, on_epoch=True, batch_size=len(batch["y"]), prog_bar=True)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        """On the true digits (0.4.1's early stopping: the validation loss)."""
        digits = self.true_digits(batch)
        empty = torch.zeros(len(digits), 0, device=digits.device)
        self._update_metrics("val", batch, ConceptState(logits=empty, probs=empty), self.logits_of(digits))
