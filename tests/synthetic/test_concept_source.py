"""Label-free concept sources: CLIP scoring through the real loading path (a tiny random CLIP
built from its config), percentile calibration, the cached annotation, free concepts, bad input;
and the whole label-free path (scoring -> training -> interventions with every encoding)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from cbm.vlm.tiny import build_tiny_clip  # noqa: E402
from synthetic.clip_scores import ClipScorer, annotate, load_free_concepts, percentile_thresholds  # noqa: E402
from synthetic.registry import data_config, load_data  # noqa: E402

SMALL = {"name": "robot", "modality": "image", "image_size": 32, "n_train": 250, "val_fraction": 0.2, "n_calib": 0, "n_test": 120}


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> Path:
    return build_tiny_clip(tmp_path_factory.mktemp("clip") / "tiny-clip")


def clip_source(clip_dir: Path, **kw) -> dict:
    return {**SMALL, "concept_source": {"kind": "clip", "checkpoint": str(clip_dir), **kw}}


def test_scores_are_the_cosines_of_clips_own_embeddings(clip_dir):
    """The scorer loads the checkpoint from disk and its scores equal CLIP's projected, normalised
    image and text features (computed here with the model's own processor arithmetic)."""
    from transformers import AutoTokenizer, CLIPModel

    scorer = ClipScorer(clip_dir, batch_size=3)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(7, 32, 32, 3), dtype=np.uint8)
    texts = ["a robot: the head is round", "knees", "an antenna on top"]
    got = scorer.scores(images, texts)
    model, tok = CLIPModel.from_pretrained(clip_dir).eval(), AutoTokenizer.from_pretrained(clip_dir)
    with torch.no_grad():
        pix = (torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255 - torch.tensor(scorer.mean)[:, None, None]) / torch.tensor(scorer.std)[:, None, None]
        img = model.get_image_features(pixel_values=pix).pooler_output
        enc = tok(texts, padding=True, return_tensors="pt")
        txt = model.get_text_features(**enc).pooler_output
    want = torch.nn.functional.normalize(img, dim=-1) @ torch.nn.functional.normalize(txt, dim=-1).T
    assert got.shape == (7, 3)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
    # padding does not move a text's embedding: CLIP pools at the end token, before the padding
    alone = scorer.texts(["knees"])
    torch.testing.assert_close(alone[0], scorer.texts(texts)[1], atol=1e-5, rtol=0)


def test_percentile_calibration_is_exact():
    """A concept is present where its score is above the percentile of its training scores: on
    101 distinct scores the median leaves exactly 50 above it, the 90th percentile exactly 10."""
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(101, 4)).astype(np.float32)
    for q, above in ((50, 50), (90, 10), (0, 100)):
        assert annotate(scores, percentile_thresholds(scores, q)).sum(0).tolist() == [above] * 4


def test_clip_annotation_replaces_c_keeps_the_truth_and_is_cached(clip_dir, tmp_path, monkeypatch):
    plain = load_data(data_config(SMALL), str(tmp_path))
    cfg = data_config(clip_source(clip_dir, percentile=70.0))
    data = load_data(cfg, str(tmp_path))
    assert data.concept_names == plain.concept_names
    np.testing.assert_array_equal(data.extra["c_clean"], plain.c)  # what the oracle answers: the truth
    np.testing.assert_array_equal(data.x, plain.x)
    train = data.indices("train")
    n = len(train)
    # 70th percentile of distinct scores: 30% of the training rows (to one row) annotated present
    assert np.all(np.abs(data.c[train].sum(0) - 0.3 * n) <= 1)
    thr = np.asarray(data.info["concept_source"]["thresholds"], dtype=np.float32)
    np.testing.assert_array_equal(data.c, (data.extra["c_score"] > thr).astype(np.float32))
    assert list(tmp_path.glob("robot-clip-*.npz")), "the CLIP scores are cached beside the dataset"
    # a second load reads the scores: no image is scored again
    monkeypatch.setattr(ClipScorer, "scores", lambda *a, **k: pytest.fail("scored again"))
    again = load_data(cfg, str(tmp_path))
    np.testing.assert_array_equal(again.c, data.c)
    # another percentile re-calibrates the same cached scores
    other = load_data(data_config(clip_source(clip_dir, percentile=30.0)), str(tmp_path))
    assert np.all(np.abs(other.c[train].sum(0) - 0.7 * n) <= 1)


