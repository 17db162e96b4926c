"""In-memory LightningDataModule over a :class:`~synthetic.base.SyntheticData`.

Synthetic datasets live as tensors in memory and batches are gathered with one
vectorised ``index_select`` per batch: no per-sample ``__getitem__`` and no worker
processes. When attached to a ``Trainer`` the splits move once to the training device
(``device_resident``), so a step on a GPU never waits on a host-to-device copy.

Batch order is a pure function of ``(seed, epoch)``: each epoch's permutation comes
from its own generator, not from the global RNG, so a run resumed at an epoch boundary
sees exactly the batches an uninterrupted run would, whatever else consumed random
numbers. With several processes (DDP) every *global* batch of ``batch_size`` rows is
split between the ranks (rank ``r`` takes rows ``r, r + W, ...``): all ranks take the
same number of steps, and the averaged gradient equals the one-process gradient of the
same rows.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import lightning as L
import numpy as np
import torch

from synthetic.base import SyntheticData

Batch = dict[str, torch.Tensor]


def images_to_float(x: torch.Tensor) -> torch.Tensor:
    """``uint8 [B,H,W,3]`` -> ``float32 [B,3,H,W]`` in [0, 1]; grey ``uint8 [B,H,W]`` (stored with
    one channel) gives the same ``[B,3,H,W]`` with the channel repeated, as an RGB copy would."""
    if x.ndim == 3:
        return x[:, None].expand(-1, 3, -1, -1).float().div_(255.0)
    return x.permute(0, 3, 1, 2).float().div_(255.0)


def stream_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed of the random stream named by ``keys`` in a run seeded ``seed``
    (e.g. ``(epoch,)`` for the data order); distinct keys give independent streams."""
    entropy = [seed & 0xFFFFFFFF, *keys]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> np.uint64(1))


class BatchPlan:
    """Which rows each step of an epoch reads on this rank.

    ``set_epoch`` (called by Lightning at every epoch start) picks the permutation; without
    ``shuffle`` (evaluation) the order is the split's and no row is dropped. When training, a
    final global batch smaller than the number of ranks is dropped, so every rank takes the
    same number of steps (DDP synchronises every backward pass).
    """

    def __init__(self, n: int, batch_size: int, shuffle: bool, seed: int = 0, rank: int = 0, world_size: int = 1):
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"bad batch plan: batch_size={batch_size}, rank={rank}, world_size={world_size}")
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> torch.Tensor:
        """Row order of the current epoch (CPU ``int64``)."""
        if not self.shuffle:
            return torch.arange(self.n)
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(stream_seed(self.seed, self.epoch)))

    def __len__(self) -> int:
        full, rest = divmod(self.n, self.batch_size)
        if self.shuffle:  # training: every rank takes the same number of steps
            return full + (1 if rest >= self.world_size else 0)
        return full + (1 if rest > self.rank else 0)  # evaluation: no row is dropped

    def batches(self, device: torch.device) -> Iterator[torch.Tensor]:
        """Index tensors on ``device``, one per step."""
        order = self.order().to(device)
        for b in range(len(self)):
            rows = order[b * self.batch_size : (b + 1) * self.batch_size]
            yield rows[self.rank :: self.world_size] if self.world_size > 1 else rows


class TensorBatches:
    """Iterable of dict batches over in-memory tensors; ``sampler`` is its :class:`BatchPlan`
    (the attribute Lightning calls ``set_epoch`` on).

    With a ``reader`` pool and images on disk or rendered per batch (:class:`MappedRows`), the next
    ``prefetch`` batches are gathered by the pool's threads while the current one is used (file
    reads and most numpy work release the GIL), in the same order: the same batches, and a GPU
    step does not wait on the disk. The pool belongs to the DataModule and lives across epochs."""

    #: Lightning inspects DataLoader-like attributes; there is no separate batch sampler.
    batch_sampler = None

    def __init__(self, tensors: dict[str, torch.Tensor], plan: BatchPlan, image: bool,
                 reader: ThreadPoolExecutor | None = None, prefetch: int = 0):  # fmt: skip
        self.tensors, self.sampler, self.image = tensors, plan, image
        lazy = any(isinstance(v, MappedRows) for v in tensors.values())
        self.reader, self.prefetch = (reader, prefetch) if lazy and reader is not None and prefetch > 0 else (None, 0)

    def __len__(self) -> int:
        return len(self.sampler)

    def _gather(self, idx: torch.Tensor) -> Batch:
        batch = {k: v.index_select(0, idx) for k, v in self.tensors.items()}
        if self.image:
            batch["x"] = images_to_float(batch["x"])
        return batch

    def __iter__(self) -> Iterator[Batch]:
        device = self.tensors["y"].device if "y" in self.tensors else next(iter(self.tensors.values())).device
        steps = self.sampler.batches(device)
        if self.reader is None:
            for idx in steps:
                yield self._gather(idx)
            return
        pending: deque = deque()
        try:
            for idx in steps:
                pending.append(self.reader.submit(self._gather, idx))
                if len(pending) > self.prefetch:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:  # an epoch cut short (limit_train_batches, an exception): drop what was read ahead
            for f in pending:
                f.cancel()


