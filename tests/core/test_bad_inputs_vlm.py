"""The bad-input corpus of the VLM study commands (``cbm-icl``, ``cbm-edct``): settings, prompt
templates, files and tampered episodes, each refused with one line, exit 2, nothing left behind
(the contract of ``badinput.py``).

The fixture files are made here, once per module (no trained model needed): a tiny robot dataset
in the data cache; episodes files for it, valid and tampered (edited, or edited and re-sealed with
a recomputed sha256, so the structure checks are reached); image folders with a decompression
bomb, a corrupt, a truncated and an oversized image; bad human-score CSVs. ``@VLM`` in an argument
or message stands for that directory. Hosted clients point at a closed loopback port: no case
sends a request, every one is refused before. The default suite runs a sample of each kind (about
45 cases, a second each); the rest, and every case that imports torch, are marked slow.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from badinput import SLOW, assert_refused, params

TOKEN = "@VLM"
LOOP = "http://127.0.0.1:9/v1"
#: Every cbm-icl case: loopback clients, no reply cache, the tiny robot dataset and a 5-episode grid.
ICL = [f"{r}.{k}={v}" for r in ("models.vlm", "judge") for k, v in (("base_url", LOOP), ("cache_dir", "null"), ("max_retries", 0))] + [
    "datasets.robot.data.image_size=32", "datasets.robot.data.n_test=60", "episodes.n_ways=[2,3]", "episodes.k_shots=[1]",
    "episodes.reps_times_n=6"]  # fmt: skip
EDCT = [f"{r}.{k}={v}" for r in ("vlm", "llm", "judge") for k, v in (("base_url", LOOP), ("cache_dir", "null"), ("max_retries", 0))]
ROBOT = {"kind": "robot", "class_by": "hand_subtype", "split": "test",
         "data": {"name": "robot", "image_size": 32, "n_train": 0, "n_calib": 0, "n_test": 60}}  # fmt: skip
#: A grid for the image-folder cases: one 2-way 1-shot episode over two classes.
FOLDER_GRID = ["episodes.n_ways=[2]", "episodes.k_shots=[1]", "episodes.reps_times_n=2"]


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header says ``width`` x ``height`` (a decompression bomb's first bytes): valid
    signature and IHDR, a few bytes of pixel data, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


def _episode_files(root: Path) -> None:
    """``eps/<case>/robot.json``: a valid file and its tampered variants."""
    from cbm.vlm.icl.datasets import make_dataset
    from cbm.vlm.icl.episodes import EpisodeGrid, make_episodes, save_episodes
    from cbm.vlm.sealed import seal

    ds = make_dataset("robot", dict(ROBOT), str(root / "cache"))
    grid = EpisodeGrid(n_ways=[2, 3], k_shots=[1], reps_times_n=6)
    eps = make_episodes("robot", ds.labels, ds.class_names, grid)
    (root / "eps" / "valid").mkdir(parents=True)
    save_episodes(root / "eps" / "valid" / "robot.json", eps, grid, ds.fingerprint)
    good = json.loads((root / "eps" / "valid" / "robot.json").read_text())

    def write(case: str, obj: object, reseal: bool = True, text: str | None = None) -> None:
        d = root / "eps" / case
        d.mkdir()
        body = text if text is not None else json.dumps(seal(obj) if reseal else obj)
        (d / "robot.json").write_text(body)

    def edited(fn) -> dict:
        d = json.loads(json.dumps(good))
        del d["sha256"]
        fn(d)
        return d

    first = lambda d: d["episodes"][0]  # noqa: E731
    other_class = next(i for i in range(len(ds)) if ds.class_names[ds.labels[i]] not in eps[0].classes)
    write("edited", edited(lambda d: first(d)["support"][0].update(index=first(d)["support"][0]["index"] + 1)), reseal=False)
    write("no_digest", edited(lambda d: None), reseal=False)
    write("negative", edited(lambda d: first(d)["support"][0].update(index=-1)))
    write("out_of_range", edited(lambda d: first(d)["support"][0].update(index=10**6)))
    write("query_in_support", edited(lambda d: first(d)["query"][0].update(first(d)["support"][0])))
    write("label", edited(lambda d: first(d)["support"][0].update(label="9")))
    write("true_class", edited(lambda d: first(d)["support"][0].update(index=other_class)))
    write("dropped", edited(lambda d: d["episodes"].pop()))
    write("duplicated", edited(lambda d: d["episodes"].append(d["episodes"][0])))
    write("empty_query", edited(lambda d: first(d).update(query=[])))
    write("string_index", edited(lambda d: first(d)["support"][0].update(index="3")))
    write("not_a_list", edited(lambda d: d.update(episodes={"a": 1})))
    write("other_grid", edited(lambda d: d["grid"].update(seed=7)))
    write("list", [1], reseal=False)
    write("not_json", None, text="{not json")
    write("empty", None, text="")
    (root / "eps" / "a_dir" / "robot.json").mkdir(parents=True)
    (root / "eps" / "device").mkdir()
    (root / "eps" / "device" / "robot.json").symlink_to("/dev/zero")  # never ends when read
    (root / "eps" / "binary").mkdir()
    (root / "eps" / "binary" / "robot.json").write_bytes(b"\xff\xfe\x00garbage")


def _image_folders(root: Path) -> None:
    from PIL import Image

    def folder(name: str, odd: bytes | None = None, size: int = 8) -> None:
        for c in ("cats", "dogs"):
            (root / name / c).mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (size, size), (i * 60, 90, 0)).save(root / name / c / f"{i}.png")
        if odd is not None:
            (root / name / "dogs" / "1.png").write_bytes(odd)

    buf = (root / "tmp.png")
    Image.new("RGB", (64, 64), (1, 2, 3)).save(buf)
    folder("bomb", png_header_only(10_000, 10_000))  # over max_image_pixels, under PIL's own limit
    folder("huge_bomb", png_header_only(100_000, 100_000))  # over PIL's limit too
    folder("corrupt", np.random.default_rng(0).bytes(512))
    folder("big", size=100)  # over max_image_pixels=5000
    folder("truncated")
    for c in ("cats", "dogs"):  # every image of one class cut short: the episode uses one of them
        for i in range(2):
            (root / "truncated" / c / f"{i}.png").write_bytes(buf.read_bytes()[:60])
    buf.unlink()
    (root / "empty_folder").mkdir()
    (root / "one_class" / "cats").mkdir(parents=True)
    for i in range(3):
        Image.new("RGB", (8, 8)).save(root / "one_class" / "cats" / f"{i}.png")


def _files(root: Path) -> None:
    f = root / "files"
    f.mkdir()
    (f / "a_file").write_text("not a directory\n")
    (f / "no_trial.csv").write_text("item,conciseness\nx,3\n")
    (f / "not_number.csv").write_text("trial,conciseness\nx,five\n")
    (f / "binary.csv").write_bytes(b"\xff\xfe\x00\x81trial")
    (f / "empty.csv").write_text("")
    (f / "escape.jsonl").write_text('{"image": "../../secret.png", "question": "q"}\n')
    (f / "garbled.jsonl").write_text('{"image": "a.png"\n')
    (f / "no_truth.jsonl").write_text('{"image": "a.png", "options": ["x", "y"], "answer": "z"}\n')
    (f / "humans_bad.csv").write_text("item,step,h1_edit_valid,h1_ac,h1_ef\nrobot-test-00000,1,yes,yes,1\n")
    for run, vlm in (("edct_a", "x"), ("edct_b", "y")):  # finished cbm-edct runs of two VLMs
        (f / run).mkdir()
        (f / run / "results.json").write_text(json.dumps({"scores": {}, "fingerprint": {"vlm": vlm, "task": "t"}}))


@pytest.fixture(scope="module")
def vfx(tmp_path_factory) -> Path:
    """The module's fixture directory (``@VLM``)."""
    root = tmp_path_factory.mktemp("vlm-bad-inputs")
    _episode_files(root)
    _image_folders(root)
    _files(root)
    return root


