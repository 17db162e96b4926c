"""Oracle, simulated expert and LLM interveners."""

from __future__ import annotations

import math

import pytest
import torch

from cbm.interventions import (
    ExpertIntervener,
    LLMAnswerError,
    LLMIntervener,
    OracleIntervener,
    parse_answers,
    uniform_hash,
)
from cbm.models.state import ConceptState


def _state(b: int, m: int) -> ConceptState:
    return ConceptState(logits=torch.zeros(b, m), probs=torch.full((b, m), 0.5))


def _batch(b: int, m: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"c": (torch.rand(b, m, generator=g) < 0.5).float(), "idx": torch.arange(b), "y": torch.zeros(b, dtype=torch.long)}


def test_oracle_uses_noise_free_concepts():
    batch = _batch(6, 3)
    batch["c_clean"] = 1.0 - batch["c"]
    mask = torch.ones(6, 3, dtype=torch.bool)
    assert torch.equal(OracleIntervener()(batch, _state(6, 3), mask), batch["c_clean"])
    with pytest.raises(ValueError, match="another concept set"):
        OracleIntervener()(batch, _state(6, 4), torch.ones(6, 4, dtype=torch.bool))


def test_expert_accuracy_within_binomial_tolerance():
    n, m = 20_000, 5
    batch = _batch(n, m)
    acc = [0.8, 0.5, 0.95, 1.0, 0.0]
    for accuracy in (0.8, acc):
        expert = ExpertIntervener(accuracy, seed=3)
        values = expert(batch, _state(n, m), torch.ones(n, m, dtype=torch.bool))
        assert set(values.unique().tolist()) <= {0.0, 1.0}
        hit = (values == batch["c"]).float().mean(0)
        want = torch.as_tensor(accuracy, dtype=torch.float32).expand(m)
        for j in range(m):
            sd = math.sqrt(max(want[j] * (1 - want[j]), 1e-12) / n)
            assert abs(float(hit[j]) - float(want[j])) <= 4 * sd + 1e-9, (accuracy, j, float(hit[j]))


def test_expert_is_consistent_across_batching_and_seeded():
    n, m = 300, 4
    batch = _batch(n, m)
    mask = torch.ones(n, m, dtype=torch.bool)
    whole = ExpertIntervener(0.7, seed=1)(batch, _state(n, m), mask)
    expert = ExpertIntervener(0.7, seed=1)
    parts = [expert({k: v[i : i + 64] for k, v in batch.items()}, _state(len(batch["y"][i : i + 64]), m), mask[i : i + 64]) for i in range(0, n, 64)]
    assert torch.equal(torch.cat(parts), whole)
    assert torch.equal(ExpertIntervener(0.7, seed=1)(batch, _state(n, m), mask), whole)
    assert not torch.equal(ExpertIntervener(0.7, seed=2)(batch, _state(n, m), mask), whole)
    # without example ids the answers come from a seeded stream
    no_idx = {k: v for k, v in batch.items() if k != "idx"}
    a = ExpertIntervener(0.7, seed=1)(no_idx, _state(n, m), mask)
    assert torch.equal(a, ExpertIntervener(0.7, seed=1)(no_idx, _state(n, m), mask))


def test_expert_config_errors():
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        ExpertIntervener(1.5)
    with pytest.raises(ValueError, match="unknown concept 'wings'"):
        ExpertIntervener.from_names(["knees", "mouth"], 0.8, {"wings": 0.9})
    e = ExpertIntervener.from_names(["knees", "mouth"], 0.8, {"mouth": 0.9})
    assert e.accuracy.tolist() == pytest.approx([0.8, 0.9])
    with pytest.raises(ValueError, match="per-concept accuracies"):
        e(_batch(2, 3), _state(2, 3), torch.ones(2, 3, dtype=torch.bool))


def test_uniform_hash_is_uniform_and_deterministic():
    u = uniform_hash(0, torch.arange(100_000))
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.01
    assert torch.equal(u, uniform_hash(0, torch.arange(100_000)))
    assert abs(float((uniform_hash(0, torch.arange(100_000)) < 0.3).float().mean()) - 0.3) < 0.01


# ----------------------------------------------------------------------------- LLM
class FakeClient:
    """Answers from a table, in the documented tag format; records its prompts."""

    def __init__(self, truth: dict[int, dict[str, bool]], replies: list[str] | None = None):
        self.truth = truth
        self.replies = list(replies or [])
        self.prompts: list[str] = []
        self.images: list = []

    def ask(self, prompt: str, image=None) -> str:
        self.prompts.append(prompt)
        self.images.append(image)
        if self.replies:
            return self.replies.pop(0)
        ex = int(prompt.split("example #")[1].split()[0])
        names = [ln[2:].split(":")[0] for ln in prompt.splitlines() if ln.startswith("- ")]
        return "\n".join(f'<answer concept="{n}">{"yes" if self.truth[ex][n] else "no"}</answer>' for n in names)


