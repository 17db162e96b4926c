"""Every supported VLM family, each a tiny random model built from its configs (no download):
chat and option scoring through the local backend, a LoRA step at batch size 2 on two images of
different shapes with the evaluation and its localisation; exact checks of the labels, of the
per-token types' padding, of PaliGemma's suffix encoding against its processor's own, of the image
layouts and of the saliency pipeline on hand-made attention."""

from __future__ import annotations

import base64
import io
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from cbm.vlm.finetune.collate import IGNORE, PAD_TOKEN_TYPE, Collator, pad_cat
from cbm.vlm.finetune.data import QARow
from cbm.vlm.finetune.evaluate import LayoutError, image_layout, layer_range, saliency_map
from cbm.vlm.prompt_format import TOKEN_TYPE_KEYS
from cbm.vlm.tiny import FAMILIES, TinyVLMConfig, build_tiny_vlm

#: The grid each tiny family's evaluated image lies on (the default sizes of ``TinyVLMConfig``).
GRIDS = {"qwen2_vl": (2, 2), "qwen2_5_vl": (2, 2), "qwen3_vl": (2, 2), "llava": (4, 4), "llava_next": (2, 2), "idefics3": (4, 4),
         "smolvlm": (4, 4), "gemma3": (4, 4), "paligemma": (4, 4)}  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``tiny(family) -> dir``: each family built once per module."""
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            built[family] = build_tiny_vlm(tmp_path_factory.mktemp(family), TinyVLMConfig(family=family))
        return built[family]

    return get


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[QARow]:
    """A square and a wide image (different tile counts for the tiling families), a mask on the
    square one's top-left quarter."""
    d = tmp_path_factory.mktemp("rows")
    rng = np.random.default_rng(0)
    for name, (w, h) in (("square", (64, 64)), ("wide", (96, 48))):
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(d / f"{name}.png")
    mask = np.zeros((64, 64), np.uint8)
    mask[:32, :32] = 255
    Image.fromarray(mask).save(d / "mask.png")
    return [QARow(str(d / "square.png"), "Is it red?", "yes", "original", "p0", str(d / "mask.png"), line=1),
            QARow(str(d / "wide.png"), "What colour is the wide one?", "blue", "counterfactual", "p0", str(d / "mask.png"), line=2)]  # fmt: skip


