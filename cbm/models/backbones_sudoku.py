"""Sudoku board reader: a shared per-cell digit reader and a differentiable group-validity layer.

``SudokuCellReader`` (backbone ``sudoku_cells``) maps a rendered board ``x [B,3,S,S]`` to
``features [B, 81*9]`` (4x4 boards: ``[B, 16*4]``): the digit log-probabilities of the 81 cells (row-major cells, digit
``d`` at column ``cell*9 + d-1``). Cells are cut with one vectorised op: the grey, inverted
board without its outer border is area-downsampled to ``9h x 9h`` (``h = cell_px``), which
keeps every pooling window inside one cell because the cell pitch is exact (see
:mod:`synthetic.sudoku.render`), then reshaped to ``[B*81, 1, h, h]`` for the shared reader (strided convs
from ``backbone.channels``, then an MLP from ``backbone.hidden``; the ``cbm_sudoku`` preset
uses a pixel MLP, ``channels: []``).

``make_concept_layer(27)`` gives :class:`GroupValidity`: for each of the 27 groups (in the
checker's order ``row1..9, col1..9, box1..9``) the expected number of same-digit cell pairs
under independent cells,

    C_g = sum_{i<j in g} <p_i, p_j> = (sum_d n_d**2 - sum_i |p_i|**2) / 2,   n_d = sum_{i in g} p_i[d],

is 0 for a valid group and >= 1 for an invalid one when the digits are read with certainty.
``exp(-C)`` is the Poisson estimate of "no digit repeats", and the concept logit is
``a - b * (1 - exp(-C))`` with a learnable offset ``a`` and scale ``b`` (init ``b = 16``,
``a = b (1 - 1/e) / 2``: logits about +-5 for a one-hot reader), so a perfect reader gives
exactly correct concepts at init. Unlike ``sum_d (n_d - 1)**2`` the score has a gradient at a
uniform (untrained) reader, and because it saturates there (``C = 4``) the concept loss
cannot swamp the digit supervision early in training (a linear ``a - b * C`` with a
confident ``b`` made the reader collapse to confidently wrong digits).

``aux_loss(features, batch)``: digit cross-entropy against the generator's ``batch["board"]``
(weighted by ``model.backbone.aux_weight``; 0 trains the reader from the concepts alone,
which identifies digits only up to a permutation — enough for the checks).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cbm.models.backbones import Backbone, register_backbone
from cbm.models.config import BackboneConfig, DataInfo
from cbm.models.pooling import adaptive_avg_pool2d
from synthetic.sudoku.geometry import geometry
from synthetic.sudoku.render import image_size

#: Cells, digits and checks of the 9x9 board (4x4 boards, ``block_size=2``: 16, 4 and 12).
N_CELLS, N_DIGITS, N_GROUPS = 81, 9, 27
#: Side (px) every cell is area-resampled to before the digit CNN.
CELL_PX = 16


@lru_cache(maxsize=64)
def cell_size_for(side: int, n: int = 9) -> int:
    """Cell pitch of a rendered ``n x n`` board of ``side`` px (inverse of ``image_size``; it is strictly increasing)."""
    cs = max(1, (side - 2) // n)
    while cs > 1 and image_size(cs, n) > side:
        cs -= 1
    while image_size(cs, n) < side:
        cs += 1
    if image_size(cs, n) != side:
        raise ValueError(
            f"sudoku_cells: a {side} px image is not a rendered Sudoku board of {n}x{n} cells (no cell size gives it)"
        )
    return cs


def group_membership(box: int = 3) -> Tensor:
    """``float [81, 27]`` (4x4: ``[16, 12]``): 1 where cell ``i`` belongs to group ``g`` (checker order)."""
    return torch.from_numpy(geometry(box).member.copy())


def digit_log_probs(features: Tensor, n: int = N_DIGITS) -> Tensor:
    """``[B, 81, 9]`` view of the reader's features (``[B, n*n, n]`` for an ``n x n`` board)."""
    return features.view(len(features), n * n, n)


