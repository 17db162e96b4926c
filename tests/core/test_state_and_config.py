"""ConceptState batch operations and one-line config validation errors."""

from dataclasses import dataclass

import pytest
import torch

from cbm.core.validation import ConfigError, to_dataclass
from cbm.models.state import ConceptState


def test_state_ops_are_batch_first():
    s = ConceptState(logits=torch.randn(3, 4), probs=torch.rand(3, 4), extras={"emb": torch.randn(3, 4, 2)})
    r = s.repeat_interleave(2)
    assert r.probs.shape == (6, 4) and r.extras["emb"].shape == (6, 4, 2) and r.intervened.shape == (6, 4)
    torch.testing.assert_close(r.probs[0], r.probs[1])
    torch.testing.assert_close(r.index(torch.tensor([2, 4])).probs, s.probs[[1, 2]])
    c = ConceptState.cat([s, s.index(slice(0, 1))])
    assert c.batch_size == 4 and c.extras["emb"].shape == (4, 4, 2)
    assert s.uncertainty is None and r.uncertainty is None


@dataclass
class Toy:
    n: int = 1
    mode: str = "a"

    def __post_init__(self):
        if self.mode not in ("a", "b"):
            raise ValueError(f"mode must be a or b, got '{self.mode}'")


@pytest.mark.parametrize(
    "cfg,msg",
    [({"n": "many"}, "could not be converted to Integer"), ({"zzz": 1}, "Key 'zzz' not in 'Toy'"), ({"mode": "c"}, "mode must be a or b")],
)
def test_bad_values_raise_one_line(cfg, msg):
    with pytest.raises(ConfigError, match=msg) as err:
        to_dataclass(Toy, cfg, "toy")
    assert "\n" not in str(err.value) and str(err.value).startswith("toy: ")


def test_good_values_convert():
    assert to_dataclass(Toy, {"n": "3"}) == Toy(n=3)
