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


def _bomb_header(path: Path, side: int) -> Path:
    """A PNG whose header claims ``side`` x ``side`` pixels (no pixel data: nothing may decode it)."""
    import struct
    import zlib

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)) + chunk(b"IEND", b""))
    return path


def test_bad_rows_are_reported_with_line_numbers(pairs, tmp_path):
    good = pairs[0].to_json()
    Image.new("RGB", (64, 64)).save(tmp_path / "ok.png")
    Image.new("L", (8, 8)).save(tmp_path / "small_mask.png")
    (tmp_path / "broken.png").write_bytes(b"not a png")
    _bomb_header(tmp_path / "bomb.png", 100_000)
    ok = {**good, "image": str(tmp_path / "ok.png")}
    lines = [
        json.dumps(ok),
        "{not json",
        json.dumps({**good, "answer": "  "}),
        json.dumps({**good, "split": "train"}),
        "",
        json.dumps({k: v for k, v in good.items() if k != "pair_id"}),
        json.dumps({**good, "image": "missing.png"}),
        json.dumps({**good, "image": "broken.png"}),
        json.dumps({**ok, "meta": [1, 2]}),
        json.dumps({**ok, "pair_id": True}),
        json.dumps({**ok, "masks": "x.png"}),
        json.dumps({**ok, "mask": "small_mask.png"}),
        json.dumps({**ok, "image": "bomb.png"}),
        json.dumps([1, 2]),
        json.dumps(ok),  # the same pair and split again
        "[" * 100_000,
        b"\xff\xfe".decode("latin-1"),
    ]
    path = tmp_path / "rows.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8").replace("\u00ff\u00fe".encode(), b"\xff\xfe") + b"\n")
    rows, bad = load_rows(path)
    assert len(rows) == 1 and rows[0].line == 1
    assert [b.line for b in bad] == [2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
    why = {b.line: b.reason for b in bad}
    assert "not JSON" in why[2] and why[3] == "empty answer" and "unknown split 'train'" in why[4]
    assert "missing field(s) ['pair_id']" in why[6] and "image not found" in why[7] and "unreadable image" in why[8]
    assert why[9] == "'meta' must be an object, got list" and "'pair_id' must be" in why[10] and "unknown field(s) ['masks']" in why[11]
    assert "is 8x8, the image 64x64" in why[12] and "100000x100000 image has 10,000,000,000 pixels, more than max_image_pixels" in why[13]
    assert "expected a JSON object, got list" in why[14] and "a second original of pair_id" in why[15] and "(the first is on line 1)" in why[15]
    assert "nested too deeply" in why[16] and "not UTF-8" in why[17]
    with pytest.raises(BadDataError, match=r"15 bad row\(s\): line 2: not JSON"):
        load_rows(path, on_bad="error")
    write_rows(tmp_path / "again.jsonl", rows)
    assert load_rows(tmp_path / "again.jsonl")[0][0].image == rows[0].image  # relative paths round-trip
    with pytest.raises(BadDataError, match=r"more than max_image_pixels=100 \(refused undecoded\)"):
        load_rows(tmp_path / "again.jsonl", max_pixels=100)


def test_image_checks_never_change_pils_own_limit(tmp_path):
    """Row images are checked against the configured limit from their headers and then decoded,
    with PIL's process-wide bomb check untouched, also when threads check bombs over PIL's own
    limit at once (their sizes are read under a lock that always restores it)."""
    from concurrent.futures import ThreadPoolExecutor

    from cbm.vlm.finetune.data import image_size

    before = Image.MAX_IMAGE_PIXELS
    bomb = _bomb_header(tmp_path / "bomb.png", 100_000)  # over PIL's own limit: its size still reported
    Image.new("RGB", (16, 8)).save(tmp_path / "ok.png")
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "noise.png")
    (tmp_path / "truncated.png").write_bytes((tmp_path / "noise.png").read_bytes()[:2000])
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: image_size(bomb if i % 2 else tmp_path / "ok.png", "image", 10**6), range(64)))
    assert got[0] == (16, 8) and all("100000x100000 image has 10,000,000,000 pixels" in g for g in got[1::2])
    assert "unreadable image" in image_size(tmp_path / "truncated.png", "image")  # the header is fine, decoding is not
    assert image_size(tmp_path / "ok.png", "image", 100).startswith(f"image {tmp_path / 'ok.png'}: 16x8 image has 128 pixels")
    assert Image.MAX_IMAGE_PIXELS == before


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
    assert res["loss_last"] < res["loss_first"] and res["steps"] == 2 * 4  # ceil(16 rows / 4) per epoch
    # 12 pairs from 6 robots (two parts each): 2 robots held out with both their pairs, so no robot is in both splits
    assert res["train_rows"] == 16 and res["eval_rows"] == 8
    for when in ("before", "after"):
        for split in ("original", "counterfactual"):
            s = res[when][split]
            assert s["rows"] == 4 and 0 <= s["accuracy"] <= 1 and 0 <= s["localisation"] <= 1 and s["loss"] > 0
    assert set(res["mcnemar"]) == {"original", "counterfactual"} and set(res["original_vs_counterfactual"]) == {"before", "after"}
    d = tmp_path / "run"
    assert "| counterfactual | 4 |" in (d / "results.md").read_text()
    assert len(list((d / "heatmaps").glob("*.png"))) == 4  # one pair: original and counterfactual, before and after
    assert (d / "adapter" / "adapter_config.json").is_file() and (d / "csv" / "metrics.csv").is_file()
    assert (d / "data" / "pairs.jsonl").is_file() and len((d / "per_row.csv").read_text().splitlines()) == 9
    # merge=true: the merged model computes what base + adapter computes
    from peft import PeftModel

    from cbm.vlm.finetune.model import load_model

    batch = Collator(processor(tiny))(load_rows(d / "data" / "pairs.jsonl")[0][:2])
    with torch.no_grad():
        adapted = PeftModel.from_pretrained(load_model(tiny), d / "adapter").eval()(**batch).logits
        merged = load_model(d / "merged").eval()(**batch).logits
    torch.testing.assert_close(merged, adapted, atol=1e-4, rtol=1e-4)