# ------------------------------------------------------------------ cbm-icl: settings and templates
ICL_SETTINGS = [
    ("episodes.n_ways=abc", "episodes.n_ways: must be a list of integers, got str 'abc'"),
    ("episodes.k_shots=5", "episodes.k_shots: must be a list of integers, got int 5"),
    ("episodes.n_ways=[2,2]", "episodes.n_ways: distinct N, each >= 2, got [2, 2]", SLOW),
    ("episodes.queries=abc", "episodes.queries: must be an integer", SLOW),
    ("episodes.queries=0", "episodes.queries: must lie in [1, 100], got 0", SLOW),
    ("episodes.seed=-1", "episodes.seed: must lie in [0, 2**32), got -1"),
    ("episodes.reps_times_n=-12", "episodes.reps_times_n: must be >= the largest N", SLOW),
    ("episodes.reps_times_n=600000", "episodes: the grid has 500000 episodes per dataset, more than 10000"),
    ("episodes.anonymise=maybe", "episodes.anonymise: must be true or false, got str 'maybe'", SLOW),
    ("+episodes.foo=1", "episodes: unknown setting(s) ['foo']"),
    ("episodes=5", "episodes: must be a mapping of settings, got int 5"),
    ("conditions=[E1,E1]", "conditions: each condition once"),
    ("judge_options.reproducibility_repeats=abc", "judge_options.reproducibility_repeats: must be an integer", SLOW),
    ("judge_options.reproducibility_temperature=nan", "judge_options.reproducibility_temperature: must be a number", SLOW),
    ("statistics=5", "statistics: must be a mapping of settings, got int 5", SLOW),
    ("statistics.human_scores=@VLM/files/missing.csv", "statistics.human_scores: '@VLM/files/missing.csv' is not a file", SLOW),
    ("models.vlm=5", "models.vlm: must be a mapping of settings, got int 5"),
    ("progress=maybe", "progress: must be true or false or null, got str 'maybe'", SLOW),
    ("episodes_dir=''", "episodes_dir: empty", SLOW),
    ("models.vlm.cache_dir=@VLM/files/a_file", "models.vlm: client.cache_dir: cannot create @VLM/files/a_file: @VLM/files/a_file is a file", SLOW),
    ("max_image_pixels=0", "max_image_pixels: must lie in [1,"),
    ("datasets.robot.data=5", "datasets.robot.data: must be a mapping of robot data settings, got int 5", SLOW),
    ("datasets.robot.class_by=7", "datasets.robot.class_by: must be a string, got int 7", SLOW),
    ("+datasets.s={kind: sudoku, per_class: abc}", "datasets.s.per_class: must be an integer, got str 'abc'", SLOW),
    ("+datasets.s={kind: sudoku, per_class: 100000000}", "datasets.s.per_class: must lie in [1, 5000]"),
    ("+datasets.s={kind: sudoku, cell_size: -3}", "datasets.s: bad render option (SudokuConfig.cell_size: expected an integer in [8, 128], got -3", SLOW),
    ("+datasets.s={kind: sudoku, colour: red}", "datasets.s: unknown keys ['colour']", SLOW),
    ("prompts.query='{}'", "prompts.query: '{}' is a positional placeholder"),
    ("prompts.query='{0}'", "prompts.query: '{0}' is a positional placeholder"),
    ("prompts.query='{options.__class__}'", "prompts.query: '{options.__class__}' is not a plain placeholder name"),
    ("prompts.query='{options[0]}'", "prompts.query: '{options[0]}' is not a plain placeholder name"),
    ("prompts.query='Options: {options'", "prompts.query: bad template (expected '}' before end of string)"),
    ("prompts.query='{options!r}'", "prompts.query: '{options!r}' has a conversion or format spec"),
    ("prompts.query='{options:>9}'", "prompts.query: '{options:>9}' has a conversion or format spec", SLOW),
    ("prompts.judge='}'", "prompts.judge: bad template (Single '}' encountered in format string)", SLOW),
    ("prompts.support_user='{}'", "prompts.support_user: '{}' is a positional placeholder", SLOW),
    ("prompts.instructions.E1='{}'", "prompts.instructions.E1: '{}' is a positional placeholder"),
    ("prompts.descriptions.E2='{x}'", "prompts.descriptions.E2: unknown placeholder(s) ['x']", SLOW),
    ("prompts.system=5", "prompts.system: must be a string, got int", SLOW),
    ("prompts.query=''", "prompts.query: empty (the model would be asked nothing)", SLOW),
    ("prompts.instructions=5", "prompts.instructions: must be a mapping condition -> text, got int", SLOW),
    ("+prompts.instructions.E9=x", "prompts.instructions: unknown condition(s) ['E9']", SLOW),
    ("+prompts.secret=x", "prompts: unknown template(s) ['secret']", SLOW),
    ("judge_options.conditions=[E9]", "judge_options.conditions: distinct conditions from E1, E2, E3, E4, E5, got ['E9']"),
    ("judge_options.conditions=[E2,E2]", "judge_options.conditions: distinct conditions from E1, E2, E3, E4, E5, got ['E2', 'E2']", SLOW),
    ("reask=2", "reask: must be 0 or 1 (re-asks of an unreadable reply), got 2", SLOW),
    # the paper's layout: the condition's instruction injected into the system prompt, exactly once
    ("prompts.system='Rules only.'", "prompts: {instruction} (the condition's instruction) must appear in exactly one of prompts.system, "
     "prompts.query; neither has it"),
    ("prompts.query='{instruction} Options: {options}'", "must appear in exactly one of prompts.system, prompts.query; both have it", SLOW),
    ("prompts.system='{instruction} {labels}'", "prompts.system: unknown placeholder(s) ['labels'] (available: instruction, options)"),
    ("prompts.judge='{verdict}'", "prompts.judge: unknown placeholder(s) ['verdict']", SLOW),
]

