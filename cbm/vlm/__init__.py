"""VLM tools: one chat client for hosted and local models, a disk cache of replies, structured
parsing of XML-tagged answers (and, built on them, EDCT and LLM interveners).

Submodules import their heavy dependencies (openai, transformers, OpenCV) only when used."""

from cbm.core.tags import ParseError, TagResult, parse_choice, parse_tag
from cbm.vlm.cache import ReplyCache, cache_key
from cbm.vlm.client import ChatClient, make_client
from cbm.vlm.config import ClientConfig
from cbm.vlm.reply import ChatError, Reply
from cbm.vlm.retry import RetryPolicy, parse_retry_after

__all__ = ["ChatClient", "ChatError", "ClientConfig", "ParseError", "Reply", "ReplyCache", "RetryPolicy", "TagResult",
           "cache_key", "make_client", "parse_choice", "parse_retry_after", "parse_tag"]
