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
import math
from collections.abc import Mapping
from typing import Any

from cbm.vlm.editors.base import EditError, EditInstruction, EditItem, EditResult, edit_prompt
from cbm.vlm.endpoint import check_endpoint, check_secret_transport, effective_base_url
from cbm.vlm.images import MAX_IMAGE_PIXELS, check_pixel_limit, load_image

#: Default seconds to wait for one edit request (image generation is slow).
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MODEL = "gpt-image-1"


def endpoint_key(base_url: str | None, api_key_env: str, allow_insecure: bool, where: str = "editor") -> str | None:
    """The API key for the image-edit endpoint, checked before any connection (the chat client's
    rules, :func:`cbm.vlm.endpoint.check_endpoint`). ``None``: no key (a local server)."""
    return check_endpoint(base_url, api_key_env, (), allow_insecure, where, "the API key of the image-edit endpoint")


class HostedImageEditor:
    """Edit images with ``client.images.edit`` of the ``openai`` SDK.

    Parameters
    ----------
    model : image-editing model name.
    base_url : the server (``None``: ``$OPENAI_BASE_URL`` or the SDK's default).
    api_key_env : the environment variable holding the API key (never a key in a config); the key
        goes only over https, to a loopback host, or with ``allow_insecure``.
    api_key : a key passed directly (Python callers; configs name ``api_key_env``).
    timeout : seconds per request; max_retries : the SDK's retries of transient errors.
    params : further ``images.edit`` arguments (``size``, ``quality``, ``response_format`` ...).
    max_image_pixels : largest returned image accepted (checked before decoding).
    client : a ready ``openai.OpenAI`` client (overrides the endpoint settings).
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        api_key: str | None = None,
        allow_insecure: bool = False,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 2,
        params: dict[str, Any] | None = None,
        max_image_pixels: int = MAX_IMAGE_PIXELS,
        client: Any | None = None,
    ):
        self.model = model
        self.params = dict(params or {})
        self.max_image_pixels = max_image_pixels
        if client is None:
            if api_key is None:
                api_key = endpoint_key(base_url, api_key_env, allow_insecure)
            else:
                url, where = effective_base_url(base_url, "editor")
                check_secret_transport(url, ["the API key"], allow_insecure, where, "editor")
            try:
                import openai
            except ImportError as err:  # pragma: no cover - openai is a dependency of the vlm extra
                raise ImportError("HostedImageEditor needs the 'openai' package: pip install openai") from err
            try:  # a local server without a key: the SDK still wants one, and gets a placeholder
                client = openai.OpenAI(base_url=base_url, api_key=api_key or "no-key", timeout=timeout, max_retries=max_retries)
            except openai.OpenAIError as err:
                raise EditError(f"HostedImageEditor: cannot create the client ({err}); pass api_key=...") from err
        self.client = client

    @staticmethod
    def check_settings(settings: Mapping[str, Any], where: str = "editor") -> None:
        """A config's editor settings (``editor.kind=hosted``), checked without connecting: known
        names of the right types, sane numbers, the endpoint and its key (:func:`endpoint_key`)."""
        from cbm.core.validation import check_kwargs

        if "api_key" in settings:
            raise ValueError(f"{where}.api_key: a key is never written in a config; put it in an environment variable "
                             f"and name that in {where}.api_key_env")  # fmt: skip
        check_kwargs(HostedImageEditor, settings, where, skip=("api_key", "client"))
        timeout, retries = settings.get("timeout", DEFAULT_TIMEOUT_S), settings.get("max_retries", 2)
        if not (math.isfinite(timeout) and timeout > 0) or not 0 <= retries <= 20:
            raise ValueError(f"{where}: timeout must be > 0 and max_retries in [0, 20], got {timeout}, {retries}")
        check_pixel_limit(settings.get("max_image_pixels", MAX_IMAGE_PIXELS), f"{where}.max_image_pixels")
        endpoint_key(settings.get("base_url"), settings.get("api_key_env", "OPENAI_API_KEY"), settings.get("allow_insecure", False), where)

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
            image = load_image(base64.b64decode(b64), self.max_image_pixels, f"hosted image edit ({where})")
        except binascii.Error as err:
            raise EditError(f"hosted image edit ({where}) returned undecodable base64: {err}") from err
        except ValueError as err:  # not an image, truncated, or over the pixel limit (never decoded)
            raise EditError(str(err)) from err
        changed = {"attribute": instruction.concept, "from": None, "to": instruction.target or instruction.change}
        return EditResult(image, None, f"hosted edit by {self.model}: {prompt.splitlines()[0]}", changed)