# ------------------------------------------------------------------ cbm-icl: files (the dataset is loaded first)
ICL_FILES = [
    (["episodes_dir=@VLM/eps/edited"], "@VLM/eps/edited/robot.json: episodes file changed since it was drawn (no matching sha256); delete it to redraw"),
    (["episodes_dir=@VLM/eps/no_digest"], "episodes file changed since it was drawn", SLOW),
    (["episodes_dir=@VLM/eps/list"], "@VLM/eps/list/robot.json: episodes file changed since it was drawn"),
    (["episodes_dir=@VLM/eps/negative"], "support index -1 is outside the dataset (0..59); delete it to redraw"),
    (["episodes_dir=@VLM/eps/out_of_range"], "support index 1000000 is outside the dataset (0..59)"),
    (["episodes_dir=@VLM/eps/query_in_support"], "an item is used twice (support and query must be disjoint)"),
    (["episodes_dir=@VLM/eps/label"], "do not match the dataset and the episode"),
    (["episodes_dir=@VLM/eps/true_class"], "do not match the dataset and the episode"),
    (["episodes_dir=@VLM/eps/dropped"], "1 episode(s) missing, e.g. n3-k1-r1; delete it to redraw"),
    (["episodes_dir=@VLM/eps/duplicated"], "not a repeated of this grid and dataset", SLOW),
    (["episodes_dir=@VLM/eps/empty_query"], "2 support and 0 query shots, expected 2 and 1"),
    (["episodes_dir=@VLM/eps/string_index"], "episode 0: not an episode (fields dataset, n_way", SLOW),
    (["episodes_dir=@VLM/eps/not_a_list"], "'episodes' is not a list", SLOW),
    (["episodes_dir=@VLM/eps/other_grid"], "episodes made for other settings (grid or dataset differ)", SLOW),
    (["episodes_dir=@VLM/eps/not_json"], "@VLM/eps/not_json/robot.json: not JSON (line 1: Expecting property name"),
    (["episodes_dir=@VLM/eps/empty"], "@VLM/eps/empty/robot.json: not JSON", SLOW),
    (["episodes_dir=@VLM/eps/binary"], "@VLM/eps/binary/robot.json: not UTF-8 text: not an episodes file", SLOW),
    (["episodes_dir=@VLM/eps/a_dir"], "@VLM/eps/a_dir/robot.json: not a regular file: not an episodes file"),
    (["episodes_dir=@VLM/eps/device"], "@VLM/eps/device/robot.json: not a regular file", SLOW),
    (["statistics.human_scores=@VLM/files/no_trial.csv"], "needs a header with a 'trial' column", SLOW),
    (["statistics.human_scores=@VLM/files/not_number.csv"], "not_number.csv line 2: conciseness='five' is not a number", SLOW),
    (["statistics.human_scores=@VLM/files/binary.csv"], "binary.csv is not a UTF-8 CSV file", SLOW),
    (["statistics.human_scores=@VLM/files/empty.csv"], "empty.csv needs a header with a 'trial' column", SLOW),
]
#: Image folders (``datasets.robot`` replaced by a folder dataset).
FOLDER = ["~datasets.robot", *FOLDER_GRID]
ICL_FOLDERS = [
    (["+datasets.f={kind: imagefolder, root: @VLM/bomb}"], "dogs/1.png: 10000x10000 image has 100,000,000 pixels, more than max_image_pixels=50,000,000 (refused undecoded)"),
    (["+datasets.f={kind: imagefolder, root: @VLM/huge_bomb}"], "dogs/1.png: 100000x100000 image has 10,000,000,000 pixels, more than max_image_pixels=50,000,000 (refused undecoded)"),
    (["+datasets.f={kind: imagefolder, root: @VLM/big}", "max_image_pixels=5000"], "100x100 image has 10,000 pixels, more than max_image_pixels=5,000", SLOW),
    (["+datasets.f={kind: imagefolder, root: @VLM/corrupt}"], "dogs/1.png: cannot read the image (cannot identify image file"),
    (["+datasets.f={kind: imagefolder, root: @VLM/truncated}"], "cannot decode the image (OSError: image file is truncated"),
    (["+datasets.f={kind: imagefolder, root: @VLM/empty_folder}"], "datasets.f.root: no image files under '@VLM/empty_folder'", SLOW),
    (["+datasets.f={kind: imagefolder, root: @VLM/files/a_file}"], "datasets.f.root: '@VLM/files/a_file' is not a directory", SLOW),
    (["+datasets.f={kind: imagefolder, root: @VLM/one_class}"], "dataset 'f': 1 classes have >= 2 items (K + queries), the grid needs 2", SLOW),
    (["+datasets.f={kind: imagefolder, root: @VLM/big, extra: 1}"], "datasets.f: unknown keys ['extra'] (kind, root)", SLOW),
    (["+datasets.f={kind: imagefolder, root: 5}"], "datasets.f.root: must be a directory (root/<class>/<image>), got int 5", SLOW),
]
#: torchvision names that are not dataset classes (torch is imported: slow).
ICL_TORCHVISION = [
    (["+datasets.t={kind: torchvision, name: utils, root: @VLM}"], "datasets.t.name: 'utils' of torchvision.datasets is a module, not a dataset class"),
    (["+datasets.t={kind: torchvision, name: wrap_dataset_for_transforms_v2, root: @VLM}"], "datasets.t.name: 'wrap_dataset_for_transforms_v2' of torchvision.datasets is a function, not a dataset class"),
    (["+datasets.t={kind: torchvision, name: NoSuchSet, root: @VLM}"], "datasets.t.name: cannot import 'NoSuchSet' of torchvision.datasets"),
    (["+datasets.t={kind: torchvision, name: ImageFolder, root: @VLM/bomb}"], "10000x10000 image has 100,000,000 pixels, more than max_image_pixels=50,000,000"),
    (["+datasets.t={kind: torchvision, name: MNIST, root: @VLM/files, download: true}"], "datasets.t.download: set by the study (download=False: read from disk only"),
    (["+datasets.t={kind: torchvision, name: MNIST, root: @VLM/files}"], "datasets.t: MNIST at '@VLM/files' is not usable offline (Dataset not found"),
]

