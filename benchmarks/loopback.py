"""A scripted OpenAI-compatible chat endpoint's replies, for the VLM pipeline benchmarks."""

from __future__ import annotations

import json

from werkzeug import Response


def chat_reply(text: str, prompt_tokens: int, completion_tokens: int) -> Response:
    """A ``chat.completion`` response whose one choice says ``text``."""
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}  # fmt: skip
    return Response(json.dumps(body), content_type="application/json")
