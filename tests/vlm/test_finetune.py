"""Counterfactual fine-tuning on the CPU with a tiny random VLM: answer-only labels under two chat
templates, LoRA steps lowering the loss and touching only the adapter, save -> reload identical,
exact localisation on hand-built cases, bad rows with line numbers, 4-bit refused clearly on the
CPU, the synthetic builders' ground truth, and the whole run writing its table and heatmaps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from cbm.vlm.finetune.collate import IGNORE, Collator
from cbm.vlm.finetune.data import BadDataError, QARow, load_rows, write_rows
from cbm.vlm.finetune.evaluate import localisation_share, mcnemar, normalise, pool_mask

ROBOT = {"name": "robot", "image_size": 64, "n_train": 10, "n_calib": 0, "n_test": 6}
#: A second chat template (USER: / ASSISTANT: turns) for the same tokenizer.
PLAIN_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | upper }}: {% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ part['text'] }}{% endif %}"
    "{% endfor %}\n{% endfor %}{% if add_generation_prompt %}ASSISTANT: {% endif %}"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from cbm.vlm.tiny import TinyVLMConfig, build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny"), TinyVLMConfig(image_px=112))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> list[QARow]:
    from cbm.vlm.finetune.builders import robot_pairs
    from synthetic.registry import data_config

    d = tmp_path_factory.mktemp("pairs")
    return robot_pairs(data_config(ROBOT), d, 4, parts=("knees", "feet"), cache_dir=str(d / "cache"))


def processor(tiny: Path, template: str | None = None):
    from transformers import AutoProcessor

    p = AutoProcessor.from_pretrained(tiny, local_files_only=True)
    if template is not None:
        p.chat_template = template
        p.tokenizer.chat_template = template
    return p


@pytest.mark.parametrize("template", [None, PLAIN_TEMPLATE], ids=["qwen", "plain"])
def test_labels_cover_exactly_the_answer_tokens(tiny, pairs, template):
    proc = processor(tiny, template)
    col = Collator(proc)
    rows = pairs[:3]
    batch = col(rows)
    tok = proc.tokenizer
    image_id = tok.convert_tokens_to_ids("<|image_pad|>")
    for i, row in enumerate(rows):
        ids, labels, attn = batch["input_ids"][i], batch["labels"][i], batch["attention_mask"][i]
        answer = tok(row.answer, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")]
        learned = (labels != IGNORE).nonzero(as_tuple=True)[0]
        n = int(attn.sum())
        assert learned.tolist() == list(range(n - len(answer), n))  # the last tokens of the sequence, contiguous
        assert labels[learned].tolist() == answer == ids[learned].tolist()  # token by token
        assert not bool((labels[:n - len(answer)] != IGNORE).any()) and not bool((labels[n:] != IGNORE).any())  # prompt and padding
        prompt = proc.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": row.question}]}],
                                          add_generation_prompt=True, tokenize=False)  # fmt: skip
        assert tok.decode(ids[: n - len(answer)]).replace("<|image_pad|>", "") == prompt.replace("<|image_pad|>", "")
        assert int((ids == image_id).sum()) == 16  # 112 px -> 8 x 8 patches -> 4 x 4 merged image tokens, none cut
    if "mm_token_type_ids" in batch:
        assert torch.equal(batch["mm_token_type_ids"].bool(), batch["input_ids"] == image_id)


def test_lora_steps_lower_the_loss_touch_only_the_adapter_and_reload_identically(tiny, pairs, tmp_path):
    from peft import PeftModel

    from cbm.vlm.finetune.model import LoraSettings, add_lora, load_model

    col = Collator(processor(tiny))
    base = load_model(tiny)
    frozen = {k: v.clone() for k, v in base.state_dict().items()}
    model = add_lora(base, LoraSettings(r=8), gradient_checkpointing=True)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert not any("visual" in n for n in trainable)  # the vision tower stays frozen
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-3)
    dev = next(model.parameters()).device  # the CPU here; the GPU under make qlora-check
    batch = {k: v.to(dev) for k, v in col(pairs[:4]).items()}
    model.train()
    losses = []
    for _ in range(6):
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] - 0.1, losses
    for name, value in model.base_model.model.state_dict().items():  # every non-adapter weight as it was
        if "lora_" not in name:
            key = name.replace(".base_layer", "")
            assert torch.equal(value, frozen[key]), name
    model.eval()
    with torch.no_grad():
        want = model(**batch).logits
    model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(load_model(tiny), tmp_path / "adapter").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(**batch).logits, want)


def test_localisation_is_exact_on_hand_built_cases():
    mask = np.zeros((8, 8), bool)
    mask[:4, :4] = True  # the top-left quarter
    cells = pool_mask(mask, (2, 2))
    assert cells.tolist() == [True, False, False, False]
    assert localisation_share(np.array([0.7, 0.0, 0.0, 0.0]), cells) == 1.0  # all attention inside
    assert localisation_share(np.array([0.0, 0.2, 0.3, 0.5]), cells) == 0.0
    assert localisation_share(np.array([1.0, 1.0, 1.0, 1.0]), cells) == 0.25
    one_pixel = np.zeros((8, 8), bool)
    one_pixel[7, 7] = True
    assert pool_mask(one_pixel, (2, 2)).tolist() == [False, False, False, True]  # any changed pixel counts by default
    assert pool_mask(one_pixel, (2, 2), threshold=0.1).tolist() == [False] * 4  # 1/16 of the cell < 10%
    assert np.isnan(localisation_share(np.zeros(4), cells))


def test_mcnemar_and_answer_normalisation():
    assert mcnemar([True] * 5, [True] * 5) == {"worse": 0, "better": 0, "p_value": 1.0}
    r = mcnemar([False] * 10, [True] * 10)
    assert (r["worse"], r["better"]) == (0, 10) and r["p_value"] == pytest.approx(2 * 0.5**10)
    assert normalise(" Pointy.\nbecause") == "pointy" and normalise("") == ""


def test_bad_rows_are_reported_with_line_numbers(pairs, tmp_path):
    good = pairs[0].to_json()
    Image.new("RGB", (4, 4)).save(tmp_path / "ok.png")
    (tmp_path / "broken.png").write_bytes(b"not a png")
    lines = [
        json.dumps({**good, "image": str(tmp_path / "ok.png")}),
        "{not json",
        json.dumps({**good, "answer": "  "}),
        json.dumps({**good, "split": "train"}),
        "",
        json.dumps({k: v for k, v in good.items() if k != "pair_id"}),
        json.dumps({**good, "image": "missing.png"}),
        json.dumps({**good, "image": "broken.png"}),
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rows, bad = load_rows(path)
    assert len(rows) == 1 and rows[0].line == 1
    assert [b.line for b in bad] == [2, 3, 4, 6, 7, 8]
    assert "not JSON" in bad[0].reason and bad[1].reason == "empty answer" and "unknown split 'train'" in bad[2].reason
    assert "missing field(s) ['pair_id']" in bad[3].reason and "unreadable image" in bad[4].reason and "unreadable image" in bad[5].reason
    with pytest.raises(BadDataError, match=r"6 bad row\(s\): line 2: not JSON"):
        load_rows(path, on_bad="error")
    write_rows(tmp_path / "again.jsonl", rows)
    assert load_rows(tmp_path / "again.jsonl")[0][0].image == rows[0].image  # relative paths round-trip


def test_four_bit_on_the_cpu_is_one_clear_error(tiny):
    from cbm.vlm.finetune.model import load_model

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: 4-bit is the GPU path")
    with pytest.raises(ValueError, match=r"^quant=4bit \(QLoRA\) needs a CUDA GPU"):
        load_model(tiny, quant="4bit")


def test_builders_pair_each_original_with_its_exact_counterfactual(pairs, tmp_path):
    from cbm.vlm.finetune.builders import ROBOT_QUESTIONS, sudoku_pairs
    from synthetic.registry import data_config

    assert len(pairs) == 2 * 4 * 2 and [r.split for r in pairs[:2]] == ["original", "counterfactual"]
    for orig, cf in zip(pairs[::2], pairs[1::2]):
        q = ROBOT_QUESTIONS[orig.meta["part"]]
        assert orig.pair_id == cf.pair_id and orig.question == cf.question and orig.mask == cf.mask
        assert {orig.answer, cf.answer} == set(q.answers)  # the edit flips the answer
        a, b = (np.asarray(Image.open(p).convert("RGB")) for p in (orig.image, cf.image))
        assert np.array_equal((a != b).any(-1), np.asarray(Image.open(orig.mask)) > 0)  # the mask is the changed pixels
    from cbm.vlm.finetune.builders import robot_pairs
    from synthetic.sudoku.checker import check_board

    counts = robot_pairs(data_config(ROBOT), tmp_path / "counts", 3, parts=("antennae_count",), cache_dir=str(tmp_path / "cache"))
    assert {(o.answer, c.answer) for o, c in zip(counts[::2], counts[1::2])} <= {("0", "2"), ("2", "0")} and counts
    scfg = data_config({"name": "sudoku", "n_train": 20, "n_val": 4, "n_calib": 0, "n_test": 2, "cell_size": 18})
    rows = sudoku_pairs(scfg, tmp_path, 2, cells_per_board=2, cache_dir=str(tmp_path / "cache"), questions=("digit", "row_valid"))
    assert len(rows) == 16
    digit = {o.pair_id: (o, c) for o, c in zip(rows[::2], rows[1::2]) if o.meta["question"] == "digit"}
    assert all(o.answer != c.answer and o.answer.isdigit() for o, c in digit.values())
    from cbm.vlm.editors import sudoku_items

    boards = {it.meta["position"]: np.asarray(it.meta["board"]) for it in sudoku_items(scfg, "test", np.arange(2), cache_dir=str(tmp_path / "cache"))}
    for o, c in zip(rows[::2], rows[1::2]):
        if o.meta["question"] != "row_valid":
            continue
        r, col, pos = o.meta["row"], o.meta["col"], o.meta["position"]
        before = boards[pos]
        after = before.copy()
        after[r - 1, col - 1] = int(digit[o.pair_id.removesuffix("-row_valid")][1].answer)
        assert (o.answer, c.answer) == tuple("yes" if check_board(b)[r - 1] else "no" for b in (before, after))


def test_synthetic_end_to_end_run_writes_table_and_heatmaps(tiny, tmp_path):
    from cbm.vlm.finetune.config import FinetuneConfig
    from cbm.vlm.finetune.run import run

    cfg = FinetuneConfig(output_dir=str(tmp_path / "run"), model={"path": str(tiny)},
                         data={"n": 6, "parts": ["knees", "feet"], "cache_dir": str(tmp_path / "cache"), "source": {"image_size": 64}, "eval_fraction": 0.25},
                         lora={"r": 8}, train={"epochs": 2, "batch_size": 4, "lr": 5e-3}, eval={"heatmaps": 1}, merge=True, progress=False)  # fmt: skip
    out = run(cfg)
    res = out["result"]
    assert res["loss_last"] < res["loss_first"] and res["steps"] == 2 * 5  # ceil(18 rows / 4) per epoch
    assert res["train_rows"] == 18 and res["eval_rows"] == 6  # 12 pairs: 9 to train, 3 held out (both splits of each)
    for when in ("before", "after"):
        for split in ("original", "counterfactual"):
            s = res[when][split]
            assert s["rows"] == 3 and 0 <= s["accuracy"] <= 1 and 0 <= s["localisation"] <= 1 and s["loss"] > 0
    assert set(res["mcnemar"]) == {"original", "counterfactual"} and set(res["original_vs_counterfactual"]) == {"before", "after"}
    d = tmp_path / "run"
    assert "| counterfactual | 3 |" in (d / "results.md").read_text()
    assert len(list((d / "heatmaps").glob("*.png"))) == 4  # one pair: original and counterfactual, before and after
    assert (d / "adapter" / "adapter_config.json").is_file() and (d / "csv" / "metrics.csv").is_file()
    assert (d / "data" / "pairs.jsonl").is_file() and len((d / "per_row.csv").read_text().splitlines()) == 7
    # merge=true: the merged model computes what base + adapter computes
    from peft import PeftModel

    from cbm.vlm.finetune.model import load_model

    batch = Collator(processor(tiny))(load_rows(d / "data" / "pairs.jsonl")[0][:2])
    with torch.no_grad():
        adapted = PeftModel.from_pretrained(load_model(tiny), d / "adapter").eval()(**batch).logits
        merged = load_model(d / "merged").eval()(**batch).logits
    torch.testing.assert_close(merged, adapted, atol=1e-4, rtol=1e-4)
