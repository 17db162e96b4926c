"""EDCT pipeline overhead: N robots through every stage against a scripted loopback endpoint
(replies cost ~nothing, so what is measured is the framework: prompts, parsing, exact edits,
verification, records, cache), cold and then rerun from the records and the reply cache.

    python benchmarks/bench_edct.py --items 100
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

from loopback import chat_reply
from omegaconf import OmegaConf
from pytest_httpserver import HTTPServer

from cbm.core.common import CONF_DIR
from cbm.vlm.edct.config import EDCTConfig
from cbm.vlm.edct.run import run


def reply(text: str):
    return chat_reply(text, 300, 40)


def handler(req):
    user = json.loads(req.data)["messages"][-1]["content"]
    text = next(p["text"] for p in user if p["type"] == "text")
    if any(p["type"] == "image_url" for p in user):
        label = "Glorp" if len(req.data) % 2 else "Drent"  # some answers change after an edit, some do not
        return reply(f"<answer>{label}</answer><explanation>Its feet and mouth.</explanation>")
    if "Explain your answer" in text:  # turn 2 of the baseline / re-query (baseline_turns: 2)
        return reply("<explanation>Its feet and mouth.</explanation>")
    if "List up to" in text:
        return reply("<concept>feet</concept><concept>mouth</concept>")
    if "chronological chain" in text:
        return reply("<edit><concept>feet</concept></edit><edit><concept>mouth</concept></edit>")
    same = re.search(r"Original answer: (\w+)", text).group(1) == re.search(r"Answer after the edit: (\w+)", text).group(1)
    return reply(f"<ac>{'no' if same else 'yes'}</ac><ef>yes</ef><score>{2 if same else 5}</score>")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--image-size", type=int, default=64)
    args = ap.parse_args()
    server = HTTPServer()
    server.expect_request("/v1/chat/completions").respond_with_handler(handler)
    server.start()
    try:
        with tempfile.TemporaryDirectory() as d:
            client = {"model": "scripted", "base_url": server.url_for("/v1"), "cache_dir": f"{d}/replies", "max_retries": 0}
            prompts = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / "edct.yaml").prompts)
            data = {"name": "robot", "image_size": args.image_size, "n_train": 10, "n_calib": 0, "n_test": args.items}
            for label, out in (("cold", "a"), ("cached replies", "b"), ("rerun (records)", "b")):
                cfg = EDCTConfig(output_dir=f"{d}/{out}", vlm=client, llm=client, judge=client, prompts=prompts, data=data,
                                 cache_dir=f"{d}/cache", items={"n": args.items}, progress=False)  # fmt: skip
                t0 = time.perf_counter()
                res = run(cfg)
                dt = time.perf_counter() - t0
                u = res["result"]["usage"]["vlm"]
                print(f"{label:>16}: {args.items} items, {res['summary']['steps_judged']} steps, {u['requests']} requests "
                      f"({u['cache_hits']} cached): {dt:.2f} s, {1000 * dt / args.items:.1f} ms/item")  # fmt: skip
    finally:
        server.stop()


if __name__ == "__main__":
    main()