#: Run in a subprocess: ``save_outputs`` into each ``out`` under a file-size limit (SIGXFSZ ignored, so
#: a write fails with EFBIG instead of killing the process) must raise one clean WriteError.
SAVE_UNDER_LIMIT = """
import resource, signal, sys
from pathlib import Path
from transformers import AutoProcessor
from cbm.vlm.finetune.model import LoraSettings, add_lora, load_model
from cbm.vlm.finetune.run import save_outputs
from cbm.core.atomic import WriteError

tiny, saves = sys.argv[1], sys.argv[2:]
model = add_lora(load_model(tiny), LoraSettings(r=64), gradient_checkpointing=False)  # a ~512 KiB adapter
processor = AutoProcessor.from_pretrained(tiny, local_files_only=True)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
for save in saves:
    limit, merge, out = save.split(":", 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), resource.RLIM_INFINITY))
    try:
        save_outputs(model, processor, Path(out), merge=merge == "merge")
    except WriteError as err:
        print(err)
    else:
        print("saved")
"""


def _limited() -> None:
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # inherited across exec: the write fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_failed_adapter_save_keeps_the_previous_adapter_or_none_never_a_partial_one(tiny, tmp_path):
    import subprocess
    import sys

    previous = tmp_path / "with_previous" / "adapter"
    previous.mkdir(parents=True)
    (previous / "adapter_config.json").write_text('{"previous": true}\n')
    (previous / "adapter_model.safetensors").write_bytes(b"previous weights")
    before = _snapshot(previous)
    fresh = tmp_path / "fresh"
    merged = tmp_path / "merged"
    kib = 1024
    saves = [f"{64 * kib}:adapter:{previous.parent}", f"{64 * kib}:adapter:{fresh}", f"{600 * kib}:merge:{merged}"]
    res = subprocess.run([sys.executable, "-c", SAVE_UNDER_LIMIT, str(tiny), *saves], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()[-3:]
    assert len(lines) == 3 and all("could not be saved: " in ln and "file too large" in ln for ln in lines), res.stdout
    assert lines[0].startswith(f"results written to {previous.parent}; the adapter could not be saved: ")
    assert _snapshot(previous) == before  # the previous adapter, byte for byte
    assert not (fresh / "adapter").exists()  # none rather than a partial one
    # a 512 KiB adapter fits under 600 KiB, the 660 KiB merged model does not: the adapter is kept and said so
    assert lines[2].startswith(f"results written to {merged}; the adapter saved to {merged / 'adapter'}; the merged model could not be saved: ")
    assert (merged / "adapter" / "adapter_model.safetensors").is_file() and not (merged / "merged").exists()
    for d in (previous.parent, fresh, merged):
        assert [p.name for p in d.iterdir() if p.name not in ("adapter", "merged")] == []  # no temp directory left behind


@pytest.mark.slow
def test_a_run_whose_adapter_cannot_be_saved_keeps_its_results_and_says_so_in_one_line(tiny, pairs, tmp_path):
    import subprocess
    import sys

    jsonl = write_rows(tmp_path / "rows.jsonl", pairs[:8])  # 4 pairs of 2 robots: one robot (its 2 pairs) held out
    run_dir = tmp_path / "run"
    exe = Path(sys.executable).parent / "cbm-finetune"
    args = [f"model.path={tiny}", f"data.jsonl={jsonl}", "lora.r=64", "train.epochs=1", "eval.before=false", "eval.localise=false",
            "eval.max_new_tokens=1", "logger=csv_only", f"hydra.run.dir={run_dir}"]  # fmt: skip
    res = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600, preexec_fn=_limited, cwd=tmp_path,
                         env={**__import__("os").environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2 and err and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert err[-1].startswith(f"cbm-finetune: error: results written to {run_dir}; the adapter could not be saved: ")
    assert "file too large" in err[-1]
    assert json.loads((run_dir / "results.json").read_text())["eval_rows"] == 4
    assert (run_dir / "results.md").is_file() and (run_dir / "per_row.csv").is_file()
    assert not (run_dir / "adapter").exists() and not list(run_dir.glob(".adapter*"))


def _examples() -> list[str]:
    """Every ``cbm-finetune`` example: the README's and the docs' lines and ``cbm-finetune --help``'s."""
    import shlex
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    lines = [ln.split("#")[0].strip() for page in pages for ln in page.read_text().splitlines() if ln.strip().startswith("cbm-finetune ")]
    helps = subprocess.run([str(Path(sys.executable).parent / "cbm-finetune"), "--help"], capture_output=True, text=True, timeout=120).stdout
    lines += [ln.strip() for ln in helps.splitlines() if ln.strip().startswith("cbm-finetune ")]
    assert len(lines) >= 6, lines
    return [shlex.split(ln)[1:] for ln in lines]


def test_every_documented_example_composes_and_validates(pairs, tmp_path, monkeypatch):
    """The README's and ``--help``'s command lines, with their placeholders made real (a model
    directory, a JSONL file, an EDCT run), compose and validate; QLoRA lines on a machine without a
    GPU stop only at the GPU check."""
    from cbm.core.cli import precheck
    from cbm.vlm.apps.finetune import validate
    from cbm.vlm.edct.records import write_item

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2_vl"}')
    (model / "model.safetensors").write_bytes(b"")
    edct = tmp_path / "edct_run"
    write_item(edct, "a", "Glorp", Image.new("RGB", (8, 8)), [(Image.new("RGB", (8, 8), "red"), "Drent", "knees")], question="Which?")
    (edct / "results.json").write_text("{}")
    write_rows(tmp_path / "pairs.jsonl", pairs)
    monkeypatch.chdir(tmp_path)
    for args in _examples():
        args = [a.replace("<run>", "") for a in args]
        args = [f"model.path={model}" if a.startswith("model.path=") else a for a in args]
        args = [a.replace("outputs/edct/", str(edct)) for a in args]
        try:
            precheck("finetune", args, validate)
        except ValueError as err:
            assert "quant" in args[0] or "qlora" in " ".join(args), (args, err)
            assert "needs a CUDA GPU" in str(err) and not torch.cuda.is_available(), (args, err)


def test_split_keeps_every_original_in_one_split(tmp_path):
    """Several pairs from one original (EDCT steps of one photograph, robot parts) are held out
    together: no original image is in both training and evaluation, on any seed."""
    from cbm.vlm.finetune.data import split_pairs

    rows = []
    for item in range(10):
        orig = str(tmp_path / f"item{item}.png")
        for step in range(1 + item % 3):  # 1-3 pairs per original
            pid = f"item{item}-step{step}"
            rows += [QARow(orig, "q", "a", "original", pid), QARow(str(tmp_path / f"{pid}.png"), "q", "b", "counterfactual", pid)]
    for seed in range(20):
        train, held = split_pairs(rows, 0.3, seed)
        assert {r.image for r in train if r.split == "original"}.isdisjoint({r.image for r in held if r.split == "original"})
        assert len({r.image for r in held if r.split == "original"}) == 3 and len(train) + len(held) == len(rows)
    with pytest.raises(ValueError, match="1 original image"):
        split_pairs(rows[:2], 0.5, 0)
