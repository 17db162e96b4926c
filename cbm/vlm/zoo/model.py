"""The zoo's tiny Qwen2-VL: built from the config, taught with teacher forcing, read by its class
logits or by greedy generation. Every prompt of one question has the same length (one image of a
fixed size), so batches stack without padding on the prompt side and the pixel values of every
image are computed once."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cbm.core.progress import progress_bar_wanted
from cbm.vlm.finetune.collate import IGNORE
from cbm.vlm.tiny import TinyVLMConfig, build_tiny_vlm
from cbm.vlm.zoo.config import ZooData, ZooModel

#: Images turned into pixel values per processor call (bounds the memory of one call).
PIXEL_CHUNK = 2048
#: Rows per forward pass when the zoo only reads (scores, generation).
EVAL_BATCH = 200


def build(path: str | Path, model: ZooModel, data: ZooData, words: Sequence[str]) -> Path:
    """The untrained base model and its processor, saved to ``path``."""
    quiet_hub()
    cfg = TinyVLMConfig(hidden=model.hidden, layers=model.layers, heads=model.heads, kv_heads=model.kv_heads, intermediate=2 * model.hidden,
                        vision_width=model.vision_width, vision_layers=model.vision_layers, vision_heads=model.vision_heads,
                        image_px=data.image_size, patch=model.patch, seed=model.seed, words=tuple(words))  # fmt: skip
    return build_tiny_vlm(path, cfg)


def fresh(path: str | Path, model: ZooModel, data: ZooData, words: Sequence[str]) -> tuple[Any, Any]:
    """``(model, processor)`` of a new random-init base (built in ``path``, loaded, ``path`` removed)."""
    import shutil

    built = build(path, model, data, words)
    try:
        return load(built)
    finally:
        shutil.rmtree(built, ignore_errors=True)


def quiet_hub() -> None:
    """No transformers progress bars (weights loading, shards written) where none is wanted."""
    import transformers as hf

    if not progress_bar_wanted(None):
        hf.utils.logging.disable_progress_bar()


def load(path: str | Path) -> tuple[Any, Any]:
    """``(model, processor)`` from a saved directory (eager attention: localisation reads it)."""
    import transformers as hf

    quiet_hub()
    model = hf.Qwen2VLForConditionalGeneration.from_pretrained(path, attn_implementation="eager")
    return model, hf.AutoProcessor.from_pretrained(path)


def load_member(path: str | Path, quant: str = "none", device: str = "auto") -> tuple[Any, Any]:
    """``(model, processor)`` for the repair: the plain load where it runs on the CPU in full
    precision, else :func:`cbm.vlm.finetune.model.load_model` (``quant`` 4bit / 8bit: QLoRA on CUDA)."""
    import torch

    if quant == "none" and (device == "cpu" or (device == "auto" and not torch.cuda.is_available())):
        return load(path)
    import transformers as hf

    from cbm.vlm.finetune.model import load_model

    quiet_hub()
    return load_model(path, quant=quant, device=device, attn_implementation="eager"), hf.AutoProcessor.from_pretrained(path)


class Encoder:
    """Prompts, pixel values and answer ids for one processor."""

    def __init__(self, processor: Any):
        self.proc = processor
        self.tok = processor.tokenizer
        self.eot = int(self.tok.convert_tokens_to_ids("<|im_end|>"))
        self.pad = int(self.tok.pad_token_id)
        self._prompts: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def prompt(self, question: str, image: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids [P], mm_token_type_ids [P])`` of the user turn with one image of this size."""
        key = f"{question}|{image.shape}"
        if key not in self._prompts:
            msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
            text = self.proc.apply_chat_template(msgs, add_generation_prompt=True)
            enc = self.proc(text=[text], images=[image], return_tensors="pt")
            self._prompts[key] = (enc["input_ids"][0], enc["mm_token_type_ids"][0])
        return self._prompts[key]

    def pixels(self, images: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pixel_values [N, patches, dim], image_grid_thw [N, 3])``."""
        vals, grids = [], []
        for s in range(0, len(images), PIXEL_CHUNK):
            out = self.proc.image_processor(images=list(images[s:s + PIXEL_CHUNK]), return_tensors="pt")
            n = len(images[s:s + PIXEL_CHUNK])
            vals.append(out["pixel_values"].reshape(n, -1, out["pixel_values"].shape[-1]))
            grids.append(out["image_grid_thw"])
        return torch.cat(vals), torch.cat(grids)

    def answers(self, texts: Sequence[str]) -> list[torch.Tensor]:
        """Token ids of each answer, the end of turn appended."""
        return [torch.tensor([*self.tok(t, add_special_tokens=False)["input_ids"], self.eot]) for t in texts]

    def token(self, word: str) -> int:
        ids = self.tok(word, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ValueError(f"{word!r} is not one token of this model's vocabulary")
        return int(ids[0])

    def batch(self, prompt: tuple[torch.Tensor, torch.Tensor], pixels: tuple[torch.Tensor, torch.Tensor], idx: np.ndarray,
              answers: Sequence[torch.Tensor] | None = None) -> dict[str, torch.Tensor]:  # fmt: skip
        """Model inputs for rows ``idx`` (with ``labels`` when ``answers`` are given, right-padded)."""
        ids, mm = prompt
        n, p = len(idx), len(ids)
        pv, grid = pixels
        t = torch.as_tensor(idx)
        out = {"pixel_values": pv[t].reshape(-1, pv.shape[-1]), "image_grid_thw": grid[t]}
        if answers is None:
            return {**out, "input_ids": ids.expand(n, -1).clone(), "attention_mask": torch.ones(n, p, dtype=torch.long),
                    "mm_token_type_ids": mm.expand(n, -1).clone()}  # fmt: skip
        rows = [answers[int(i)] for i in idx]
        width = max(len(a) for a in rows)
        tail = torch.full((n, width), self.pad)
        mask = torch.zeros(n, width, dtype=torch.long)
        for j, a in enumerate(rows):
            tail[j, :len(a)] = a
            mask[j, :len(a)] = 1
        input_ids = torch.cat([ids.expand(n, -1), tail], 1)
        labels = input_ids.clone()
        labels[:, :p] = IGNORE
        labels[:, p:][mask == 0] = IGNORE
        return {**out, "input_ids": input_ids, "labels": labels, "attention_mask": torch.cat([torch.ones(n, p, dtype=torch.long), mask], 1),
                "mm_token_type_ids": torch.cat([mm.expand(n, -1), torch.zeros(n, width, dtype=mm.dtype)], 1)}  # fmt: skip


def on_device(model: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``batch`` on the device of ``model``'s weights (a GPU repair; the CPU zoo moves nothing)."""
    dev = getattr(model, "device", None)
    return batch if dev is None or dev.type == "cpu" else {k: v.to(dev) for k, v in batch.items()}