def board_box(info: DataInfo) -> int:
    """Box side of the boards a model reads: from the checks (27 or 12), else (a black box without
    concepts) from the image side, 9x9 first."""
    if info.n_concepts:
        if info.n_concepts not in (N_GROUPS, geometry(2).n_groups):
            raise ValueError(
                f"backbone 'sudoku_cells' reads the 27 Sudoku checks (12 on 4x4 boards), the dataset has {info.n_concepts} concepts"
            )
        return 3 if info.n_concepts == N_GROUPS else 2
    side = int(info.in_shape[-1])
    for box in (3, 2):
        try:
            cell_size_for(side, box * box)
            return box
        except ValueError:
            continue
    raise ValueError(f"sudoku_cells: a {side} px image is not a rendered Sudoku board (no cell size gives it)")


def expected_collisions(probs: Tensor, member: Tensor) -> Tensor:
    """Expected same-digit pairs per group ``[B, 27]`` from cell digit probabilities ``[B, 81, 9]``."""
    counts = torch.einsum("bcd,cg->bgd", probs, member)  # n_d per group [B, 27, 9]
    self_sq = probs.pow(2).sum(-1) @ member  # sum_i |p_i|^2 per group [B, 27]
    return 0.5 * (counts.pow(2).sum(-1) - self_sq)


class GroupValidity(nn.Module):
    """Digit log-probabilities ``[B, 729]`` -> 27 group-validity logits ``a - b * (1 - exp(-C_g))``.

    ``exp(-C)`` is the Poisson estimate of "no digit repeats in the group", so the score
    ``1 - exp(-C)`` is 0 for a surely valid group and >= 1 - 1/e for a surely invalid one;
    the defaults put the threshold in the middle, ``a = b (1 - 1/e) / 2``. The score
    saturates for a near-uniform (untrained) reader, so the concept loss nudges rather
    than overrides the digit supervision early in training.
    """

    def __init__(self, scale: float = 16.0, offset: float | None = None, box: int = 3):
        super().__init__()
        if offset is None:
            offset = scale * (1.0 - math.exp(-1.0)) / 2
        if not 0.0 < offset < scale * (1.0 - math.exp(-1.0)):
            raise ValueError(
                "GroupValidity: need 0 < offset < scale * (1 - 1/e) to read one-hot boards exactly"
            )
        self.n = box * box
        self.register_buffer("member", group_membership(box), persistent=False)
        self.offset = nn.Parameter(torch.tensor(float(offset)))
        self.log_scale = nn.Parameter(torch.tensor(math.log(scale)))

    def collisions(self, features: Tensor) -> Tensor:
        """Expected same-digit pairs ``C`` per group ``[B, 27]``."""
        return expected_collisions(digit_log_probs(features, self.n).exp(), self.member.to(features.dtype))

    def forward(self, features: Tensor) -> Tensor:
        return self.offset + self.log_scale.exp() * torch.expm1(-self.collisions(features))