# ------------------------------------------------------------------ cbm-edct
EDCT_CASES = [
    ("segmenter={target: 'os:system', kwargs: {command: 'touch @VLM/files/PWNED'}}", "segmenter.target: 'os:system' is a builtin_function_or_method, not a Segmenter class or a factory marked @cbm.vlm.verify.segmenter_factory; it was not called"),
    ("segmenter={target: 'subprocess:run', kwargs: {args: [touch, '@VLM/files/PWNED']}}", "segmenter.target: 'subprocess:run' is a function"),
    ("segmenter={target: 'builtins:exec', kwargs: {source: 'open(\"@VLM/files/PWNED\", \"w\")'}}", "segmenter.target: 'builtins:exec' is a builtin_function_or_method"),
    ("segmenter={target: 'os:path'}", "segmenter.target: 'os:path' is a module", SLOW),
    ("segmenter={target: 'builtins:type'}", "segmenter.target: 'builtins:type' is a class, not a Segmenter class"),
    ("segmenter={target: 'cbm.vlm.verify:Segmenter'}", "segmenter.target: 'cbm.vlm.verify:Segmenter' is the base class itself", SLOW),
    ("segmenter={target: os}", "segmenter.target: must look like 'module:Name'", SLOW),
    ("segmenter={target: 'no_such_module:X'}", "segmenter.target: cannot import 'no_such_module:X' (ModuleNotFoundError", SLOW),
    ("segmenter={target: 'os:system', run: 1}", "segmenter: unknown key(s) ['run'] (target, kwargs)", SLOW),
    ("segmenter=5", "segmenter: must be a mapping or null, got int 5", SLOW),
    ("editor.kind=hosted", "editor: the environment variable OPENAI_API_KEY is not set (the API key of the image-edit endpoint https://api.openai.com/v1)"),
    (["editor.kind=hosted", "+editor.api_key=sk-123"], "editor.api_key: a key is never written in a config"),
    (["editor.kind=hosted", f"+editor.base_url={LOOP}", "+editor.timeout=abc"], "editor.timeout: must be a number, got str 'abc'", SLOW),
    (["editor.kind=hosted", f"+editor.base_url={LOOP}", "+editor.timeout=-1"], "editor: timeout must be > 0", SLOW),
    (["editor.kind=hosted", "+editor.base_url=ftp://x"], "editor.base_url: 'ftp://x' is not an http(s) URL", SLOW),
    (["editor.kind=hosted", f"+editor.base_url={LOOP}", "+editor.size=9"], "editor: unknown setting(s) ['size']", SLOW),
    ("segmenter={target: 'cbm.vlm.segmenters:DetectorSegmenter', kwargs: {detector_path: '@VLM/files/missing', sam_path: '@VLM/files'}}",
     "segmenter.kwargs.detector_path: no model directory at '@VLM/files/missing' (a local checkpoint; no downloads)"),
    ("segmenter={target: 'cbm.vlm.segmenters:DetectorSegmenter', kwargs: {detector_path: '@VLM/files', sam_path: '@VLM/files', detector: yolo}}",
     "segmenter.kwargs.detector: unknown detector 'yolo' (choose from: owlv2, grounding_dino)", SLOW),
    ("score_unverified=maybe", "score_unverified: must be true or false", SLOW),
    ("prompts.retry='{secret}'", "prompts.retry: unknown placeholder(s) ['secret']", SLOW),
    (["editor.kind=diffusers_inpaint", "+editor.model_path=@VLM/files", "+editor.resolution=100"],
     "editor.resolution: must be a multiple of 8 in [8, 2048], got 100", SLOW),
    ("editor.kind=diffusers", "editor.model_path: required", SLOW),
    (["editor.kind=diffusers", "+editor.model_path=@VLM/files/missing"], "editor.model_path: no model directory at '@VLM/files/missing'", SLOW),
    ("+editor.strict=maybe", "editor.strict: must be true or false, got str 'maybe'", SLOW),
    ("editor.kind=photoshop", "editor.kind: unknown editor 'photoshop'", SLOW),
    ("editor=5", "editor: must be a mapping, got int 5", SLOW),
    ("k=abc", "k: must be an integer, got str 'abc'"),
    ("k=2.5", "k: must be an integer, got float 2.5", SLOW),
    ("items.n=1000000000", "items.n: at most 100000, got 1000000000"),
    ("items.seed=-1", "items.seed: must lie in [0, 2**32), got -1", SLOW),
    ("items.sample=maybe", "items.sample: must be true or false", SLOW),
    ("items.split=val", "items.split: unknown split 'val' (train, calib, test)", SLOW),
    ("question=''", "question: empty", SLOW),
    ("options=[a,a]", "options: at least two distinct, non-empty answer options"),
    ("options=abc", "options: must be a list of strings or null, got str 'abc'", SLOW),
    ("workers=100000", "verify_retries must lie in [0, 10] and workers in [1, 256]", SLOW),
    ("bootstrap.n_resamples=1000000000000", "bootstrap.n_resamples: must lie in [100, 1000000]", SLOW),
    ("bootstrap.confidence=abc", "bootstrap.confidence: must be a number, got str 'abc'", SLOW),
    ("judge2=5", "judge2: client: must be a mapping of settings, got int 5", SLOW),
    ("verify=5", "verify: must be a mapping, got int 5", SLOW),
    ("max_image_pixels=-1", "max_image_pixels: must lie in [1,", SLOW),
    ("prompts.answer='{}'", "prompts.answer: '{}' is a positional placeholder"),
    ("prompts.judge='{edit!s}'", "prompts.judge: '{edit!s}' has a conversion or format spec"),
    ("prompts.extract='{question.__init__.__globals__}'", "prompts.extract: '{question.__init__.__globals__}' is not a plain placeholder name"),
    ("prompts.chain='{concepts[0]}'", "prompts.chain: '{concepts[0]}' is not a plain placeholder name", SLOW),
    ("prompts.answer='{question'", "prompts.answer: bad template", SLOW),
    ("prompts.answer=5", "prompts.answer: must be a string, got int", SLOW),
    ("prompts.answer=''", "prompts.answer: empty", SLOW),
    ("+verify.tau_in=abc", "VerifyConfig.tau_in: expected a finite number, got 'abc'", SLOW),
    ("segmenter={target: 'cbm.vlm.verify:resolve_segmenter'}", "'cbm.vlm.verify:resolve_segmenter' is a function", SLOW),
    ("+prompts.secret=x", "prompts: unknown template(s) ['secret']", SLOW),
    ("items.source=files", "items.path: items.source=files needs the data's path"),
    ("items.path=@VLM/files/escape.jsonl", "items.path: only read with items.source=files", SLOW),
    (["items.source=files", "items.path=@VLM/files/missing.jsonl", "editor.kind=hosted", f"+editor.base_url={LOOP}"],
     "items.path: nothing at '@VLM/files/missing.jsonl'"),
    (["items.source=files", "items.path=@VLM/files/escape.jsonl", "editor.kind=hosted", f"+editor.base_url={LOOP}"],
     "escape.jsonl (escape.jsonl:1): image '../../secret.png': "),
    (["items.source=files", "items.path=@VLM/files/garbled.jsonl", "editor.kind=hosted", f"+editor.base_url={LOOP}"],
     "garbled.jsonl:1: not JSON", SLOW),
    (["items.source=files", "items.path=@VLM/files/no_truth.jsonl", "editor.kind=hosted", f"+editor.base_url={LOOP}"],
     "answer 'z' is not one of the options ['x', 'y']", SLOW),
    (["items.source=files", "items.path=@VLM/files/escape.jsonl"], "editor.kind: photographs need an image editor", SLOW),
    (["items.source=files", "items.path=@VLM/files/escape.jsonl", "items.format=pdf"], "items.format: unknown format 'pdf'", SLOW),
    (["items.source=files", "items.path=@VLM/files/escape.jsonl", "items.shape=vqav2"], "items.shape: unknown shape 'vqav2'", SLOW),
    ("reask=yes", "reask: must be", SLOW),
    ("baseline_turns=3", "baseline_turns: must be 1 (answer and explanation in one prompt) or 2 (the paper: the explanation asked in a second turn), got 3"),
    ("human_scores=@VLM/files/humans_bad.csv", "human_scores: @VLM/files/humans_bad.csv: line 2: h1_ac must be 1 / 0 / blank, got 'yes'"),
    ("human_scores=@VLM/files/no_trial.csv", "human_scores: @VLM/files/no_trial.csv: missing column(s) step, h1_edit_valid, h1_ac, h1_ef; expected", SLOW),
    ("human_scores=@VLM/files/missing.csv", "human_scores: @VLM/files/missing.csv: no such file", SLOW),
    ("stability_runs=[@VLM/files/edct_a,@VLM/files/edct_b]",
     "stability_runs: @VLM/files/edct_b was made with other settings than @VLM/files/edct_a (vlm); only seeds and output_dir may differ"),
    ("stability_runs=[@VLM/files/edct_a]", "stability_runs: at least 2 run directories, got 1", SLOW),
    ("stability_runs=[@VLM/files/edct_a,@VLM/files]", "stability_runs: @VLM/files is not a finished cbm-edct run (no results.json)", SLOW),
    ("items.n=10001", "items.n=10001 exceeds the 10000 items of split 'test' (set by data.n_test)"),
    ("vlm.cache_dir=@VLM/files/a_file", "vlm: client.cache_dir: cannot create @VLM/files/a_file: @VLM/files/a_file is a file, not a directory"),
    ("judge.cache_dir=@VLM/files/a_file/replies", "judge: client.cache_dir: cannot create @VLM/files/a_file/replies: @VLM/files/a_file is a file", SLOW),
]


