"""Counterfactual edits by a hosted image-editing model (OpenAI-compatible ``/images/edits``).

For real photographs there is no renderer to re-run, so EDCT asks an image-editing model to
apply the edit chain as a text prompt. The edit region is unknown (``mask=None``): the EDCT
locality check estimates it by comparing the images. Any OpenAI-compatible server works
(``base_url``); the ``openai`` SDK is imported lazily (``pip install openai``).
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

from PIL import Image

from cbm.vlm.editors.base import EditError, EditInstruction, EditItem, EditResult, edit_prompt

#: Default seconds to wait for one edit request (image generation is slow).
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MODEL = "gpt-image-1"


class HostedImageEditor:
    """Edit images with ``client.images.edit`` of the ``openai`` SDK.

    Parameters
    ----------
    model : image-editing model name.
    base_url, api_key : the server (``None``: the SDK's defaults / ``OPENAI_API_KEY``).
    timeout : seconds per request; max_retries : the SDK's retries of transient errors.
    params : further ``images.edit`` arguments (``size``, ``quality``, ``response_format`` ...).
    client : a ready ``openai.OpenAI`` client (overrides ``base_url``/``api_key``/``timeout``).
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 2,
        params: dict[str, Any] | None = None,
        client: Any | None = None,
    ):
        self.model = model
        self.params = dict(params or {})
        if client is None:
            try:
                import openai
            except ImportError as err:  # pragma: no cover - openai is a dependency of the vlm extra
                raise ImportError("HostedImageEditor needs the 'openai' package: pip install openai") from err
            try:
                client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
            except openai.OpenAIError as err:
                raise EditError(f"HostedImageEditor: cannot create the client ({err}); pass api_key=...") from err
        self.client = client

    def edit(self, item: EditItem, instruction: EditInstruction) -> EditResult:
        """Send the image and the prompt of ``instruction``; decode the returned ``b64_json`` image."""
        import openai

        buf = io.BytesIO()
        item.image.convert("RGB").save(buf, format="PNG")
        prompt = edit_prompt(instruction)
        where = f"{self.model} at {getattr(self.client, 'base_url', '?')}"
        try:
            response = self.client.images.edit(
                model=self.model, image=("image.png", buf.getvalue(), "image/png"), prompt=prompt, **self.params
            )
        except openai.APIStatusError as err:
            raise EditError(f"hosted image edit failed ({where}): HTTP {err.status_code}: {err.message}") from err
        except openai.APIError as err:
            raise EditError(f"hosted image edit failed ({where}): {err}") from err
        data = getattr(response, "data", None) or []
        b64 = getattr(data[0], "b64_json", None) if data else None
        if not b64:
            raise EditError(
                f"hosted image edit ({where}) returned no b64_json image "
                "(for models that default to URLs pass params={'response_format': 'b64_json'})"
            )
        try:
            image = Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")
        except (binascii.Error, OSError) as err:
            raise EditError(f"hosted image edit ({where}) returned an undecodable image: {err}") from err
        changed = {"attribute": instruction.concept, "from": None, "to": instruction.target or instruction.change}
        return EditResult(image, None, f"hosted edit by {self.model}: {prompt.splitlines()[0]}", changed)
