"""Tag parsing error kinds and the reply cache (keys, hits, corrupt entries, atomic files)."""

import json

import pytest

from cbm.vlm import ReplyCache, cache_key, parse_choice, parse_tag


@pytest.mark.parametrize(
    ("reply", "value", "kind"),
    [
        ("I think <answer>Yes</answer>.", "Yes", None),
        ('<answer concept="knees">  no </answer>', "no", None),
        ("<ANSWER>yes</answer> and again <answer>yes</answer>", "yes", None),  # same value twice: fine
        ("the answer is yes", None, "missing"),
        (None, None, "missing"),
        ("<answer>yes, because the knees", None, "unclosed"),
        ("<answer>   </answer>", None, "empty"),
        ("<answer>yes</answer><answer>no</answer>", None, "conflicting"),
    ],
)
def test_parse_tag_error_kinds(reply, value, kind):
    r = parse_tag(reply, "answer")
    assert r.value == value
    assert (r.error.kind if r.error else None) == kind
    assert r.ok == (kind is None)


def test_parse_choice_options_and_aliases():
    assert parse_choice("<answer>YES.</answer>", "answer", ["yes", "no"]).value == "yes"
    assert parse_choice("<answer>true</answer>", "answer", ["yes", "no"], {"true": "yes"}).value == "yes"
    r = parse_choice("<answer>maybe</answer>", "answer", ["yes", "no"])
    assert r.value is None and r.error.kind == "not_in_options" and "maybe" in str(r.error)
    assert parse_choice("no tag", "answer", ["yes", "no"]).error.kind == "missing"


def test_cache_key_is_canonical_and_sensitive():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    a = cache_key("m", msgs, {"temperature": 0, "max_tokens": 5})
    assert a == cache_key("m", json.loads(json.dumps(msgs)), {"max_tokens": 5, "temperature": 0})  # key order irrelevant
    assert len({a, cache_key("m2", msgs, {"temperature": 0, "max_tokens": 5}),
                cache_key("m", msgs, {"temperature": 0.5, "max_tokens": 5}),
                cache_key("m", [{"role": "user", "content": "hi!"}], {"temperature": 0, "max_tokens": 5}),
                cache_key("m", msgs, {"temperature": 0, "max_tokens": 5}, "http://127.0.0.1:9/v1")}) == 5  # fmt: skip
    # the endpoint is part of the key: one server's replies are never served for another
    assert cache_key("m", msgs, {}, "https://a.example/v1") != cache_key("m", msgs, {}, "https://b.example/v1")


def test_reply_cache_hits_misses_and_corrupt_entries(tmp_path):
    cache = ReplyCache(tmp_path / "replies")
    key = cache_key("m", [{"role": "user", "content": "q"}], {})
    assert cache.get(key) is None and cache.misses == 1
    path = cache.put(key, {"text": "<answer>yes</answer>", "usage": {"prompt_tokens": 3}})
    assert path.parent.name == key[:2] and not list(path.parent.glob("*.tmp"))
    assert cache.get(key)["text"] == "<answer>yes</answer>" and cache.hits == 1
    path.write_text('{"text": "trunc')  # a torn write from some other tool: a miss, not a crash
    assert cache.get(key) is None
    other = cache_key("m", [{"role": "user", "content": "other"}], {})
    path.write_text(json.dumps({"key": other, "text": "x"}))  # an entry for another key: a miss
    assert cache.get(key) is None
    cache.put(key, {"text": "again"})
    assert cache.get(key)["text"] == "again"


def test_reply_cache_entries_are_sealed_and_shape_checked(tmp_path, caplog):
    from cbm.vlm.sealed import seal

    cache = ReplyCache(tmp_path / "replies")
    key = cache_key("m", [{"role": "user", "content": "q"}], {"score": ["a", "b"]})
    path = cache.put(key, {"scores": [-0.5, -2.0]})
    assert cache.get_scores(key, 2) == [-0.5, -2.0] and cache.get_scores(key, 3) is None  # 3 options: not this entry
    body = {k: v for k, v in json.loads(path.read_text()).items() if k != "sha256"}
    for scores in ([-0.5, float("inf")], [True, False], ["-0.5", "-2"], {"a": 1}, None):
        path.write_text(json.dumps(seal({**body, "scores": scores})))  # resealed by hand: the shape still counts
        assert cache.get_scores(key, 2) is None
    path.write_text(json.dumps({**body, "scores": [-9.0, -9.0]}))  # unsealed (an edit, or an older version): a miss
    with caplog.at_level("WARNING", logger="cbm.vlm"):
        assert cache.get_scores(key, 2) is None and cache.get(key) is None and cache.get_reply(key) is None
    assert sum("reply cache: ignoring entry" in r.getMessage() for r in caplog.records) == 1  # once per entry
    path.write_text(json.dumps(seal({**body, "reply": {"text": "yes", "model": "m", "prompt_tokens": 3}})))
    assert cache.get_reply(key).text == "yes" and cache.get_reply(key).cached

