"""In-memory LightningDataModule over a :class:`~synthetic.base.SyntheticData`.

Small synthetic datasets live as tensors in memory and batches are gathered with
one vectorised index per batch (no per-sample ``__getitem__``, no worker
processes to restart every epoch).
"""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

from synthetic.base import SyntheticData

Batch = dict[str, torch.Tensor]


class TensorBatchDataset(Dataset):
    """Dataset whose ``__getitem__`` takes a whole list of indices and returns a dict batch."""

    def __init__(self, tensors: dict[str, torch.Tensor], image: bool):
        self.tensors = tensors
        self.image = image
        self.n = len(next(iter(tensors.values())))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: list[int]) -> Batch:
        ix = torch.as_tensor(idx, dtype=torch.long)
        batch = {k: v[ix] for k, v in self.tensors.items()}
        if self.image:
            batch["x"] = images_to_float(batch["x"])
        return batch


def images_to_float(x: torch.Tensor) -> torch.Tensor:
    """``uint8 [B,H,W,3]`` -> ``float32 [B,3,H,W]`` in [0, 1]."""
    return x.permute(0, 3, 1, 2).float().div_(255.0)


def data_tensors(data: SyntheticData, rows: np.ndarray) -> dict[str, torch.Tensor]:
    """Tensors of the batch contract for the given rows (images stay ``uint8``)."""
    out = {
        "x": torch.from_numpy(np.ascontiguousarray(data.x[rows])),
        "c": torch.from_numpy(data.c[rows].astype(np.float32)),
        "c_true": torch.from_numpy(data.c_true[rows].astype(np.float32)),
        "y": torch.from_numpy(data.y[rows].astype(np.int64)),
        "meta": torch.from_numpy(data.meta[rows].astype(np.int64)),
        "idx": torch.from_numpy(rows.astype(np.int64)),
    }
    for k, v in data.extra.items():
        out[k] = torch.from_numpy(np.ascontiguousarray(v[rows]))
    return out


class SyntheticDataModule(L.LightningDataModule):
    """Serves the train / val / calib / test splits of a generated dataset."""

    def __init__(self, make_data: Callable[[], SyntheticData], batch_size: int = 256, eval_batch_size: int = 1024):
        super().__init__()
        if batch_size <= 0 or eval_batch_size <= 0:
            raise ValueError("batch sizes must be positive")
        self.make_data = make_data
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.data: SyntheticData | None = None
        self._splits: dict[str, TensorBatchDataset] = {}

    def prepare_data(self) -> None:  # generation fills the cache once per node
        self.make_data()

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            self.data = self.make_data()
            image = self.data.modality == "image"
            for name in ("train", "val", "calib", "test"):
                rows = self.data.indices(name)
                self._splits[name] = TensorBatchDataset(data_tensors(self.data, rows), image=image)

    def split(self, name: str) -> TensorBatchDataset:
        self.setup()
        return self._splits[name]

    def loader(self, name: str, shuffle: bool = False, batch_size: int | None = None) -> DataLoader:
        ds = self.split(name)
        bs = batch_size or (self.batch_size if shuffle else self.eval_batch_size)
        base = RandomSampler(ds) if shuffle else SequentialSampler(ds)
        return DataLoader(ds, sampler=BatchSampler(base, bs, drop_last=False), batch_size=None)

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader("val")

    def test_dataloader(self) -> DataLoader:
        return self.loader("test")

    def calib_dataloader(self) -> DataLoader:
        return self.loader("calib")
