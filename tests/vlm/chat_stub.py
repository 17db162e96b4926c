"""Replies of a loopback OpenAI-compatible chat endpoint, for the scripted end-to-end tests."""

from __future__ import annotations

import json

from werkzeug import Response


def completion(text: str, prompt_tokens: int = 50, completion_tokens: int = 10) -> Response:
    """A ``chat.completion`` response whose one choice says ``text``."""
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}  # fmt: skip
    return Response(json.dumps(body), content_type="application/json")


#: What EDCT's turn-2 prompt (``prompts.explain``: the explanation, asked after the answer) says.
EXPLAIN_MARK = "Explain your answer"


def texts(msg: dict) -> str:
    """The text of one chat message (a string, or its text parts joined)."""
    content = msg["content"]
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content if p.get("type") == "text")


def explain_turn(msgs: list[dict]) -> bool:
    """Whether a request is turn 2 of EDCT's two-turn baseline (or the re-ask of it): the
    explanation asked in the conversation after the answer."""
    users = [texts(m) for m in msgs if m["role"] == "user"]
    return any(EXPLAIN_MARK in t for t in users[-2:])


def first_image(msgs: list[dict]) -> dict | None:
    """The first image part of a conversation (turn 1's, when turn 2 asks for the explanation)."""
    return next((p for m in msgs if isinstance(m["content"], list) for p in m["content"] if p.get("type") == "image_url"), None)


def image_edit_response(img) -> Response:
    """An OpenAI ``/v1/images/edits`` reply carrying ``img`` (an ``HxWx3`` uint8 array) as base64 PNG."""
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return Response(json.dumps({"created": 0, "data": [{"b64_json": base64.b64encode(buf.getvalue()).decode()}]}), content_type="application/json")