# ------------------------------------------------------------------ cbm-vlm-zoo: settings
#: A case that holds only where torch sees no CUDA GPU (the CPU CI; a GPU machine runs the repair).
NEEDS_NO_GPU = pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA GPU is present: QLoRA can run")
ZOO_CASES = [
    ("members={a: 3}", "members.a: expected a number in [0.0, 1.0], got 3"),
    ("members={../x: 0}", "members: '../x' is not a usable name (letters, digits, _ or -, not 'base')"),
    ("members={base: 0}", "members: 'base' is not a usable name", SLOW),
    ("members={}", "members: expected a mapping name -> cue share, got {}", SLOW),
    ("data.cue=none", "data.cue: expected one of ['corner', 'swatch', 'tint'], got 'none'"),
    ("data.rule={wings: 1}", "data.rule: unknown concept 'wings'", SLOW),
    ("model.patch=5", "model.patch: data.image_size (64) must be a multiple of 2 * patch (10)"),
    ("model.heads=3", "model: hidden must divide by heads, heads by kv_heads, vision_width by vision_heads", SLOW),
    ("train.lr=-1", "train.lr: expected a number in [1e-07, 1.0], got -1", SLOW),
    ("edct_items=0", "edct_items: expected an integer in [1, 1000000], got 0", SLOW),
    ("+data.size=3", "data: unknown setting(s) ['size']", SLOW),
    (["task=sudoku", "sudoku.vision_epochs=-1"], "sudoku.vision_epochs: expected an integer in [0, 1000], got -1"),
    (["task=sudoku", "sudoku.member_lr=fast"], "sudoku.member_lr: expected a number in [1e-07, 1.0], got 'fast'"),
    (["task=sudoku", "sudoku.wrong=swap"], "sudoku.wrong: expected one of ['outside', 'repeat'], got 'swap'", SLOW),
    ("repair.quant=3bit", "repair.quant: '3bit' is not one of none, 4bit, 8bit", SLOW),
    ("repair.device=gpu", "repair.device: 'gpu' is not one of auto, cpu, cuda, cuda:N", SLOW),
    (["repair.quant=4bit", "repair.device=cpu"], "repair.quant=4bit (QLoRA) needs a CUDA GPU, not repair.device=cpu (on the CPU: repair.quant=none)", SLOW),
    ("repair.quant=4bit", "repair.quant=4bit (QLoRA) needs a CUDA GPU and none is available (on the CPU: repair.quant=none repair.device=auto)",
     NEEDS_NO_GPU),
]
#: Refused before anything is built, by the real run and by its dry run alike: sizes against this
#: machine's memory, counts against their splits (the check cbm-edct's items.n has), a rule under
#: which no robot is a Glorp (or none a Drent), an output_dir that is a file.
ZOO_EARLY = [
    (["model.hidden=4096", "model.layers=4096"], "model: 618,478,014,464 parameters (hidden=4096, layers=4096, vision_width=96, "
     "vision_layers=2) need at least 9.0 TiB of memory to train, this machine has"),
    ("edct_items=1000000", "edct_items=1000000 exceeds the 1000 items of split 'test' (set by data.n_test)"),
    (["data.n_test=8", "edct_items=9"], "edct_items=9 exceeds the 8 items of split 'test' (set by data.n_test)", SLOW),
    (["task=sudoku", "sudoku.n_test=8", "edct_items=9"], "edct_items=9 exceeds the 8 items of split 'test' (set by sudoku.n_test)", SLOW),
    (["data.n_train=100", "repair.pairs=101"], "repair.pairs=101 exceeds the 100 items of split 'train' (set by data.n_train)", SLOW),
    ("data.rule={mouth_closed: -5}", "data.rule / data.bias: no robot is a Glorp under this rule (its highest score, bias -7.5 + the "
     "positive weights, is -7.5, not > 0): raise a weight or data.bias"),
    ("data.bias=100", "data.rule / data.bias: every robot is a Glorp under this rule", SLOW),
    ("output_dir=@VLM/files/a_file", "cannot create @VLM/files/a_file: @VLM/files/a_file is a file, not a directory"),
]


