"""LightningDataModule for the Sudoku task (imports torch / lightning, so kept out of ``__init__``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from synthetic.datamodule import SyntheticDataModule
from synthetic.sudoku.config import SudokuConfig
from synthetic.sudoku.dataset import load


class SudokuDataModule(SyntheticDataModule):
    """Serves the Sudoku splits as dict batches ``x, c, c_true, y, meta, idx, board``.

    Parameters
    ----------
    cfg : a :class:`SudokuConfig` or a mapping of its fields (e.g. Hydra's ``cfg.data``).
    cache_dir : on-disk dataset cache (``None``: generate in memory).
    """

    def __init__(
        self,
        cfg: SudokuConfig | dict,
        cache_dir: str | Path | None = None,
        batch_size: int = 256,
        eval_batch_size: int = 1024,
    ):
        if not isinstance(cfg, SudokuConfig):
            cfg = SudokuConfig.from_dict(cfg)
        self.cfg = cfg
        super().__init__(partial(load, cfg, cache_dir), batch_size=batch_size, eval_batch_size=eval_batch_size)
