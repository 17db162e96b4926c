"""Rows -> model inputs with the model's own chat template, the loss on the answer tokens only.

Each example is ``prompt ‖ answer ‖ end-of-turn``: the prompt is the chat template's rendering of
one user turn (the image, then the question) with the generation prompt, tokenized by the model's
processor (which expands the image placeholder into the image's tokens: never truncated); the
answer and the end-of-turn token follow. Labels are ``-100`` on the prompt (text and image tokens)
and on padding, so exactly the answer tokens and the end-of-turn token are learned. The pixel
budget (min / max pixels) is the processor's, the same at training and evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image

from cbm.vlm.finetune.data import QARow

IGNORE = -100


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

    def __init__(self, processor: Any, end_of_turn: str | None = None):
        self.processor = processor
        self.tok = getattr(processor, "tokenizer", processor)
        eot = end_of_turn or self.tok.eos_token
        ids = self.tok.convert_tokens_to_ids(eot) if eot is not None else None
        if ids is None or ids == self.tok.unk_token_id:
            raise ValueError(f"end_of_turn {eot!r} is not a token of this tokenizer")
        self.eot_id = int(ids)
        self.pad_id = int(self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eot_id)

    def prompt(self, row: QARow, image: Image.Image | None = None) -> dict[str, torch.Tensor]:
        """The processor's inputs for the user turn of ``row`` (batch of 1), ready for ``generate``."""
        text = self.processor.apply_chat_template(user_turn(row.question), add_generation_prompt=True, tokenize=False)
        img = image if image is not None else Image.open(row.image).convert("RGB")
        return dict(self.processor(text=[text], images=[img], return_tensors="pt"))

    def encode(self, row: QARow) -> Encoded:
        p = self.prompt(row)
        prompt_ids = p.pop("input_ids")[0]
        p.pop("attention_mask", None)
        answer = self.tok(row.answer, add_special_tokens=False)["input_ids"]
        tail = torch.tensor([*answer, self.eot_id], dtype=prompt_ids.dtype)
        ids = torch.cat([prompt_ids, tail])
        labels = torch.cat([torch.full_like(prompt_ids, IGNORE), tail])
        extra = {}
        for k, v in p.items():
            if k == "mm_token_type_ids":  # per token: the answer tokens are text (0)
                extra[k] = torch.cat([v[0], torch.zeros(len(tail), dtype=v.dtype)])
            else:
                extra[k] = v
        return Encoded(ids, labels, extra, len(prompt_ids))

    def __call__(self, rows: Sequence[QARow]) -> dict[str, torch.Tensor]:
        enc = [self.encode(r) for r in rows]
        n = max(len(e.input_ids) for e in enc)
        ids = torch.full((len(enc), n), self.pad_id, dtype=enc[0].input_ids.dtype)
        labels = torch.full((len(enc), n), IGNORE, dtype=torch.long)
        attn = torch.zeros((len(enc), n), dtype=torch.long)
        for i, e in enumerate(enc):  # right padding
            t = len(e.input_ids)
            ids[i, :t], labels[i, :t], attn[i, :t] = e.input_ids, e.labels, 1
        batch: dict[str, torch.Tensor] = {"input_ids": ids, "labels": labels, "attention_mask": attn}
        for k in enc[0].extra:
            vals = [e.extra[k] for e in enc]
            if vals[0].ndim == 1 and len(vals[0]) == len(enc[0].input_ids):  # per-token tensors: pad like the ids
                out = torch.zeros((len(enc), n), dtype=vals[0].dtype)
                for i, v in enumerate(vals):
                    out[i, : len(v)] = v
                batch[k] = out
            else:  # image tensors: every processor here stacks or concatenates along dim 0
                batch[k] = torch.cat(vals, dim=0)
        return batch