def _cases(prog: str, entries: list, base: list[str], tail: tuple[str, ...] = (), marks: tuple = ()) -> list:
    """``(prog, [base, case args, tail], message, marks)`` per entry ``(args, message[, SLOW])``
    (the case's arguments after the base ones: Hydra applies overrides in order)."""
    out = []
    for args, message, *slow in entries:
        own = [args] if isinstance(args, str) else list(args)
        out.append((prog, [*base, *own, *tail], message, (*marks, *slow)))
    return out


CASES = (
    _cases("cbm-icl", ICL_SETTINGS, ICL)
    + _cases("cbm-icl", ICL_FILES, ICL)
    + _cases("cbm-icl", ICL_FOLDERS, ICL, tuple(FOLDER))
    + _cases("cbm-icl", ICL_TORCHVISION, ICL, tuple(FOLDER), (SLOW,))
    + _cases("cbm-edct", EDCT_CASES, EDCT)
    + _cases("cbm-vlm-zoo", ZOO_CASES, [])
    + _cases("cbm-vlm-zoo", ZOO_EARLY, [])
)


@pytest.mark.parametrize("prog, args, message", params(CASES))
def test_bad_vlm_input_gives_one_line_and_leaves_nothing(vfx, tmp_path, prog, args, message):
    args = [a.replace(TOKEN, str(vfx)) for a in args]
    assert_refused(vfx, tmp_path, prog, args, message.replace(TOKEN, str(vfx)))
    assert not (vfx / "files" / "PWNED").exists()  # no target named in a setting was ever called


