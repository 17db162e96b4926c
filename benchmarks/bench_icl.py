"""ICL study overhead: every trial of the 26-episode grid x E1-E5 (130 trials, 130 judge requests)
against a scripted loopback endpoint (replies cost ~nothing, so what is measured is the framework:
building the multi-turn requests with up to 21 PNG images, parsing, the DL checker, records,
statistics, tables and the radar chart), cold, then from the reply cache, then from the records.

    python benchmarks/bench_icl.py [--image-size 64]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import tempfile
import time
from pathlib import Path

from loopback import chat_reply
from omegaconf import OmegaConf
from pytest_httpserver import HTTPServer

from cbm.core.common import CONF_DIR
from cbm.vlm.icl.config import ICLConfig
from cbm.vlm.icl.judge import METRICS
from cbm.vlm.icl.run import run


def reply(text: str):
    return chat_reply(text, 2000, 80)


def handler(req):
    msgs = json.loads(req.data)["messages"]
    text = msgs[-1]["content"][-1]["text"]
    if text.startswith("You are a fair LLM judge"):
        return reply("".join(f"<{m}>{1 + len(req.data) % 5}</{m}>" for m in METRICS))
    label = re.search(r"Options: ([^,.]+)", text).group(1).strip()  # always the first listed label
    if "Description Logic statements" in msgs[0]["content"]:
        rule = f"[{label}] ≡ hasVisualFeature([star hands]) ⊓ hasVisualFeature([round head])"
        return reply(f"<tbox>\n- {rule}\n- [{label}] ⊑ hasVisualFeature([antennae])\n</tbox>\n<abox>\n- hasVisualFeature(Query, [star hands])\n"
                     f"- hasVisualFeature(Query, [round head])\n</abox>\n<dl_explanation>\n- Rule(s) fired: {rule}\n</dl_explanation>\n"
                     f"<response>{label}</response>")  # fmt: skip
    return reply(f"<response>{label}</response><explanation>star hands</explanation><features>- hand shape: star\n- head shape: round"
                 f"</features><kb>- IF [hand shape = star] THEN [{label}]</kb><rule_check>- IF [hand shape = star] THEN [{label}]</rule_check>")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image-size", type=int, default=64)
    args = ap.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = HTTPServer()
    server.expect_request("/v1/chat/completions").respond_with_handler(handler)
    server.start()
    try:
        with tempfile.TemporaryDirectory() as d:
            client = {"model": "scripted", "base_url": server.url_for("/v1"), "cache_dir": f"{d}/replies", "max_retries": 0, "concurrency": 4}
            prompts = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / "icl.yaml").prompts)
            data = {"kind": "robot", "data": {"name": "robot", "image_size": args.image_size, "n_train": 0, "n_calib": 0, "n_test": 400}}
            for label, out in (("cold", "a"), ("cached replies", "b"), ("rerun (records)", "b")):
                cfg = ICLConfig(output_dir=f"{d}/{out}", models={"vlm": client}, judge={**client, "model": "judge"}, datasets={"robot": data},
                                prompts=prompts, cache_dir=f"{d}/cache", progress=False)  # fmt: skip
                t0 = time.perf_counter()
                res = run(cfg)
                dt = time.perf_counter() - t0
                u = res["result"]["usage"]["vlm"]
                n = res["result"]["trials"]
                print(f"{label:>16}: {n} trials, {u['requests']} model requests ({u['cache_hits']} cached), "
                      f"{len(server.log)} sent so far: {dt:.2f} s, {1000 * dt / n:.1f} ms/trial")  # fmt: skip
    finally:
        server.stop()


if __name__ == "__main__":
    main()
