"""The fine-tuning step's host work (issue 45: QLoRA at a fixed ~250 ms a step on an H200): each row is
encoded once (image opened, processed, tokenised) and reused every epoch; a padded length rounded up
to a multiple leaves the loss unchanged; the loop reads its loss from the device once per logged
step, not once per batch; gradient checkpointing is off unless asked (a third more ops per step);
an out-of-memory step says what to change, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cbm.vlm.finetune.collate import IGNORE, Collator
from cbm.vlm.finetune.data import QARow

ROBOT = {"name": "robot", "image_size": 64, "n_train": 10, "n_calib": 0, "n_test": 6}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from cbm.vlm.tiny import TinyVLMConfig, build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny"), TinyVLMConfig(image_px=112))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> list[QARow]:
    from cbm.vlm.finetune.builders import robot_pairs
    from synthetic.registry import data_config

    d = tmp_path_factory.mktemp("pairs")
    return robot_pairs(data_config(ROBOT), d, 4, parts=("knees",), cache_dir=str(d / "cache"))


def processor(tiny: Path):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny, local_files_only=True)


def test_rows_are_encoded_once_and_batches_are_new_tensors(tiny, pairs, monkeypatch):
    col = Collator(processor(tiny), cache_bytes=2**30)
    calls = []
    real = Collator.prompt
    monkeypatch.setattr(Collator, "prompt", lambda self, row, image=None: calls.append(row.pair_id) or real(self, row, image))
    first = col(pairs[:4])
    again = col(pairs[:4])
    assert len(calls) == 4  # the processor ran once per row
    for k in first:
        assert torch.equal(first[k], again[k]) and first[k].data_ptr() != again[k].data_ptr(), k
    again["input_ids"].zero_()  # a batch is the caller's to change: the cache is untouched
    assert torch.equal(col(pairs[:4])["input_ids"], first["input_ids"])
    uncached = Collator(processor(tiny))
    monkeypatch.setattr(Collator, "prompt", lambda self, row, image=None: calls.append(row.pair_id) or real(self, row, image))
    uncached(pairs[:2])
    uncached(pairs[:2])
    assert len(calls) == 8  # cache_bytes=0: every call encodes
    small = Collator(processor(tiny), cache_bytes=1)  # nothing fits: encoded every time, nothing kept
    small(pairs[:1])
    assert small._cached_bytes == 0 and not small._cache


def test_padding_to_a_multiple_leaves_the_loss_unchanged(tiny, pairs):
    from cbm.vlm.finetune.model import load_model

    model = load_model(tiny).eval()
    plain = Collator(processor(tiny))(pairs[:3])
    padded = Collator(processor(tiny), pad_to_multiple_of=64)(pairs[:3])
    n, m = plain["input_ids"].shape[1], padded["input_ids"].shape[1]
    assert m % 64 == 0 and m >= n and m - n < 64
    assert (padded["labels"][:, n:] == IGNORE).all() and (padded["attention_mask"][:, n:] == 0).all()
    for k in ("input_ids", "labels", "attention_mask"):
        assert torch.equal(padded[k][:, :n], plain[k]), k
    with torch.no_grad():
        a, b = model(**plain).loss, model(**padded).loss
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="pad_to_multiple_of"):
        Collator(processor(tiny), pad_to_multiple_of=0)


def _cfg(tiny: Path, tmp_path: Path, **train):
    from cbm.vlm.finetune.config import FinetuneConfig

    return FinetuneConfig(output_dir=str(tmp_path / "run"), model={"path": str(tiny)}, train={"epochs": 2, "batch_size": 2, **train})


def test_the_loop_reads_the_loss_once_per_logged_step(tiny, pairs, tmp_path, monkeypatch):
    from cbm.vlm.finetune.model import LoraSettings, add_lora, load_model
    from cbm.vlm.finetune.run import train

    class Logger:
        rows: list = []

        def log_metrics(self, metrics, step):  # noqa: ANN001
            self.rows.append((step, metrics["train/loss"]))

        def save(self) -> None: ...

        def finalize(self, status: str) -> None: ...

    cfg = _cfg(tiny, tmp_path, log_every=3)
    torch.manual_seed(0)
    model = add_lora(load_model(tiny), LoraSettings(r=4), gradient_checkpointing=False)
    reads = []
    real_float = torch.Tensor.__float__
    monkeypatch.setattr(torch.Tensor, "__float__", lambda t: reads.append(1) or real_float(t))
    logger = Logger()
    losses = train(model, Collator(processor(tiny), cache_bytes=2**30), pairs[:8], cfg, [logger], progress=False)
    assert len(losses) == 8 and all(isinstance(v, float) for v in losses)  # 8 rows / batch 2 x 2 epochs
    assert [s for s, _ in logger.rows] == [3, 6, 8]
    assert [v for _, v in logger.rows] == [losses[2], losses[5], losses[7]]
    assert len(reads) == len(logger.rows)  # one host read per logged step (the rest at the end, in one tolist)


def test_gradient_checkpointing_is_off_unless_asked(tiny):
    from hydra import compose, initialize_config_dir

    from cbm.core.common import CONF_DIR
    from cbm.vlm.finetune.config import TrainSettings

    assert TrainSettings().gradient_checkpointing is False
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        for preset in ("lora_cpu", "qlora"):
            cfg = compose("finetune", overrides=[f"finetune={preset}", f"model.path={tiny}"])
            assert cfg.train.gradient_checkpointing is False, preset


def test_out_of_memory_says_what_to_change(tiny, pairs, tmp_path):
    from cbm.vlm.finetune.run import train

    class Full(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, **batch):  # noqa: ANN003
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    for ckpt, hint in ((False, "train.gradient_checkpointing=true or a smaller train.batch_size"), (True, "a smaller train.batch_size")):
        with pytest.raises(ValueError) as err:
            train(Full(), Collator(processor(tiny)), pairs[:2], _cfg(tiny, tmp_path, gradient_checkpointing=ckpt), [], progress=False)
        assert str(err.value) == f"out of cpu memory at training step 1 (batch 2): {hint} with train.grad_accum"