@pytest.mark.parametrize("prog, args, message", params(_cases("cbm-vlm-zoo", ZOO_EARLY, [])))
def test_the_zoo_dry_run_refuses_what_the_run_refuses(vfx, tmp_path, prog, args, message):
    """``CBM_DRY_RUN=1`` validates the command line with the same checks as the run: none of these is
    "valid" to a dry run (an output_dir that is a file was)."""
    args = [a.replace(TOKEN, str(vfx)) for a in args]
    assert_refused(vfx, tmp_path, prog, args, message.replace(TOKEN, str(vfx)), env={"CBM_DRY_RUN": "1"})


def test_the_valid_episodes_file_is_accepted(vfx):
    """The tampered files differ from an accepted one: the valid file loads, and re-sealing it
    (a recomputed sha256 over the same content) changes nothing."""
    from cbm.vlm.icl.datasets import make_dataset
    from cbm.vlm.icl.episodes import EpisodeGrid, load_episodes
    from cbm.vlm.sealed import seal

    ds = make_dataset("robot", dict(ROBOT), str(vfx / "cache"))
    grid = EpisodeGrid(n_ways=[2, 3], k_shots=[1], reps_times_n=6)
    path = vfx / "eps" / "valid" / "robot.json"
    eps = load_episodes(path, grid, ds)
    assert len(eps) == 5
    d = json.loads(path.read_text())
    assert seal({k: v for k, v in d.items() if k != "sha256"}) == d