NAMES = ["knees", "mouth_closed", "foot_pointy"]


def _describe(batch, i):
    return f"This is example #{int(batch['idx'][i])} ."


def test_llm_intervener_asks_parses_and_caches():
    truth = {0: {"knees": True, "mouth_closed": False, "foot_pointy": True}, 1: {"knees": False, "mouth_closed": True, "foot_pointy": False}}
    client = FakeClient(truth)
    llm = LLMIntervener(client, NAMES, questions={"knees": "Does it have knees?"}, describe=_describe, subject="robot")
    batch = {"idx": torch.tensor([0, 1]), "x": torch.zeros(2, 4)}
    state = _state(2, 3)
    mask = torch.tensor([[True, True, False], [False, True, True]])
    values = llm(batch, state, mask)
    assert values[0, :2].tolist() == [1.0, 0.0] and values[1, 1:].tolist() == [1.0, 0.0]
    assert values[0, 2] == 0.5 and values[1, 0] == 0.5  # not requested: untouched
    assert "Does it have knees?" in client.prompts[0] and '<answer concept="knees">' in client.prompts[0]
    assert client.images == [None, None]
    assert llm.n_queries == 2
    llm(batch, state, mask)  # cached answers: no new query
    assert llm.n_queries == 2


def test_llm_intervener_unparseable_reply_fails_clearly_or_falls_back():
    truth = {0: {"knees": True, "mouth_closed": True, "foot_pointy": True}}
    batch = {"idx": torch.tensor([0]), "x": torch.zeros(1, 3, 8, 8)}
    mask = torch.tensor([[True, True, False]])
    client = FakeClient(truth, replies=["I think the robot has knees.", "Still no tags."])
    llm = LLMIntervener(client, NAMES, describe=_describe, retries=1)
    with pytest.raises(LLMAnswerError) as err:
        llm(batch, _state(1, 3), mask)
    msg = str(err.value)
    assert "\n" not in msg and "knees" in msg and "example 0" in msg
    assert client.images[0].shape == (3, 8, 8)  # image data is sent as the image
    # a retry that answers: no error
    client = FakeClient(truth, replies=['<answer concept="knees">yes</answer>'])
    llm = LLMIntervener(client, NAMES, describe=_describe, retries=1)
    assert llm(batch, _state(1, 3), mask)[0, :2].tolist() == [1.0, 1.0]
    assert llm.n_queries == 2
    # fallback to the model's probability: counted, never silent
    client = FakeClient(truth, replies=["maybe", "maybe"])
    llm = LLMIntervener(client, NAMES, describe=_describe, on_unparseable="model", retries=1)
    st = ConceptState(logits=torch.zeros(1, 3), probs=torch.tensor([[0.3, 0.6, 0.9]]))
    assert llm(batch, st, mask)[0].tolist() == pytest.approx([0.3, 0.6, 0.9])
    assert llm.n_fallbacks == 2


def test_parse_answers_and_bad_config():
    reply = '<answer concept="knees">Yes.</answer> <ANSWER concept=\'mouth_closed\'> no </ANSWER> <answer concept="foot_pointy">perhaps</answer>'
    assert parse_answers(reply, NAMES) == {"knees": 1.0, "mouth_closed": 0.0}
    assert parse_answers('<answer concept="knees">yes</answer><answer concept="knees">no</answer>', NAMES) == {}
    # what real models write, read by the shared reply parser: reasoning dropped, markup and
    # sentences read, a negated or two-sided value no answer
    real = ('<think>maybe <answer concept="knees">no</answer></think>\n```xml\n<answer concept="knees">**Yes**</answer>\n'
            '<answer concept="mouth_closed">The answer is no.</answer>\n```\n<answer concept="foot_pointy">yes or no</answer>'
            '&lt;answer concept="head_round"&gt;absent&lt;/answer&gt;')
    assert parse_answers(real, [*NAMES, "head_round"]) == {"knees": 1.0, "mouth_closed": 0.0, "head_round": 0.0}
    with pytest.raises(ValueError, match="on_unparseable"):
        LLMIntervener(FakeClient({}), NAMES, on_unparseable="ignore")
    with pytest.raises(ValueError, match="unknown concept"):
        LLMIntervener(FakeClient({}), NAMES, questions={"wings": "?"})
    with pytest.raises(ValueError, match="ask"):
        LLMIntervener(object(), NAMES)
