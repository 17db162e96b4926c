"""Typed schemas of the two-stage Sudoku models (``model=sudoku_v04_cbm`` / ``sudoku_v04_dnn``):
concept-benchmark 0.4.1's pipeline, an OCR that reads the cells and a model over the read digits.
Torch-free, so a command line is validated before torch is imported."""

from __future__ import annotations

from dataclasses import dataclass, field

from cbm.models.config import HeadConfig, ModelConfig, OptimConfig

#: How the OCR's cross-entropy weighs the digit classes: 0.4.1's inverse frequencies, or equally.
CLASS_WEIGHTS = ("inverse_frequency", "none")


@dataclass
class OCRConfig:
    """The cell reader (0.4.1's ``TinyResNet``, ``concept_benchmark/synthetic/sudoku/ocr/``), trained
    before the model on the cells of the training boards only, 10 classes (0 = empty, 1..9)."""

    #: Channels of the stem and both residual blocks (0.4.1: 32).
    width: int = 32
    #: Side the grey, inverted cell crops are resized to (bilinear, as its cv2 INTER_LINEAR; 0.4.1: 28).
    input_px: int = 28
    #: Hidden width of the classifier over the pooled map (0.4.1: 256).
    hidden: int = 256
    #: Most epochs, and epochs without a better held-out cell accuracy before stopping (0.4.1: 5, 3).
    epochs: int = 5
    patience: int = 3
    batch_size: int = 256
    lr: float = 1e-3
    #: Share of the training cells held out to pick the best epoch, and its floor (0.4.1: 0.12, 600).
    held_out: float = 0.12
    min_held_out: int = 600
    #: Class weights of the cross-entropy: ``inverse_frequency`` (counted on the first
    #: ``weight_sample`` training cells, normalised to sum to 10, as 0.4.1) or ``none``.
    class_weights: str = "inverse_frequency"
    weight_sample: int = 8000

    def __post_init__(self) -> None:
        for name in ("width", "input_px", "hidden", "epochs", "batch_size", "min_held_out", "weight_sample"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"model.ocr.{name} must be a positive integer, got {v!r}")
        if self.input_px < 8 or self.input_px % 4:
            raise ValueError(f"model.ocr.input_px must be a multiple of 4 and >= 8 (two 2x2 poolings), got {self.input_px}")
        if isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 1:
            raise ValueError(f"model.ocr.patience must be a positive integer, got {self.patience!r}")
        if not self.lr > 0:
            raise ValueError(f"model.ocr.lr must be > 0, got {self.lr}")
        if not 0.0 < self.held_out < 0.5:
            raise ValueError(f"model.ocr.held_out must be in (0, 0.5), got {self.held_out}")
        if self.class_weights not in CLASS_WEIGHTS:
            raise ValueError(f"model.ocr.class_weights must be one of {CLASS_WEIGHTS}, got '{self.class_weights}'")


@dataclass
class OCRPipelineConfig(ModelConfig):
    """Both two-stage models: the OCR, then over its argmax digits 0.4.1's check model
    (``GroupPoolingConceptSudokuCNN`` + a logistic label head, ``ocr_cbm``) or its DNN
    (``SudokuValidatorCNN``, ``ocr_dnn``); both trained on the *true* digits of the training boards,
    scored on the OCR's digits."""

    name: str = "ocr_cbm"
    #: The check model learns the concepts, the head is fit on the true ones (0.4.1's CBM).
    training: str = "independent"
    ocr: OCRConfig = field(default_factory=OCRConfig)
    #: Width of the digit embedding (one-hot 0..9 -> embed_dim, no bias; 0.4.1: 16).
    embed_dim: int = 16
    #: ocr_cbm: hidden width of the per-group MLP over [mean, max] pooled embeddings (0.4.1: 64).
    check_hidden: int = 64
    #: ocr_dnn: conv widths over the 9 x 9 embedded grid and the MLP's hidden width (0.4.1: 64/128/128, 128).
    dnn_channels: list[int] = field(default_factory=lambda: [64, 128, 128])
    dnn_hidden: int = 128
    #: ocr_dnn: dropout before its output (0.4.1: 0.2).
    dnn_dropout: float = 0.2
    #: ocr_cbm: the label probability propagates the concept probabilities by Monte Carlo, as 0.4.1's
    #: ``propagate_predict_proba``: the mean head output over this many Bernoulli draws of the 27 checks
    #: (common random numbers from ``mc_seed``, so a board's probability does not depend on its batch).
    mc_samples: int = 4096
    mc_seed: int = 0
    #: 0.4.1's label predictor: LogisticRegression(C=1) on the training concepts.
    head: HeadConfig = field(default_factory=lambda: HeadConfig(kind="linear", solver="lbfgs", C=1.0))
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=1e-3))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.training != "independent":
            raise ValueError(f"model.training: the OCR models train their concept / label stage on the true digits (independent), got '{self.training}'")
        if self.head.kind != "linear" or self.head.solver != "lbfgs":
            raise ValueError("model.head: the OCR CBM's label predictor is a logistic regression solved by L-BFGS (kind=linear, solver=lbfgs)")
        for name in ("embed_dim", "check_hidden", "dnn_hidden", "mc_samples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"model.{name} must be a positive integer, got {v!r}")
        if not self.dnn_channels or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in self.dnn_channels):
            raise ValueError(f"model.dnn_channels must be a non-empty list of positive integers, got {self.dnn_channels!r}")
        if not 0.0 <= self.dnn_dropout < 1.0:
            raise ValueError(f"model.dnn_dropout must be in [0, 1), got {self.dnn_dropout}")


#: Built-in name -> (class, schema) of the two-stage models.
OCR_MODELS: dict[str, tuple[str, type[ModelConfig]]] = {
    "ocr_cbm": ("cbm.models.sudoku_v04.OCRCheckCBM", OCRPipelineConfig),
    "ocr_dnn": ("cbm.models.sudoku_v04.OCRDigitDNN", OCRPipelineConfig),
}
