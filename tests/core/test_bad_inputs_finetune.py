"""The bad-input corpus of ``cbm-finetune``: settings, JSONL rows, images and model directories,
each through the real entry point (the contract is in ``badinput.py``: exit 2, one
``cbm-finetune: error: ...`` line, no traceback, nothing left behind).

The fixture files live in this module's own directory (``@FT`` in a case): a fake model directory
that passes the shape checks (so a case fails on the setting it is about), JSONL files with one
bad row each, broken and hostile images (a 400-megapixel PNG bomb), and, for the slow cases only,
real tiny model directories made broken or hostile (a ``pytorch_model.bin`` whose pickle would
create ``files/PWNED``). Cases refused before torch is imported run in the default suite; those
that import torch or load a model are marked slow.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest
import torch
from badinput import SLOW, Payload, assert_refused, params
from PIL import Image

from cbm.vlm.finetune.checks import wandb_key_known

PROG = "cbm-finetune"
FT = "@FT"
#: A directory that passes the model-shape checks (config.json with a model_type, a weights file).
M = f"model.path={FT}/files/fake_model"
#: The real tiny model (slow cases: it loads).
T = f"model.path={FT}/models/tiny"
GOOD = f"data.jsonl={FT}/files/good.jsonl"

SETTINGS = [
    ([], "model.path: required"),
    ([f"model.path={FT}/files/missing"], "model.path: no model directory at"),
    ([f"model.path={FT}/files/a_file"], "is a file, not a model directory"),
    ([f"model.path={FT}/files/empty_dir"], "has no config.json: not a Hugging Face model directory"),
    ([f"model.path={FT}/files/adapter"], "is a LoRA adapter, not a model"),
    ([f"model.path={FT}/files/bad_config"], "config.json is not a readable JSON file"),
    ([f"model.path={FT}/files/list_config"], "has no 'model_type': not a model config"),
    ([f"model.path={FT}/files/no_weights"], "has no weights (model.safetensors or pytorch_model.bin)"),
    ([M, "model.dtype=float12"], "model.dtype: 'float12' is not one of auto, float32"),
    ([M, "model.device=tpu"], "model.device: 'tpu' is not one of auto, cpu, cuda, cuda:N"),
    ([M, "model.attn_implementation=sdpa"], "eval.localise=true reads the attention weights: it needs model.attn_implementation=eager"),
    ([M, "model.end_of_turn=''"], "model.end_of_turn: an empty token"),
    ([M, "quant=3bit"], "quant: '3bit' is not one of none, 4bit, 8bit"),
    ([M, "finetune=qlora", "merge=true"], "merge=true needs quant=none"),
    ([M, "finetune=qlora", "model.device=cpu"], "needs a CUDA GPU, not model.device=cpu"),
    ([M, "finetune=nope"], "unknown finetune 'nope' (choose from: lora_cpu, qlora)"),
    ([M, "train.epochs=abc"], "train.epochs: must be an integer, got str 'abc'"),
    ([M, "train.epochs=1e30"], "train.epochs: must be an integer, got float 1e+30"),
    ([M, "train.lr=nan"], "train.lr: must be a number, got float nan"),
    ([M, "train.lr=1e9"], "train.lr: must be in (0, 1], got 1000000000.0"),
    ([M, "train.batch_size=10000000000000"], "train.batch_size: must be in [1, 65,536]"),
    ([M, "train.max_steps=0"], "train.max_steps (-1: no limit): must be in [1,"),
    ([M, "train.precision=fp8"], "train.precision: 'fp8' is not one of 32, bf16"),
    ([M, "train.gradient_checkpointing=maybe"], "train.gradient_checkpointing: must be true or false, got str 'maybe'"),
    ([M, "eval.pool_threshold=inf"], "eval.pool_threshold: must be a number, got float inf"),
    ([M, "lora.r=0"], "lora.r: must be in [1, 4,096], got 0"),
    ([M, "lora.target_modules=[]"], "lora.target_modules: empty"),
    ([M, "lora.target_modules='(q_proj'"], "lora.target_modules: '(q_proj' is not a regular expression"),
    ([M, "seed=-1"], "seed: must be in [0, 4,294,967,295], got -1"),
    ([M, "logger.wandb.mode=bogus"], "logger.wandb.mode must be offline, online or disabled"),
    ([M, "data.n=0"], "data.n: must be in [1, 1,000,000], got 0"),
    ([M, "data.eval_fraction=nan"], "data.eval_fraction: must be a number, got float nan"),
    ([M, "data.build=csv"], "data.build: 'csv' is not one of robot, sudoku, edct"),
    ([M, "data.parts=[wings]"], "data.parts: ['wings'] unknown (choose from: knees"),
    ([M, "data.parts=knees"], "data.parts: must be a list of strings, got str 'knees'"),
    ([M, "data.build=sudoku", "data.questions=[colour]"], "data.questions: ['colour'] unknown (choose from: digit, row_valid)"),
    ([M, "data.source.image_size=96"], "unknown key 'data.source.image_size' (data.source is null: set it whole, 'data.source={image_size: ...}')"),
    ([M, "data.source={image_size: 3}"], "data.source: RobotConfig.image_size: expected an integer in [8, 1024], got 3"),
    ([M, "data.source={name: sudoku}"], "data.source.name: 'sudoku' contradicts data.build=robot"),
    ([M, "data.source={n_test: 0}"], "data.source.n_test: the number of items is data.n"),
    ([M, "data.build=sudoku", "data.source={modality: tabular}"], "data.source.modality: counterfactual pairs are images, not 'tabular'"),
    ([M, "data.build=edct"], "data.source: data.build=edct needs the cbm-edct run"),
    ([M, "data.build=edct", f"data.source={{run_dir: {FT}/files/empty_dir}}"], "is not a cbm-edct run directory (no results.json)"),
    ([M, "data.build=edct", f"data.source={{run_dir: {FT}/files/edct_empty}}"], "edct_empty has no judged, verified steps with a known answer"),
    ([M, "data.build=edct", f"data.source={{run_dir: {FT}/files/edct_corrupt}}"], "record.json is not a readable EDCT record"),
    ([M, f"data.cache_dir={FT}/files/a_file/cache"], "data.cache_dir: cannot create"),
    ([M, "data.jsonl=/dev/null"], "data.jsonl: /dev/null is not a regular file"),
    ([M, f"data.jsonl={FT}/files/missing.jsonl"], "data.jsonl: no file at"),
    ([M, "data.foo=1"], "unknown key 'data.foo' (data has: build"),
    ([M, "+train.foo=1"], "train: unknown setting(s) ['foo'] (known: batch_size"),
]


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def bomb_png(path: Path, side: int = 20_000) -> Path:
    """A complete, valid 1-bit PNG of ``side`` x ``side`` black pixels: ~60 KB on disk, 400
    megapixels (1.2 GB as RGB) once decoded."""
    comp = zlib.compressobj(9)
    row = b"\0" * (1 + (side + 7) // 8)
    idat = b"".join(comp.compress(row) for _ in range(side)) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))
    return path


def _row(i: int, split: str, **kw) -> dict:
    return {"image": "ok.png" if split == "counterfactual" else f"ok{i}.png", "question": "Does this robot have knees?",
            "answer": "yes" if split == "original" else "no",
            "split": split, "pair_id": f"p{i}", "mask": "mask.png", **kw}  # fmt: skip


#: The good file: three pairs (six lines); a bad file is these plus one bad line (line 7).
GOOD_ROWS = [_row(i, s) for i in range(3) for s in ("original", "counterfactual")]
#: name -> (the bad line, the reason on line 7).
BAD_LINES = {
    "meta_list": (_row(9, "original", meta=[1, 2]), "'meta' must be an object, got list"),
    "pair_id_bool": (_row(9, "original", pair_id=True), "'pair_id' must be a non-empty string or an integer, got True"),
    "answer_number": (_row(9, "original", answer=5), "'answer' must be a string, got int"),
    "unknown_field": (_row(9, "original", masks="mask.png"), "unknown field(s) ['masks']"),
    "mask_number": (_row(9, "original", mask=3), "'mask' must be a path (a string) or null, got int"),
    "mask_size": (_row(9, "original", mask="small_mask.png"), f"mask {FT}/files/small_mask.png is 8x8, the image 64x64"),
    "mask_corrupt": (_row(9, "original", mask="corrupt.png"), f"unreadable mask {FT}/files/corrupt.png ("),
    "duplicate_pair": (_row(1, "counterfactual"), "a second counterfactual of pair_id 'p1' (the first is on line 4)"),
    "image_missing": (_row(9, "original", image="nope.png"), f"image not found: {FT}/files/nope.png"),
    "image_dir": (_row(9, "original", image="img_dir.png"), f"image {FT}/files/img_dir.png is not a file"),
    "image_corrupt": (_row(9, "original", image="corrupt.png"), "unreadable image"),
    "image_truncated": (_row(9, "original", image="truncated.png"), "unreadable image"),
    "image_empty": (_row(9, "original", image="empty.png"), "unreadable image"),
    "image_bomb": (_row(9, "original", image="bomb.png"), f"image {FT}/files/bomb.png: 20000x20000 image has 400,000,000 pixels, more than max_image_pixels=50,000,000 (refused undecoded)"),
    "not_json": ("{'image': 'ok.png'}", "not JSON (Expecting property name enclosed in double quotes"),
    "not_object": ("[1, 2]", "expected a JSON object, got list"),
    "nested": ("[" * 100_000, "not JSON this reader accepts (nested too deeply)"),
    "not_utf8": (b"\xff\xfe{}", "not UTF-8 text (byte 1)"),
}
JSONL = [([M, f"data.jsonl={FT}/files/bad_{name}.jsonl", "data.on_bad=error"], f"1 bad row(s): line 7: {why}")
         for name, (_, why) in BAD_LINES.items()]  # fmt: skip
JSONL += [
    ([M, f"data.jsonl={FT}/files/only_meta_list.jsonl"], "no usable row (2 bad: line 1: 'meta' must be an object, got list)"),
    ([M, f"data.jsonl={FT}/files/only_bomb.jsonl"], "no usable row (1 bad: line 1: image"),
    ([M, f"data.jsonl={FT}/files/empty.jsonl"], "no usable row (the file is empty)"),
    ([M, f"data.jsonl={FT}/files/one_pair.jsonl"], "data: 1 original image(s) cannot be split into training and evaluation"),
    ([M, GOOD, "data.max_image_pixels=100"], "more than max_image_pixels=100 (refused undecoded)"),
]
#: Online W&B without a key (only where this machine has none).
SETTINGS += [] if wandb_key_known() else [([M, "logger.wandb.mode=online"], "logger.wandb.mode=online needs a W&B API key")]
#: Refused after torch is imported (a GPU asked for) or a model directory is loaded.
NO_GPU = [] if torch.cuda.is_available() else [
    ([M, GOOD, "model.device=cuda"], "model.device=cuda but no CUDA GPU is available"),
    ([M, GOOD, "finetune=qlora"], "quant=4bit (QLoRA) needs a CUDA GPU and none is available"),
]  # fmt: skip
LOADED = [
    ([f"model.path={FT}/models/evil_bin", GOOD], "pytorch_model.bin could run code when loaded (GLOBAL io.open): refused (only plain weights load"),
    ([f"model.path={FT}/models/random_bin", GOOD], "pytorch_model.bin is not a readable weights file"),
    ([f"model.path={FT}/models/bert", GOOD], "not a vision-language architecture transformers can load for image-text-to-text"),
    ([f"model.path={FT}/models/random_safetensors", GOOD], "model.path: cannot load a vision-language model from"),
    ([f"model.path={FT}/models/no_tensors", GOOD], "lack 58 of the model's tensors"),
    ([f"model.path={FT}/models/no_processor", GOOD], "model.path: cannot load the processor (tokenizer and image processor)"),
    ([f"model.path={FT}/models/no_template", GOOD], "has no chat template"),
    ([T, GOOD, "model.end_of_turn='<nope>'"], "end_of_turn '<nope>' is not a token of this tokenizer"),
    ([T, GOOD, "lora.target_modules=[nope_proj]"], "lora.target_modules: ['nope_proj'] name no module of the model"),
    ([T, GOOD, "lora.target_modules='zzz.*'"], "lora.target_modules: the pattern 'zzz.*' matches no module of the model"),
    ([T, GOOD, "lora.extra={nope: 1}"], "lora.extra: "),
    ([T, f"data.jsonl={FT}/files/wide.jsonl", "data.on_bad=error"], "data: 2 row(s) the model cannot take: line 1: the model's processor"),
]



def _first(args: list[str]) -> list[str]:
    """The argument a case is about first (readable test ids), the shared base arguments last."""
    return sorted(args, key=lambda a: a in (M, T, GOOD))


CASES = (
    [(PROG, _first(a), m, ()) for a, m in SETTINGS + JSONL]
    + [(PROG, _first(a), m, (SLOW,)) for a, m in NO_GPU + LOADED]
)


def _write_jsonl(path: Path, lines: list) -> None:
    raw = [ln if isinstance(ln, bytes) else (ln if isinstance(ln, str) else json.dumps(ln)).encode() for ln in lines]
    path.write_bytes(b"\n".join(raw) + b"\n")


@pytest.fixture(scope="module")
def ffx(tmp_path_factory) -> Path:
    """The cheap fixture files: a fake model directory, images, JSONL files."""
    root = tmp_path_factory.mktemp("finetune-bad-inputs")
    f = root / "files"
    f.mkdir()
    (f / "empty_dir").mkdir()
    (f / "a_file").write_text("not a directory\n")
    for name, config, weights in (("fake_model", '{"model_type": "qwen2_vl"}', True), ("bad_config", "{", True),
                                  ("list_config", "[1]", True), ("no_weights", '{"model_type": "qwen2_vl"}', False)):  # fmt: skip
        (f / name).mkdir()
        (f / name / "config.json").write_text(config)
        if weights:
            (f / name / "model.safetensors").write_bytes(b"")
    for name in ("edct_empty", "edct_corrupt"):
        (f / name).mkdir()
        (f / name / "results.json").write_text("{}")
    (f / "edct_corrupt" / "items" / "x").mkdir(parents=True)
    (f / "edct_corrupt" / "items" / "x" / "record.json").write_text('{"id": "x", "steps": [')
    (f / "adapter").mkdir()
    (f / "adapter" / "adapter_config.json").write_text("{}")
    noise = Image.effect_noise((64, 64), 60).convert("RGB")
    noise.save(f / "ok.png")
    for i in (0, 1, 2, 9):  # each pair's original its own image: the split goes by original image (9: the bad lines)
        noise.save(f / f"ok{i}.png")
    Image.new("L", (64, 64), 255).save(f / "mask.png")
    Image.new("L", (8, 8), 255).save(f / "small_mask.png")
    Image.new("RGB", (300, 1)).save(f / "wide.png")  # a 300:1 aspect ratio Qwen2-VL's processor cannot tile
    (f / "corrupt.png").write_bytes(os.urandom(2048))
    (f / "truncated.png").write_bytes((f / "ok.png").read_bytes()[:2000])
    (f / "empty.png").write_bytes(b"")
    (f / "img_dir.png").mkdir()
    bomb_png(f / "bomb.png")
    _write_jsonl(f / "good.jsonl", GOOD_ROWS)
    for name, (line, _) in BAD_LINES.items():
        _write_jsonl(f / f"bad_{name}.jsonl", [*GOOD_ROWS, line])
    _write_jsonl(f / "only_meta_list.jsonl", [BAD_LINES["meta_list"][0], _row(8, "counterfactual", meta=[1])])
    _write_jsonl(f / "only_bomb.jsonl", [BAD_LINES["image_bomb"][0]])
    (f / "empty.jsonl").write_bytes(b"")
    _write_jsonl(f / "one_pair.jsonl", GOOD_ROWS[:2])
    _write_jsonl(f / "wide.jsonl", [_row(i, s, image="wide.png", mask=None) for i in range(3) for s in ("original", "counterfactual")][:2]
                 + GOOD_ROWS[2:])  # fmt: skip
    return root


@pytest.fixture(scope="module")
def models(ffx) -> Path:
    """Real tiny model directories, broken or hostile (slow cases only)."""
    from safetensors.torch import save_file

    from cbm.vlm.tiny import build_tiny_vlm

    m = ffx / "models"
    tiny = build_tiny_vlm(m / "tiny")
    files = [p for p in tiny.iterdir() if p.name != "model.safetensors"]

    def variant(name: str, skip: tuple[str, ...] = ()) -> Path:
        d = m / name
        d.mkdir()
        for p in files:
            if p.name not in skip:
                shutil.copy(p, d / p.name)
        return d

    torch.save({"weight": Payload(ffx / "files" / "PWNED")}, variant("evil_bin") / "pytorch_model.bin")
    (variant("random_bin") / "pytorch_model.bin").write_bytes(os.urandom(4096))
    bert = variant("bert")
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    shutil.copy(tiny / "model.safetensors", bert / "model.safetensors")
    (variant("random_safetensors") / "model.safetensors").write_bytes(os.urandom(4096))
    save_file({"unrelated": torch.zeros(2)}, str(variant("no_tensors") / "model.safetensors"))
    no_proc = m / "no_processor"
    no_proc.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny / name, no_proc / name)
    shutil.copy(tiny / "model.safetensors", variant("no_template", skip=("chat_template.jinja",)) / "model.safetensors")
    return ffx


@pytest.mark.parametrize("prog, args, message", params(CASES))
def test_bad_finetune_input_gives_one_line_and_leaves_nothing(request, ffx, tmp_path, prog, args, message):
    if any(f"{FT}/models/" in a for a in args):
        request.getfixturevalue("models")
    root = str(ffx)
    assert_refused(ffx, tmp_path, prog, [a.replace(FT, root) for a in args], message.replace(FT, root))


def test_the_hostile_weights_really_carry_a_payload(ffx, tmp_path):
    """The corpus's ``pytorch_model.bin`` payload is live: unpickled without ``weights_only`` it
    creates its marker file (so the refusal above is what kept ``files/PWNED`` from appearing)."""
    path = tmp_path / "pytorch_model.bin"
    marker = tmp_path / "PWNED"
    torch.save({"weight": Payload(marker)}, path)
    torch.load(path, weights_only=False)  # noqa: S614 - demonstrates the payload runs
    assert marker.exists()
