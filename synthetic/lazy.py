"""Images rendered per batch from the stored attributes / boards (``storage="render"``): nothing
but the labels and attributes is kept, and a batch's images are drawn when it is read. Exact and
seeded: the same rows give the same bytes as the cached arrays (every image is a function of its
own row: board render seeds, robot attributes; robots with pixel noise draw it from per-split
streams and so cannot be rendered row by row)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class RenderedImages:
    """Array-like ``[N, ...]`` whose rows are rendered on access by ``take(rows) -> array``."""

    def __init__(self, take: Callable[[np.ndarray], np.ndarray], shape: tuple[int, ...], dtype: Any = np.uint8):
        self.take = take
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)
        self.nbytes = 0  # nothing is held

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> np.ndarray:
        rows = np.arange(self.shape[0])[index]
        if np.ndim(rows) == 0:
            return self.take(np.asarray([rows]))[0]
        return self.take(np.asarray(rows).reshape(-1)).reshape(*np.shape(rows), *self.shape[1:])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """Everything rendered (exports, small sets)."""
        out = self.take(np.arange(self.shape[0]))
        return out if dtype is None else out.astype(dtype)
