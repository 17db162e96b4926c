"""How a model family turns a conversation and its images into model inputs.

Two formats cover the supported families:

- :class:`ChatFormat` (Qwen-VL, LLaVA, LLaVA-Next, Idefics3 / SmolVLM, Gemma 3): the processor's
  chat template renders the turns with the generation prompt; the processor expands each image
  placeholder into the image's tokens.
- :class:`PrefixFormat` (PaliGemma, which has no chat template): the prompt is the image tokens,
  then the text; the processor inserts ``<bos>`` after the images and a ``\\n`` at the end (the
  "prefix"). What the model says after it is the "suffix": causal, ``token_type_ids`` 1.

Text appended after the prompt (an answer to learn, an option to score, a reply's fixed start) is
tokenized on its own and appended: every per-token input (``token_type_ids``,
``mm_token_type_ids``) is extended with the format's value for answer tokens. So an option's
tokens are exactly its own tokens, the same at training, scoring and generation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

#: Per-token inputs besides ``input_ids`` / ``attention_mask`` that processors return.
TOKEN_TYPE_KEYS = ("token_type_ids", "mm_token_type_ids")


@dataclass(frozen=True)
class PromptFormat:
    """A family's prompt rendering; ``answer_types`` are the per-token inputs' values on appended
    (answer) tokens, 0 (text) unless named."""

    name: ClassVar[str] = ""
    answer_types: dict[str, int] = field(default_factory=dict)

    def text(self, processor: Any, messages: list[dict[str, Any]], n_images: int) -> str:
        raise NotImplementedError

    def encode(self, processor: Any, messages: list[dict[str, Any]], images: list[Any], *appended: str) -> dict[str, torch.Tensor]:
        """The processor's inputs (batch of 1) for ``messages`` (chat-template messages with
        ``{"type": "image"}`` placeholders) and ``images``, then each of ``appended`` tokenized
        on its own and appended. Processor-made ``labels`` are dropped (the caller builds its own)."""
        prompt = self.text(processor, messages, len(images))
        inputs = dict(processor(text=[prompt], images=images or None, return_tensors="pt"))
        inputs.pop("labels", None)
        tok = getattr(processor, "tokenizer", processor)
        ids = [i for text in appended for i in tok(text, add_special_tokens=False)["input_ids"]] if appended else []
        return self.append(inputs, ids)

    def append(self, inputs: dict[str, torch.Tensor], ids: list[int]) -> dict[str, torch.Tensor]:
        """``inputs`` with ``ids`` appended to ``input_ids``, 1 to ``attention_mask``, and each
        per-token input extended with its answer value."""
        if not ids:
            return inputs
        out = dict(inputs)
        n = len(ids)
        out["input_ids"] = torch.cat([inputs["input_ids"], torch.tensor([ids], dtype=inputs["input_ids"].dtype)], dim=1)
        if "attention_mask" in inputs:
            out["attention_mask"] = torch.cat([inputs["attention_mask"], inputs["attention_mask"].new_ones((1, n))], dim=1)
        for k in TOKEN_TYPE_KEYS:
            if k in inputs:
                out[k] = torch.cat([inputs[k], inputs[k].new_full((1, n), self.answer_types.get(k, 0))], dim=1)
        return out


@dataclass(frozen=True)
class ChatFormat(PromptFormat):
    """The processor's chat template with the generation prompt."""

    name: ClassVar[str] = "chat"

    def text(self, processor: Any, messages: list[dict[str, Any]], n_images: int) -> str:
        return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


@dataclass(frozen=True)
class PrefixFormat(PromptFormat):
    """PaliGemma: every image token first, then the turns' texts joined by newlines (the processor
    adds ``<bos>`` after the images and ``\\n`` at the end); appended tokens are the suffix (type 1)."""

    name: ClassVar[str] = "prefix"
    answer_types: dict[str, int] = field(default_factory=lambda: {"token_type_ids": 1})

    def text(self, processor: Any, messages: list[dict[str, Any]], n_images: int) -> str:
        parts = []
        for m in messages:
            content = m.get("content")
            items = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            parts += [p["text"] for p in items if p.get("type") == "text"]
        return processor.image_token * n_images + "\n".join(parts)


#: Processor class name -> its family's format (others: the chat template).
FORMATS: dict[str, PromptFormat] = {"PaliGemmaProcessor": PrefixFormat()}


def prompt_format(processor: Any, where: str = "model") -> PromptFormat:
    """The format of ``processor``'s family; one line when it has neither a format of its own nor a
    chat template."""
    fmt = FORMATS.get(type(processor).__name__)
    if fmt is not None:
        return fmt
    tok = getattr(processor, "tokenizer", processor)
    if not (getattr(processor, "chat_template", None) or getattr(tok, "chat_template", None)):
        raise ValueError(f"{where}: {type(processor).__name__} has no chat template (chat_template.jinja or the tokenizer's chat_template) "
                         "and no prompt format of its own")  # fmt: skip
    return ChatFormat()
