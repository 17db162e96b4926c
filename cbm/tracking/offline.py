"""Read an offline W&B run (``offline-run-*/run-<id>.wandb``) with wandb's own protobufs: what a
run logged, without syncing it (the tests' check of every run type; a resume's last logged step).

The file is a LevelDB-style log (wandb's ``datastore`` format): a 7-byte header (``:W&B``, magic,
version), then records in 32 KiB blocks, each ``<crc32 u32><length u16><type u8>`` + data, a record
split over blocks as FIRST / MIDDLE / LAST pieces. Every piece of data is a ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path) -> list[Any]:
    """Every complete record of one ``.wandb`` file, in order (a file a killed process left
    truncated yields the records before the cut)."""
    from wandb.proto import wandb_internal_pb2 as pb

    raw = Path(path).read_bytes()
    ident, _magic, _version = struct.unpack("<4sHB", raw[:HEADER])
    if ident != b":W&B":
        raise ValueError(f"{path} is not a W&B log")
    pos, out, pending = HEADER, [], b""
    while pos + HEADER <= len(raw):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos : pos + HEADER])
        if (kind == 0 and length == 0) or pos + HEADER + length > len(raw):
            break
        data = raw[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        pending = data if kind in (FULL, FIRST) else pending + data
        if kind in (FULL, LAST):
            rec = pb.Record()
            try:
                rec.ParseFromString(pending)
            except Exception:  # a damaged record: what follows cannot be trusted
                break
            out.append(rec)
    return out


def last_step(path: str | Path) -> int:
    """The highest history step in one ``.wandb`` file (``-1``: none, or the file is unreadable)."""
    try:
        recs = records(path)
    except (OSError, ValueError, struct.error):
        return -1
    return max((int(r.history.step.num) for r in recs if r.WhichOneof("record_type") == "history"), default=-1)


def _put(target: dict, item: Any) -> None:
    keys = list(item.nested_key) or [item.key]
    node = target
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = json.loads(item.value_json)


@dataclass
class OfflineRun:
    """What one offline run logged, decoded."""

    id: str = ""
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    notes: str = ""
    resumed: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    artifacts: list[tuple[str, str]] = field(default_factory=list)  # (type, name)
    metrics: dict[str, Any] = field(default_factory=dict)  # define_metric: name -> summary kinds


def read_run(path: str | Path) -> OfflineRun:
    """The run in one ``.wandb`` file (a directory: its only ``run-*.wandb``)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("run-*.wandb"))
        assert len(files) == 1, f"{p}: {files}"
        p = files[0]
    run = OfflineRun(id=p.stem.removeprefix("run-"))  # the file's name: a log a kill cut before its run record
    for rec in records(p):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            run.id, run.name, run.group, run.job_type = r.run_id, r.display_name, r.run_group, r.job_type
            run.tags, run.notes, run.resumed = list(r.tags), r.notes, r.resumed
            for item in r.config.update:
                _put(run.config, item)
        elif kind == "config":
            for item in rec.config.update:
                _put(run.config, item)
        elif kind == "summary":
            for item in rec.summary.update:
                _put(run.summary, item)
        elif kind == "history":
            row: dict[str, Any] = {}
            for item in rec.history.item:
                _put(row, item)
            run.history.append(row)
        elif kind == "exit":
            run.exit_code = rec.exit.exit_code
        elif kind == "artifact":
            run.artifacts.append((rec.artifact.type, rec.artifact.name))
        elif kind == "metric":
            m = rec.metric
            run.metrics[m.name or m.glob_name] = m.summary
    run.config.pop("_wandb", None)
    return run


def runs_under(root: str | Path) -> list[OfflineRun]:
    """Every offline run below ``root`` (each ``offline-run-*`` directory), in directory order."""
    return [read_run(d) for d in sorted(Path(root).rglob("offline-run-*")) if d.is_dir()]
