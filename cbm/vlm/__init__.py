"""VLM tools: one chat client for hosted and local models, a disk cache of replies, structured
parsing of XML-tagged answers (and, built on them, EDCT and LLM interveners)."""

from cbm.vlm.cache import ReplyCache, cache_key
from cbm.vlm.retry import RetryPolicy, parse_retry_after
from cbm.vlm.tags import ParseError, TagResult, parse_choice, parse_tag

__all__ = ["ParseError", "ReplyCache", "RetryPolicy", "TagResult", "cache_key", "parse_choice", "parse_retry_after", "parse_tag"]
