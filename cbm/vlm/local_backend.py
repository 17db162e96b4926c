"""Local Hugging Face vision-language models through the same interface as hosted ones: the
model directory's processor and its family's prompt format (the chat template, or PaliGemma's
prefix: :mod:`cbm.vlm.prompt_format`), ``generate`` (greedy at temperature 0), the new tokens
decoded. Loads from disk only (``local_files_only``): no downloads."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from cbm.vlm.config import ClientConfig
from cbm.vlm.messages import decode_image_part
from cbm.vlm.prompt_format import prompt_format
from cbm.vlm.reply import ChatError, Reply


def to_hf_messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
    """OpenAI-format messages -> (chat-template messages with ``{"type": "image"}`` placeholders,
    the decoded PIL images in order)."""
    out, images = [], []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": [{"type": "text", "text": content}]})
            continue
        parts = []
        for part in content or []:
            if part.get("type") == "image_url":
                images.append(decode_image_part(part).convert("RGB"))
                parts.append({"type": "image"})
            elif part.get("type") == "text":
                parts.append({"type": "text", "text": part["text"]})
            else:
                raise ChatError("malformed", f"local backend: unsupported content part type {part.get('type')!r}")
        out.append({"role": m["role"], "content": parts})
    return out, images


class LocalHFBackend:
    """``complete(messages, params) -> Reply`` with a local ``AutoModelForImageTextToText``.

    Generation is serialised by a lock (one model, one forward at a time); ``params`` reads
    ``temperature`` (0: greedy), ``max_tokens`` and ``seed``."""

    def __init__(self, cfg: ClientConfig):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        path = Path(cfg.model).expanduser()
        self.model = str(path)
        self._torch = torch
        try:
            self.processor = AutoProcessor.from_pretrained(path, local_files_only=True)
            dtype = "auto" if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
            self.net = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True, dtype=dtype)
            self.format = prompt_format(self.processor, "its processor")
        except (OSError, ValueError, KeyError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(f"client.model: cannot load a vision-language model from '{path}': {first}") from None
        device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        self.net.to(device).eval()
        self.device = device
        self._lock = threading.Lock()

    def _inputs(self, messages: list[dict[str, Any]], *appended: str) -> Any:
        """The prompt's inputs with each of ``appended`` (the reply's fixed start, an option)
        tokenized on its own after it."""
        hf_messages, images = to_hf_messages(messages)
        inputs = self.format.encode(self.processor, hf_messages, images, *appended)
        return {k: v.to(self.device) for k, v in inputs.items()}

    def complete(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> Reply:
        """Generate the assistant turn; ``params["prefix"]`` (local only) starts it with fixed text,
        which the reply includes."""
        torch = self._torch
        prefix = str(params.get("prefix", ""))
        inputs = self._inputs(messages, prefix)
        temperature = float(params.get("temperature", 0.0))
        gen: dict[str, Any] = {"max_new_tokens": int(params.get("max_tokens", 256)), "do_sample": temperature > 0}
        if temperature > 0:
            gen["temperature"] = temperature
        t0 = time.perf_counter()
        with self._lock, torch.inference_mode():
            if "seed" in params:
                torch.manual_seed(int(params["seed"]))
            out = self.net.generate(**inputs, **gen)
        n_in = int(inputs["input_ids"].shape[1])
        new = out[0, n_in:]
        text = prefix + self.processor.batch_decode(new[None], skip_special_tokens=True)[0]
        finish = "length" if len(new) >= gen["max_new_tokens"] else "stop"
        return Reply(text=text, model=self.model, prompt_tokens=n_in, completion_tokens=int(len(new)),
                     finish_reason=finish, latency_s=time.perf_counter() - t0)  # fmt: skip

    def score(self, messages: list[dict[str, Any]], prefix: str, options: list[str]) -> list[float]:
        """Sum of log-probabilities of each option's tokens after the assistant turn's ``prefix``:
        a constrained choice for models too weak (or too small) to follow a reply format."""
        torch = self._torch
        tok = getattr(self.processor, "tokenizer", self.processor)
        out = []
        with self._lock, torch.inference_mode():
            for option in options:
                n = len(tok(option, add_special_tokens=False)["input_ids"])
                inputs = self._inputs(messages, prefix, option)
                logp = torch.log_softmax(self.net(**inputs).logits[0, -n - 1 : -1].float(), dim=-1)  # position t predicts token t + 1
                picked = logp.gather(1, inputs["input_ids"][0, -n:, None])[:, 0]
                out.append(float(picked.sum()))
        return out