class SudokuCellReader(Backbone):
    """Shared per-cell digit reader over the 81 cell crops; features are digit log-probabilities.

    Parameters
    ----------
    cfg : ``channels`` (widths of 3x3 stride-2 conv blocks; may be empty), then ``hidden``
        (widths of fully connected layers on the flattened map; may be empty), ``dropout``
        (before the digit classifier), ``aux_weight`` (used by the model). ``channels: []``
        gives a per-cell MLP on the raw pixels.
    info : the dataset; ``in_shape = [3, S, S]`` fixes the expected board size.
    cell_px : side every cell is resampled to.
    """

    def __init__(self, cfg: BackboneConfig, info: DataInfo, cell_px: int = CELL_PX):
        super().__init__()
        if info.modality != "image" or len(info.in_shape) != 3 or info.in_shape[1] != info.in_shape[2]:
            raise ValueError(
                f"backbone 'sudoku_cells' needs square board images, got {info.modality} {info.in_shape}"
            )
        self.box = board_box(info)
        self.n = self.box * self.box  # cells per side = digits
        self.side = int(info.in_shape[1])
        self.cell_size = cell_size_for(self.side, self.n)
        self.cell_px = int(cell_px)
        layers: list[nn.Module] = []
        c, h = 1, self.cell_px
        for width in cfg.channels:  # strided convs: cheap on the B*81 crops of a batch
            stride = 2 if h >= 4 else 1
            layers += [
                nn.Conv2d(c, width, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(),
            ]
            h = (h - 1) // stride + 1
            c = width
        layers.append(nn.Flatten())
        d = c * h * h
        for width in cfg.hidden:
            layers += [nn.Linear(d, width, bias=False), nn.BatchNorm1d(width), nn.ReLU()]
            d = width
        layers += [nn.Dropout(cfg.dropout), nn.Linear(d, self.n)]
        #: ``[N, 1, h, h]`` cell crops -> ``[N, n]`` digit scores.
        self.net = nn.Sequential(*layers)
        self.out_dim = self.n**3

    # ------------------------------------------------------------------ reading
    def cells(self, x: Tensor) -> Tensor:
        """Grey, inverted (ink = 1), resampled cell crops ``[B*81, 1, h, h]``."""
        if x.dim() != 4 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"sudoku_cells: expected boards [B,C,S,S], got {tuple(x.shape)}")
        n = self.n
        cs = cell_size_for(int(x.shape[-1]), n)
        grid = n * cs
        x = x[:, :, :grid, :grid]  # drop the outer bottom / right border
        x = x.float().div(255.0) if x.dtype == torch.uint8 else x.float()
        ink = 1.0 - x.mean(dim=1, keepdim=True)
        h = self.cell_px
        # cell k spans [k*cs, (k+1)*cs) = pooling bins [k*h, (k+1)*h): no window crosses a cell edge
        small = adaptive_avg_pool2d(ink, n * h)
        b = len(x)
        return small.view(b, 1, n, h, n, h).permute(0, 2, 4, 1, 3, 5).reshape(b * n * n, 1, h, h)

    def digit_logits(self, x: Tensor) -> Tensor:
        """Unnormalised digit scores ``[B, 81, 9]`` (``[B, n*n, n]``; digit ``d`` at index ``d-1``)."""
        return self.net(self.cells(x)).view(len(x), self.n * self.n, self.n)

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(self.digit_logits(x), dim=-1).flatten(1)

    @torch.no_grad()
    def read(self, x: Tensor) -> Tensor:
        """Most likely board ``long [B, 9, 9]`` (``[B, n, n]``; digits 1..n)."""
        return (self(x).view(len(x), self.n, self.n, self.n).argmax(-1) + 1).long()

    # ------------------------------------------------------------------ model hooks
    def make_concept_layer(self, n_concepts: int) -> nn.Module:
        if n_concepts != 3 * self.n:
            raise ValueError(f"sudoku_cells: the group-validity layer gives {3 * self.n} concepts, not {n_concepts}")
        return GroupValidity(box=self.box)

    def aux_loss(self, features: Tensor | None, batch: dict[str, Tensor]) -> Tensor:
        """Mean digit cross-entropy against ``batch["board"]`` (cells outside 1..9 are ignored)."""
        if features is None or "board" not in batch:
            raise ValueError(
                "sudoku_cells aux_loss needs the reader's features and the batch's 'board' digits"
            )
        n = self.n
        target = batch["board"].reshape(len(features), n * n).long() - 1
        known = ((target >= 0) & (target < n)).to(features.dtype)
        # elementwise (one-hot product, masked mean) rather than F.nll_loss / boolean indexing,
        # so the loss is deterministic on CUDA too
        onehot = F.one_hot(target.clamp(0, n - 1), n).to(features.dtype)
        nll = -(digit_log_probs(features, n) * onehot).sum(-1)
        return (nll * known).sum() / known.sum().clamp_min(1.0)


@register_backbone("sudoku_cells")
def _sudoku_cells(cfg: BackboneConfig, info: DataInfo) -> nn.Module:
    return SudokuCellReader(cfg, info)
