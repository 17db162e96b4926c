"""The contract between a chat client and what asks it: the ``llm`` intervener (the CBM wing) names a
client by ``module:callable`` and never imports the VLM wing, and a client (the VLM wing's
``ChatClient``, or a user's) never imports the intervener.

A config may name only a function or class marked with :func:`client_factory` (checked statically
before anything is called: ``os:system`` is refused, never run). A factory may carry two optional
attributes: ``check_settings(settings)``, which validates the settings before the run starts (one
``ValueError`` line), and ``from_settings(**settings)``, which builds the client (else the factory is
called with the settings). The client must have ``ask(prompt, image=None) -> str``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from cbm.core.targets import mark, resolve

F = TypeVar("F")

#: The kind :func:`client_factory` marks (:func:`cbm.core.targets.mark`).
FACTORY_KIND = "client_factory"
#: Mark a function or class as a client factory a config may name (``intervener.llm.client=module:name``).
client_factory: Callable[[F], F] = mark(FACTORY_KIND)
#: What a client setting must name (in refusals).
CLIENT_NEED = ("a client factory (cbm.vlm.client:make_client, a ChatClient subclass, or a function marked "
               "@cbm.core.clients.client_factory)")  # fmt: skip


def resolve_client(spec: str, where: str) -> Any:
    """The marked factory ``spec`` names: imported and checked, never called."""
    return resolve(spec, where, mark=FACTORY_KIND, need=CLIENT_NEED)


def check_client(spec: str, settings: Mapping[str, Any], where: str, settings_where: str) -> Any:
    """The checked factory, its settings validated by its own ``check_settings`` when it has one (a bad
    URL, a key bound for plain http: one line at start, prefixed ``settings_where``)."""
    factory = resolve_client(spec, where)
    check = getattr(factory, "check_settings", None)
    if callable(check):
        try:
            check(dict(settings))
        except ValueError as err:
            raise ValueError(f"{settings_where}: {err}") from None
    return factory


def build_client(spec: str, settings: Mapping[str, Any], where: str, settings_where: str) -> Any:
    """The client ``spec`` builds from ``settings`` (checked first by :func:`check_client`); it must
    have ``ask``."""
    factory = check_client(spec, settings, where, settings_where)
    build = getattr(factory, "from_settings", None) or factory
    try:
        client = build(**dict(settings))
    except TypeError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{where}: '{spec}'(**{settings_where}) failed: {first}") from None
    if not callable(getattr(client, "ask", None)):
        raise ValueError(f"{where}: '{spec}' returned a {type(client).__name__}, not a client with ask(prompt, image=None)")
    return client