def _messages(path: str) -> list[dict]:
    buf = io.BytesIO()
    Image.open(path).save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    return [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Glorp or Drent?"}]}]  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_chats_scores_and_takes_a_lora_step_with_localisation(family, tiny, rows):
    from cbm.vlm.config import ClientConfig
    from cbm.vlm.finetune.evaluate import Evaluator
    from cbm.vlm.finetune.model import LoraSettings, add_lora, load_model, load_processor
    from cbm.vlm.local_backend import LocalHFBackend

    path = tiny(family)
    backend = LocalHFBackend(ClientConfig(backend="local", model=str(path), cache_dir=None))
    msgs = _messages(rows[0].image)
    reply = backend.complete(msgs, {"max_tokens": 3, "prefix": "<answer>"})
    assert reply.text.startswith("<answer>") and 1 <= reply.completion_tokens <= 3
    scores = backend.score(msgs, "<answer>", ["Glorp", "Drent"])
    assert len(scores) == 2 and all(math.isfinite(s) and s < 0 for s in scores) and scores[0] != scores[1]

    col = Collator(load_processor(path))
    batch = col(rows)
    tok = col.tok
    for i, row in enumerate(rows):  # labels: the answer and end-of-turn exactly; -100 on prompt and padding
        n = int(batch["attention_mask"][i].sum())
        answer = [*tok(row.answer, add_special_tokens=False)["input_ids"], col.eot_id]
        assert batch["labels"][i, : n - len(answer)].eq(IGNORE).all() and batch["labels"][i, n:].eq(IGNORE).all()
        assert batch["labels"][i, n - len(answer) : n].tolist() == answer == batch["input_ids"][i, n - len(answer) : n].tolist()
        assert batch["input_ids"][i, n:].eq(col.pad_id).all()
        for k in TOKEN_TYPE_KEYS:
            if k in batch:
                assert batch[k][i, n:].eq(PAD_TOKEN_TYPE).all()
    model = add_lora(load_model(path, attn_implementation="eager"), LoraSettings(r=4), gradient_checkpointing=False)
    model.train()
    loss = model(**batch).loss
    loss.backward()
    assert math.isfinite(float(loss))
    grads = [p.grad for n, p in model.named_parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3).step()
    (res,) = Evaluator(model, col, max_new_tokens=2).run(rows[:1])
    assert math.isfinite(res.loss) and res.attention is not None and res.attention.shape == GRIDS[family]
    assert np.isfinite(res.attention).all() and (res.attention >= 0).all()


def test_gemma3_token_types_mark_the_image_and_pad_with_zero(tiny, rows):
    from cbm.vlm.finetune.model import load_processor

    col = Collator(load_processor(tiny("gemma3")))
    batch = col(rows)
    image_id = col.tok.convert_tokens_to_ids("<image_soft_token>")
    assert torch.equal(batch["token_type_ids"].bool(), batch["input_ids"] == image_id)  # 1 on image tokens, 0 on text, answer and padding
    lengths = batch["attention_mask"].sum(1)
    assert lengths[0] != lengths[1]  # the shorter row is padded


def test_paligemma_encodes_exactly_as_its_processor_builds_a_suffix(tiny, rows):
    from cbm.vlm.finetune.model import load_processor

    proc = load_processor(tiny("paligemma"))
    col = Collator(proc)
    for row in rows:
        enc = col.encode(row)
        ref = proc(text=[proc.image_token + row.question], images=[Image.open(row.image).convert("RGB")], suffix=[row.answer], return_tensors="pt")
        assert enc.input_ids.tolist() == ref["input_ids"][0].tolist()
        assert enc.extra["token_type_ids"].tolist() == ref["token_type_ids"][0].tolist()
        assert enc.labels.tolist() == ref["labels"][0].tolist()
    batch = col(rows)
    n0 = int(batch["attention_mask"][0].sum())
    assert batch["token_type_ids"][0, :n0].tolist() == col.encode(rows[0]).extra["token_type_ids"].tolist()
    assert batch["token_type_ids"][0, n0:].eq(PAD_TOKEN_TYPE).all() and n0 < batch["input_ids"].shape[1]


def test_tiles_of_different_counts_are_zero_padded_before_concatenation():
    a, b = torch.ones(1, 3, 2, 4, 4), torch.ones(1, 5, 2, 4, 4)
    out = pad_cat([a, b])
    assert out.shape == (2, 5, 2, 4, 4) and out[0, 3:].eq(0).all() and out[0, :3].eq(1).all() and out[1].eq(1).all()
    assert pad_cat([torch.ones(4, 6), torch.ones(8, 6)]).shape == (12, 6)  # Qwen patch rows: concatenated only


def test_saliency_pipeline_on_hand_made_attention():
    # one layer, two heads over 4 cells: head 0 looks at cell 0, head 1 is uniform (no variance: no weight)
    att = np.array([[[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]]])
    # layer mean 0.25 -> head 0: [.45, -.15, -.15, -.15] (var .0675), head 1: 0 (var 0) -> map [.45^2, 0, 0, 0]
    np.testing.assert_allclose(saliency_map(att), [0.45**2, 0, 0, 0])
    # two equal-variance heads on cells 0 and 3: the map is their mean, squared; below the 25th percentile -> 0
    att = np.array([[[0.4, 0.2, 0.2, 0.2], [0.1, 0.3, 0.3, 0.3]]])
    d0 = np.array([0.15, -0.05, -0.05, -0.05])
    d1 = np.array([-0.15, 0.05, 0.05, 0.05])
    want = np.clip((d0 + d1) / 2, 0, None) ** 2
    np.testing.assert_allclose(saliency_map(att), want, atol=1e-15)
    m = saliency_map(np.array([[[0.1, 0.2, 0.3, 0.4]]]), percentile=50)
    # layer mean 0.25 -> [-.15, -.05, .05, .15] -> positive part squared [0, 0, .0025, .0225]; 50th pct .00125 keeps the last two
    np.testing.assert_allclose(m, [0, 0, 0.05**2, 0.15**2])
    assert list(layer_range([7, 12], 2)) == [1] and list(layer_range([7, 12], 24)) == [6, 7, 8, 9, 10, 11] and list(layer_range([1, 3], 12)) == [0, 1, 2]


class _Cfg:
    def __init__(self, model_type: str, **kw):
        self.model_type = model_type
        self.__dict__.update(kw)


def _vision(image_size: int, patch_size: int) -> _Cfg:
    return _Cfg("vision", image_size=image_size, patch_size=patch_size)


def test_image_layouts_pick_the_content_tokens_of_each_family():
    img, txt = 9, 1
    # Idefics3: 2 tiles + the global image, 4 tokens each, separated by other tokens: the global image's (the last 4)
    ids = torch.tensor([[txt, 2, img, img, img, img, 2, img, img, img, img, 3, img, img, img, img, txt]])
    lay = image_layout({"input_ids": ids}, _Cfg("idefics3", vision_config=_vision(4, 1), scale_factor=2), img)
    assert lay.grid == (2, 2) and lay.positions.tolist() == [12, 13, 14, 15]
    # LLaVA with the CLS register kept (strategy full): the first image token is left out
    ids = torch.tensor([[txt, *[img] * 5, txt]])
    lay = image_layout({"input_ids": ids}, _Cfg("llava", vision_config=_vision(28, 14)), img)
    assert lay.grid == (2, 2) and lay.positions.tolist() == [2, 3, 4, 5]
    # LLaVA-Next: the base image's 2 x 2 first, then tiles and newlines
    ids = torch.tensor([[txt, *[img] * 10]])
    assert image_layout({"input_ids": ids}, _Cfg("llava_next", vision_config=_vision(28, 14)), img).positions.tolist() == [1, 2, 3, 4]
    # Qwen: grid_thw 1 x 4 x 6 patches, merge 2 -> 2 x 3
    ids = torch.tensor([[txt, *[img] * 6, txt]])
    qwen = _Cfg("qwen2_vl", vision_config=_Cfg("v", spatial_merge_size=2))
    assert image_layout({"input_ids": ids, "image_grid_thw": torch.tensor([[1, 4, 6]])}, qwen, img).grid == (2, 3)
    with pytest.raises(LayoutError, match="not a square grid"):  # Gemma 3 / PaliGemma / unknown: a square only
        image_layout({"input_ids": torch.tensor([[img] * 6])}, _Cfg("gemma3"), img)
    with pytest.raises(LayoutError, match="no image token"):
        image_layout({"input_ids": torch.tensor([[txt, txt]])}, _Cfg("paligemma"), img)
    with pytest.raises(LayoutError, match="not whole images"):
        image_layout({"input_ids": torch.tensor([[img] * 6])}, _Cfg("smolvlm", vision_config=_vision(4, 1), scale_factor=2), img)


def test_tiny_cli_refuses_an_unknown_family_in_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "cbm.vlm.tiny", str(tmp_path / "m"), "--family", "gpt5"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "'gpt5' is not one of qwen2_vl" in res.stderr
    assert not (tmp_path / "m").exists()


def test_a_processor_without_chat_template_or_format_and_bad_layer_ranges_are_one_line():
    from cbm.vlm.finetune.config import EvalSettings
    from cbm.vlm.prompt_format import prompt_format

    with pytest.raises(ValueError, match="has no chat template"):
        prompt_format(SimpleNamespace())  # no template, no format of its own
    assert EvalSettings().attention_layers == [7, 12]
    for bad, msg in (([12, 7], "first 12 after last 7"), ([7], "is not \\[first, last\\]"), ([0, 3], "must be in")):
        with pytest.raises(ValueError, match=f"eval.attention_layers: .*{msg}"):
            EvalSettings(attention_layers=bad)
