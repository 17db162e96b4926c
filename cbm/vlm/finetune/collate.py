"""Rows -> model inputs in the model family's own prompt format, the loss on the answer tokens only.

Each example is ``prompt ‖ answer ‖ end-of-turn``: the prompt is the family's rendering of one
user turn (the image, then the question: the chat template with the generation prompt, or
PaliGemma's image-token prefix; :mod:`cbm.vlm.prompt_format`), tokenized by the model's
processor (which expands the image placeholder into the image's tokens: never truncated); the
answer and the end-of-turn token follow (PaliGemma: its suffix, ``token_type_ids`` 1, exactly as
its processor builds it from ``suffix=``). Per-token inputs (``token_type_ids``,
``mm_token_type_ids``) are padded like the ids; image tensors of different shapes per row (tiles)
are zero-padded before they are concatenated. Labels are ``-100`` on the prompt (text and image tokens)
and on padding, so exactly the answer tokens and the end-of-turn token are learned. The pixel
budget (min / max pixels) is the processor's, the same at training and evaluation.

Each row is encoded once (``cache_bytes``: its tensors kept up to that many bytes in all): opening the
image, the processor's resizing and patching and the tokenisation were ~86 ms per batch of 4 tiny-model
rows on the CPU, and a training loop that collated every step paid them again each epoch, in the
thread that feeds the GPU. ``pad_to_multiple_of`` rounds the padded length up (labels ``-100`` and
attention 0 there: the loss is unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image

from cbm.vlm.finetune.data import QARow
from cbm.vlm.prompt_format import TOKEN_TYPE_KEYS, prompt_format

IGNORE = -100
#: Per-token type ids on padding: 0 (text), what the tokenizers themselves pad with.
PAD_TOKEN_TYPE = 0


def user_turn(question: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]


@dataclass
class Encoded:
    """One example: ``input_ids`` [T], ``labels`` [T], image tensors (batch dim 1), prompt length."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    extra: dict[str, torch.Tensor]
    prompt_len: int


class Collator:
    """``__call__(rows) -> batch`` for training and loss evaluation; ``prompt(row)`` for generation."""

    def __init__(self, processor: Any, end_of_turn: str | None = None, cache_bytes: int = 0, pad_to_multiple_of: int = 1):
        if pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1, got {pad_to_multiple_of}")
        self.processor = processor
        self.cache_bytes, self.pad_to_multiple_of = cache_bytes, pad_to_multiple_of
        self._cache: dict[tuple[str, str, str], Encoded] = {}
        self._cached_bytes = 0
        self.format = prompt_format(processor)
        self.tok = getattr(processor, "tokenizer", processor)
        eot = end_of_turn or self.tok.eos_token
        ids = self.tok.convert_tokens_to_ids(eot) if eot is not None else None
        if ids is None or ids == self.tok.unk_token_id:
            raise ValueError(f"end_of_turn {eot!r} is not a token of this tokenizer")
        self.eot_id = int(ids)
        self.pad_id = int(self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eot_id)

    def prompt(self, row: QARow, image: Image.Image | None = None) -> dict[str, torch.Tensor]:
        """The processor's inputs for the user turn of ``row`` (batch of 1), ready for ``generate``."""
        img = image if image is not None else Image.open(row.image).convert("RGB")
        return self.format.encode(self.processor, user_turn(row.question), [img])

    def encode(self, row: QARow) -> Encoded:
        """``row`` as model inputs; from the cache when it was encoded before (the cached tensors are
        never written to: batches are built in new tensors)."""
        key = (row.image, row.question, row.answer)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        enc = self._encode(row)
        size = sum(t.numel() * t.element_size() for t in (enc.input_ids, enc.labels, *enc.extra.values()))
        if self._cached_bytes + size <= self.cache_bytes:
            self._cache[key] = enc
            self._cached_bytes += size
        return enc

    def _encode(self, row: QARow) -> Encoded:
        p = self.prompt(row)
        n_prompt = int(p["input_ids"].shape[1])
        answer = self.tok(row.answer, add_special_tokens=False)["input_ids"]
        full = self.format.append(p, [*answer, self.eot_id])
        ids = full.pop("input_ids")[0]
        full.pop("attention_mask", None)
        labels = ids.clone()
        labels[:n_prompt] = IGNORE
        extra = {k: (v[0] if k in TOKEN_TYPE_KEYS else v) for k, v in full.items()}
        return Encoded(ids, labels, extra, n_prompt)

    def __call__(self, rows: Sequence[QARow]) -> dict[str, torch.Tensor]:
        enc = [self.encode(r) for r in rows]
        n = max(len(e.input_ids) for e in enc)
        n = -(-n // self.pad_to_multiple_of) * self.pad_to_multiple_of
        ids = torch.full((len(enc), n), self.pad_id, dtype=enc[0].input_ids.dtype)
        labels = torch.full((len(enc), n), IGNORE, dtype=torch.long)
        attn = torch.zeros((len(enc), n), dtype=torch.long)
        for i, e in enumerate(enc):  # right padding
            t = len(e.input_ids)
            ids[i, :t], labels[i, :t], attn[i, :t] = e.input_ids, e.labels, 1
        batch: dict[str, torch.Tensor] = {"input_ids": ids, "labels": labels, "attention_mask": attn}
        for k in enc[0].extra:
            vals = [e.extra[k] for e in enc]
            if k in TOKEN_TYPE_KEYS:  # per token: padded like the ids, with 0 (text; the tokenizers' pad type id)
                batch[k] = pad_stack(vals, PAD_TOKEN_TYPE, n)
            else:  # image tensors: concatenated along dim 0, zero-padded to the largest shape first
                batch[k] = pad_cat(vals)
        return batch


def pad_stack(vals: Sequence[torch.Tensor], value: int, length: int = 0) -> torch.Tensor:
    """1-d tensors right-padded with ``value`` to the longest (at least ``length``), stacked ``[B, T]``."""
    out = vals[0].new_full((len(vals), max(length, *(len(v) for v in vals))), value)
    for i, v in enumerate(vals):
        out[i, : len(v)] = v
    return out


def pad_cat(vals: Sequence[torch.Tensor]) -> torch.Tensor:
    """Tensors concatenated along dim 0, each first zero-padded at the end of every other dim to the
    largest size there: tiles per image (LLaVA-Next ``pixel_values`` ``[1, tiles, 3, h, w]``),
    images per row (Idefics3 / SmolVLM ``pixel_values`` and ``pixel_attention_mask``), as the
    processors pad a batch themselves (zero tiles are dropped by the models, a zero mask is no
    pixel). Qwen's patch rows ``[patches, dim]`` share their width and are only concatenated."""
    shape = [max(v.shape[d] for v in vals) for d in range(1, vals[0].ndim)]
    padded = []
    for v in vals:
        pad: list[int] = []
        for d in reversed(range(1, v.ndim)):
            pad += [0, shape[d - 1] - v.shape[d]]
        padded.append(torch.nn.functional.pad(v, pad) if any(pad) else v)
    return torch.cat(padded, dim=0)