class TensorSplit:
    """One split's tensors (the batch contract, images still ``uint8 [N,H,W,3]`` or grey ``[N,H,W]``)."""

    def __init__(self, tensors: dict[str, torch.Tensor], image: bool):
        self.tensors = tensors
        self.image = image
        self.n = len(next(iter(tensors.values())))

    def __len__(self) -> int:
        return self.n

    def to(self, device: torch.device) -> TensorSplit:
        return TensorSplit({k: v.to(device) for k, v in self.tensors.items()}, self.image)


class MappedRows:
    """The rows of a memory-mapped array (``storage="disk"``) or of images rendered on access
    (``storage="render"``) that one split reads, gathered per batch: only a batch is ever in memory. Quacks like the tensors it sits beside (``index_select``,
    ``to``, ``len``, ``shape``); batches are gathered in sorted row order (sequential reads) into
    pinned memory when a GPU will take them."""

    def __init__(self, array: np.ndarray, rows: np.ndarray, pin: bool = False):
        self.array, self.rows, self.pin = array, np.asarray(rows, dtype=np.int64), pin
        self.shape = (len(self.rows), *array.shape[1:])
        self.dtype = torch.from_numpy(np.zeros(0, dtype=array.dtype)).dtype
        self.device = torch.device("cpu")

    def __len__(self) -> int:
        return len(self.rows)

    def to(self, device: torch.device | str) -> MappedRows:
        """Stays on disk; batches are moved to ``device`` when gathered."""
        return MappedRows(self.array, self.rows, pin=torch.device(device).type == "cuda")

    def _read(self, want: np.ndarray) -> np.ndarray:
        """Rows ``want`` of the file by positioned reads (ascending), so pages read never stay in
        this process's memory the way a mapping's would."""
        shape, dtype = self.array.shape[1:], self.array.dtype
        block = np.empty((len(want), *shape), dtype=dtype)
        filename = getattr(self.array, "filename", None)
        if filename is None:
            block[:] = self.array[want]
            return block
        row_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        flat = block.reshape(-1).view(np.uint8)
        order = np.argsort(want, kind="stable")
        fd = os.open(filename, os.O_RDONLY)
        try:
            for i in order:
                buf = memoryview(flat[int(i) * row_bytes : (int(i) + 1) * row_bytes])
                got = os.preadv(fd, [buf], int(self.array.offset) + int(want[i]) * row_bytes)
                if got != row_bytes:
                    raise OSError(f"{filename}: short read of row {int(want[i])}")
        finally:
            os.close(fd)
        return block

    def index_select(self, dim: int, idx: torch.Tensor) -> torch.Tensor:
        if dim != 0:
            raise ValueError("MappedRows selects rows only")
        block = self._read(self.rows[idx.cpu().numpy()])
        out = torch.from_numpy(block)
        if self.pin:
            out = out.pin_memory()
        return out.to(idx.device, non_blocking=self.pin)

    def __getitem__(self, i: Any) -> torch.Tensor:
        idx = torch.arange(len(self))[i]
        return self.index_select(0, idx.reshape(-1)).reshape((*idx.shape, *self.shape[1:]))


def data_tensors(data: SyntheticData, rows: np.ndarray) -> dict[str, torch.Tensor]:
    """Tensors of the batch contract for the given rows (images stay ``uint8``; memory-mapped
    images stay on disk, :class:`MappedRows`)."""
    lazy = isinstance(data.x, np.memmap) or not isinstance(data.x, np.ndarray)  # on disk, or rendered per batch
    x = MappedRows(data.x, rows) if lazy else torch.from_numpy(np.ascontiguousarray(data.x[rows]))
    out = {
        "x": x,
        "c": torch.from_numpy(data.c[rows].astype(np.float32)),
        "c_true": torch.from_numpy(data.c_true[rows].astype(np.float32)),
        "y": torch.from_numpy(data.y[rows].astype(np.int64)),
        "meta": torch.from_numpy(data.meta[rows].astype(np.int64)),
        "idx": torch.from_numpy(rows.astype(np.int64)),
    }
    for k, v in data.extra.items():
        out[k] = torch.from_numpy(np.ascontiguousarray(v[rows]))
    return out