def _batches(n: int, size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    perm = rng.permutation(n)
    for s in range(0, n, size):
        yield perm[s:s + size]


def fit(model: Any, enc: Encoder, prompt: tuple[torch.Tensor, torch.Tensor], pixels: tuple[torch.Tensor, torch.Tensor],
        answers: Sequence[torch.Tensor], epochs: int, lr: float, batch_size: int, seed: int, desc: str,
        schedule: str = "constant") -> list[float]:  # fmt: skip
    """Teacher-forced AdamW over every row for ``epochs`` at ``lr`` (``constant``) or decayed to 0
    along a half cosine (``cosine``); the mean loss of each epoch."""
    torch.manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    return train_loop(model, params, len(answers), lambda idx: model(**on_device(model, enc.batch(prompt, pixels, idx, answers))).loss,
                      epochs, lr, batch_size, seed, desc, schedule)  # fmt: skip


def train_loop(model: Any, params: Sequence[torch.Tensor], n: int, loss_of: Callable[[np.ndarray], torch.Tensor], epochs: int, lr: float,
               batch_size: int, seed: int, desc: str, schedule: str = "constant") -> list[float]:  # fmt: skip
    """AdamW on ``params`` over ``n`` rows in shuffled batches (``loss_of(rows)``: the batch's mean
    loss) for ``epochs``, the rate constant or on a half cosine to 0; ``model`` in train mode
    meanwhile and in eval mode after. The mean loss of each epoch."""
    from tqdm.auto import tqdm

    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    steps = -(-n // batch_size)
    total = max(1, steps * epochs)
    decay = (lambda i: 0.5 * (1.0 + np.cos(np.pi * min(i, total) / total))) if schedule == "cosine" else (lambda i: 1.0)  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, decay)
    for ep in range(epochs):
        running = 0.0
        for idx in tqdm(_batches(n, batch_size, rng), total=steps, desc=f"{desc} epoch {ep + 1}/{epochs}",
                        disable=not progress_bar_wanted(None), leave=False):  # fmt: skip
            loss = loss_of(idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            running += float(loss.detach()) * len(idx)
        losses.append(running / n)
    model.eval()
    return losses


@torch.no_grad()
def class_margin(model: Any, enc: Encoder, prompt: tuple[torch.Tensor, torch.Tensor], pixels: tuple[torch.Tensor, torch.Tensor]) -> np.ndarray:
    """``float [N]``: logit(Glorp) - logit(Drent) of the answer's first token (> 0: the model says Glorp)."""
    model.eval()
    glorp, drent = enc.token("Glorp"), enc.token("Drent")
    out = []
    for s in range(0, len(pixels[0]), EVAL_BATCH):
        idx = np.arange(s, min(s + EVAL_BATCH, len(pixels[0])))
        logits = model(**on_device(model, enc.batch(prompt, pixels, idx))).logits[:, -1]
        out.append((logits[:, glorp] - logits[:, drent]).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


@torch.no_grad()
def generate(model: Any, enc: Encoder, prompt: tuple[torch.Tensor, torch.Tensor], pixels: tuple[torch.Tensor, torch.Tensor],
             max_new_tokens: int) -> list[str]:  # fmt: skip
    """Greedy replies, one per image."""
    model.eval()
    replies: list[str] = []
    p = len(prompt[0])
    for s in range(0, len(pixels[0]), EVAL_BATCH):
        idx = np.arange(s, min(s + EVAL_BATCH, len(pixels[0])))
        out = model.generate(**on_device(model, enc.batch(prompt, pixels, idx)), max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=enc.pad, eos_token_id=enc.eot)  # fmt: skip
        replies += enc.tok.batch_decode(out[:, p:], skip_special_tokens=True)
    return replies
