"""What an offline W&B run folder (``wandb/offline-run-*/run-<id>.wandb``) holds, read back for the tests: the run
(id, name, group, job type, tags), its config, its history rows and its summary.

The file is a LevelDB-style log (a 7-byte header, then 32 KiB blocks of records, each a 7-byte header: CRC, length,
type: full, first, middle or last) of W&B's protobuf ``Record`` messages (``wandb.proto.wandb_internal_pb2``)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

BLOCK = 32768
HEADER = 7  # the file's, then each record's


def _chunks(data: bytes):
    """The records of ``data`` up to the last one written whole (a file read while W&B writes it ends mid-record: a
    test read one so and failed to parse it)."""
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # a block's tail too short for a record header: zero padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if pos + HEADER + length > len(data):  # W&B's service is still writing this record: the rest comes later
            break
        chunk, pos = data[pos + HEADER:pos + HEADER + length], pos + HEADER + length
        if kind == 0 and length == 0:
            break
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
            pending = b""


def _items(items) -> dict:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


def read_run(path: Path) -> dict:
    """``{"run": {id, name, group, job_type, tags, project}, "config": {...}, "history": [{...}], "summary": {...},
    "exit_code": ...}`` of one ``.wandb`` file (``exit_code``: None until the run's end is written; the config keys as
    W&B keeps them: the top-level ones, nested values as dicts)."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = {"run": None, "config": {}, "history": [], "summary": {}, "exit_code": None}
    for chunk in _chunks(Path(path).read_bytes()):
        record = pb.Record()
        record.ParseFromString(chunk)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            out["run"] = {"id": run.run_id, "name": run.display_name, "group": run.run_group,
                          "job_type": run.job_type, "tags": list(run.tags), "project": run.project}
            out["config"].update(_items(run.config.update))
        elif kind == "config":
            out["config"].update(_items(record.config.update))
        elif kind == "history":
            out["history"].append(_items(record.history.item))
        elif kind == "summary":
            out["summary"].update(_items(record.summary.update))
        elif kind == "exit":
            out["exit_code"] = record.exit.exit_code
    return out


def offline_runs(folder: Path, wait_s: float = 60.0) -> list[dict]:
    """:func:`read_run` of every offline W&B run under ``folder``, oldest first, each once it holds its exit record:
    ``wandb.finish`` returns before W&B's service process has written the file (found holding its header alone)."""
    out = []
    for path in sorted(Path(folder).rglob("offline-run-*/run-*.wandb")):
        deadline = time.monotonic() + wait_s
        while (run := read_run(path))["exit_code"] is None and time.monotonic() < deadline:
            time.sleep(0.2)
        out.append(run)
    return out


def logged(run: dict, metric: str) -> list[tuple[int, float]]:
    """(``trainer/global_step``, value) of each history row of ``run`` that holds ``metric``."""
    return [(int(row.get("trainer/global_step", -1)), row[metric]) for row in run["history"] if metric in row]