SPLITS = ("train", "val", "calib", "test")


class SyntheticDataModule(L.LightningDataModule):
    """Serves the train / val / calib / test splits of a generated dataset.

    Parameters
    ----------
    make_data : returns the dataset (called once; cached generators make this cheap).
    batch_size : rows per training step, over all processes together.
    eval_batch_size : rows per evaluation step, over all processes together.
    seed : seed of the per-epoch training permutations.
    device_resident : when a ``Trainer`` is attached, keep the splits on its device.
    prefetch : batches read ahead by background threads when the images are on disk or rendered
        per batch (``storage="disk"`` / ``"render"``); 0 reads each batch when it is asked for.
        The threads are started once and serve every epoch.
    """

    def __init__(
        self,
        make_data: Callable[[], SyntheticData],
        batch_size: int = 256,
        eval_batch_size: int = 1024,
        seed: int = 0,
        device_resident: bool = True,
        prefetch: int = 2,
    ):
        super().__init__()
        if batch_size <= 0 or eval_batch_size <= 0:
            raise ValueError("batch sizes must be positive")
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        self.prefetch = prefetch
        self._reader: ThreadPoolExecutor | None = None
        self.make_data = make_data
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.seed = seed
        self.device_resident = device_resident
        self.data: SyntheticData | None = None
        self._splits: dict[str, TensorSplit] = {}

    def prepare_data(self) -> None:  # generation fills the cache once per node
        self.make_data()

    def _trainer_device(self) -> torch.device | None:
        trainer = self.trainer
        return trainer.strategy.root_device if trainer is not None and self.device_resident else None

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            self.data = self.make_data()
            image = self.data.modality == "image"
            for name in SPLITS:
                self._splits[name] = TensorSplit(data_tensors(self.data, self.data.indices(name)), image=image)
        device = self._trainer_device()
        if device is not None:
            self.to_device(device)

    def to_device(self, device: torch.device | str) -> SyntheticDataModule:
        """Move every split to ``device`` (once; a no-op when already there)."""
        self.setup() if self.data is None else None
        device = torch.device(device)
        for name, split in self._splits.items():
            if next(iter(split.tensors.values())).device != device:
                self._splits[name] = split.to(device)
        return self

    def split(self, name: str) -> TensorSplit:
        if self.data is None:
            self.setup()
        if name not in self._splits:
            raise ValueError(f"unknown split '{name}', expected one of {SPLITS}")
        return self._splits[name]

    def _ranks(self, shard: bool) -> tuple[int, int]:
        trainer = self.trainer
        if not shard or trainer is None:
            return 0, 1
        return trainer.global_rank, trainer.world_size

    def loader(self, name: str, shuffle: bool = False, batch_size: int | None = None, shard: bool = False) -> TensorBatches:
        """Batches of split ``name``; ``shard``: only this process's share (under a multi-process trainer)."""
        ds = self.split(name)
        bs = batch_size or (self.batch_size if shuffle else self.eval_batch_size)
        rank, world = self._ranks(shard)
        if world > bs:
            raise ValueError(f"batch size {bs} is smaller than the number of processes ({world})")
        plan = BatchPlan(len(ds), bs, shuffle, self.seed, rank, world)
        return TensorBatches(ds.tensors, plan, ds.image, self.reader(), self.prefetch)

    def whole(self, name: str) -> Batch:
        """Split ``name`` as one batch, served as the loaders serve it (images as float ``NCHW``):
        what a pass over a whole split needs (a policy learning from the validation split)."""
        n = len(self.split(name))
        if n == 0:
            raise ValueError(f"the {name} split is empty")
        return next(iter(self.loader(name, batch_size=n)))

    def reader(self) -> ThreadPoolExecutor | None:
        """The read-ahead threads (started on first use, kept across epochs; they exit at
        :meth:`teardown` or when the last loader holding the pool is gone); ``None`` without prefetch."""
        if self.prefetch and self._reader is None:
            self._reader = ThreadPoolExecutor(max_workers=self.prefetch, thread_name_prefix="cbm-read")
        return self._reader if self.prefetch else None

    def teardown(self, stage: str | None = None) -> None:
        if self._reader is not None:
            self._reader.shutdown(wait=True, cancel_futures=True)
            self._reader = None

    def train_dataloader(self) -> TensorBatches:
        return self.loader("train", shuffle=True, shard=True)

    def val_dataloader(self) -> TensorBatches:
        return self.loader("val", shard=True)

    def test_dataloader(self) -> TensorBatches:
        return self.loader("test", shard=True)

    def calib_dataloader(self) -> TensorBatches:
        return self.loader("calib")
