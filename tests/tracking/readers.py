"""Reading back what the trackers wrote, with their own formats: TensorBoard's
`EventAccumulator`, and the records of a W&B offline `.wandb` file (a LevelDB-style log of
`wandb_internal_pb2.Record` protos; wandb ships no Python reader for it any more)."""

import json
import struct
import time
from pathlib import Path

BLOCK = 32 * 1024  # the log's block size
HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)  # ident, magic, version
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def tb_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of the scalars TensorBoard shows for one run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def tb_hparams(folder: Path) -> dict:
    """The hyperparameters of the hparams plugin's session-start summary of a run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(folder))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    data = plugin_data_pb2.HParamsPluginData.FromString(content)
    values = data.session_start_info.hparams
    return {k: getattr(v, v.WhichOneof("kind")) for k, v in values.items()}


def wandb_records(path: Path) -> list:
    """The records of one `.wandb` file, in order."""
    from wandb.proto import wandb_internal_pb2

    raw = path.read_bytes()
    assert raw[: len(HEADER)] == HEADER, raw[:7]
    out, pending, pos = [], b"", len(HEADER)
    while pos + 7 <= len(raw):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        data = raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            break
        pending = data if kind in (FULL, FIRST) else pending + data
        if kind in (FULL, LAST):
            out.append(wandb_internal_pb2.Record.FromString(pending))
    return out


def _finished_records(path: Path, timeout: float = 30.0) -> list:
    """The records of a `.wandb` file once its `exit` record is there: wandb's service writes
    them after `finish()` returns."""
    deadline = time.monotonic() + timeout
    while True:
        records = wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        assert time.monotonic() < deadline, f"{path}: no exit record after {timeout} s"
        time.sleep(0.1)


def wandb_runs(wandb_dir: Path) -> list[dict]:
    """Each offline run folder under `wandb_dir` (oldest first) as {id, group, name, project,
    config keys, history: [{key: value}] with `_step`}."""
    runs = []
    for path in sorted(wandb_dir.glob("wandb/offline-run-*/run-*.wandb")):
        run: dict = {"history": [], "config": {}}
        for record in _finished_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                r = record.run
                run |= {"id": r.run_id, "group": r.run_group, "name": r.display_name}
                run["project"] = r.project
                for item in r.config.update:
                    run["config"][item.key] = json.loads(item.value_json)
            elif kind == "history":
                row = {
                    "/".join(i.nested_key) or i.key: json.loads(i.value_json)
                    for i in record.history.item
                }
                run["history"].append(row)
        runs.append(run)
    return runs
