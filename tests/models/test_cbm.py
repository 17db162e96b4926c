"""The CBM's own knobs (the shared contract is in test_contract)."""

import pytest
import torch


def test_hard_readout_thresholds_at_inference_and_passes_gradients_in_training():
    """``concept_readout=hard``: the head reads ``1[p > 0.5]`` (an unreadable concept costs its full
    error); intervened concepts are 0/1 either way; training gets the straight-through gradient."""
    from cbm.models import build_model

    info = {"dataset": "toy", "modality": "tabular", "in_shape": [6], "concept_names": ["a", "b", "c"], "class_names": ["n", "y"]}
    torch.manual_seed(0)
    soft = build_model({"name": "cbm", "backbone": {"name": "mlp", "hidden": [8], "out_dim": 8}}, info).eval()
    hard = build_model({"name": "cbm", "concept_readout": "hard", "backbone": {"name": "mlp", "hidden": [8], "out_dim": 8}}, info).eval()
    hard.load_state_dict(soft.state_dict())
    x = torch.randn(16, 6)
    with torch.no_grad():
        state = hard.encode(x)
        assert torch.equal(hard.predict(state), soft.head((state.probs > 0.5).float()))
        mask = torch.ones(16, 3, dtype=torch.bool)
        values = (torch.rand(16, 3) < 0.5).float()
        assert torch.equal(hard.predict(hard.intervene(state, mask, values)), soft.predict(soft.intervene(state, mask, values)))
    with pytest.raises(ValueError, match="concept_readout"):
        build_model({"name": "cbm", "concept_readout": "sharp"}, info)
    hard.train()
    hard.cfg.training = "joint"
    state = hard.encode(x)
    hard.predict(state).sum().backward()
    assert hard.concept_layer.weight.grad.abs().sum() > 0  # straight through to the concept layer


@pytest.mark.parametrize(
    ("monitor", "metric", "mode"),
    [("last", None, "min"), ("task_loss", "val/task_loss", "min"), ("concept_auroc", "val/concept_auroc", "max"), ("task_acc", "val/task_acc", "max"),
     ("concept_f1", "val/concept_f1", "max")],
)
def test_checkpoint_monitor_sets_what_best_ckpt_keeps(tmp_path, monitor, metric, mode):
    """``trainer.checkpoint_monitor``: the metric and direction best.ckpt follows (``last``: none, so
    Lightning keeps the final epoch)."""
    from cbm.config.train import TrainConfig
    from cbm.training.trainer import build_trainer

    cfg = TrainConfig()
    cfg.trainer.checkpoint_monitor = monitor
    trainer = build_trainer(cfg, tmp_path, "t")
    ckpt = next(c for c in trainer.callbacks if type(c).__name__ == "ModelCheckpoint")
    assert (ckpt.monitor, ckpt.mode) == (metric, mode)