def test_free_concepts_replace_the_concept_set(clip_dir, tmp_path):
    path = tmp_path / "words.jsonl"
    path.write_text('{"text": "bolts"}\n{"name": "shiny_paint", "text": "shiny metallic paint"}\n\n{"text": "a wide stance"}\n')
    data = load_data(data_config(clip_source(clip_dir, concepts_file=str(path))), str(tmp_path))
    assert data.concept_names == ["bolts", "shiny_paint", "a_wide_stance"]
    assert data.c.shape[1] == 3
    np.testing.assert_array_equal(data.extra["c_clean"], data.c)  # no definition: the annotation is all there is
    assert data.info["concept_source"]["texts"]["shiny_paint"] == "shiny metallic paint"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"concept_source": {"kind": "clip"}}, "kind=clip needs a CLIP checkpoint"),
        ({"concept_source": {"kind": "clop"}}, "concept_source.kind: must be one of"),
        ({"concept_source": {"checkpoint": "x"}}, "need kind=clip"),
        ({"modality": "tabular", "concept_source": {"kind": "clip", "checkpoint": "x"}}, "needs modality=image"),
        ({"concept_noise": 0.1, "concept_source": {"kind": "clip", "checkpoint": "x"}}, "concept_noise must be off"),
        ({"concept_source": {"kind": "clip", "checkpoint": "x", "prompts": {"wings": "w"}}}, "unknown concept(s) ['wings']"),
        ({"concept_source": {"kind": "clip", "checkpoint": "x", "percentile": 101}}, "percentile: expected a number in [0.0, 100.0]"),
        ({"concept_source": {"kind": "clip", "checkpoint": "x", "prompt": "{colour}"}}, "placeholders are"),
    ],
)
def test_bad_concept_source_is_one_line(change, message):
    with pytest.raises(ValueError, match=None) as err:
        data_config({**SMALL, **change})
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        (None, ".jsonl", "no such file"),
        ('{"text": "bolts"}\n{"text": "bolts"}\n', ".jsonl", "duplicate concept names ['bolts']"),
        ('{"name": "x"}\n', ".jsonl", "item 0 has no text"),
        ("[]", ".json", "non-empty list"),
        ("concepts: [{text: a, name: 'bad name'}]", ".yaml", "is not an identifier"),
        ("{not json", ".jsonl", "concept_source.concepts_file"),
        ("a\n", ".txt", "expected a .jsonl, .json or .yaml file"),
    ],
)
def test_bad_concepts_file_is_one_line(tmp_path, content, suffix, message):
    path = tmp_path / f"c{suffix}"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError) as err:
        load_free_concepts(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_directory_that_is_not_clip_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="is not a CLIP model directory"):
        load_data(data_config(clip_source(tmp_path)), str(tmp_path))


def test_label_free_path_end_to_end_with_every_encoding(clip_dir, tmp_path, compose_train, shared_cache):
    """CLIP annotates the training concepts, a CBM trains on them, and cbm-intervene runs the
    oracle with each encoding: the levels are the detector's own percentiles / per-annotation
    medians, k=0 is the same model under all three, and the binary grid is the default one."""
    from cbm.experiments import intervene
    from cbm.experiments.train import run

    src = f"data.concept_source={{kind: clip, checkpoint: '{clip_dir}', percentile: 60}}"
    m = run(compose_train("data.n_train=300", "data.n_test=200", "data.n_calib=0", "trainer.max_epochs=2", src))
    assert 0 <= m["test/concept_acc"] <= 1
    grids = {}
    for kind in ("binary", "percentile", "binary_revealed"):
        out = tmp_path / f"iv-{kind}"
        grids[kind] = intervene.run({"checkpoint": str(tmp_path), "output_dir": str(out), "cache_dir": str(shared_cache),
                                     "ks": [0, 2, "max"], "policy": {"random": {}}, "intervener": {"oracle": {}},
                                     "encoding": {"kind": kind}})  # fmt: skip
        meta = json.loads((out / "results.json").read_text())["meta"]
        assert meta["encoding"] == kind
    acc = {k: {r["k"]: r["accuracy"] for r in g.rows} for k, g in grids.items()}
    assert acc["binary"][0] == acc["percentile"][0] == acc["binary_revealed"][0]
    levels = grids["percentile"].meta["encoding_levels"]
    assert grids["binary"].meta["encoding_levels"] is None
    assert all(0 <= lo <= hi <= 1 for lo, hi in levels.values())
