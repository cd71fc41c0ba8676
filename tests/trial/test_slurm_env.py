"""A Slurm task's rank, task count and coordinator, and (slow) the `--from-slurm` worker path run
as two local tasks with the variables `srun` would set.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from rope_lab.config import ConfigError, replace, to_dict
from rope_lab.results import read_trial_table, trial_dir
from rope_lab.trial.slurm_env import SlurmTask, expand_nodelist, slurm_task
from tests.helpers import tiny_trial

ROOT = Path(__file__).resolve().parents[2]


def test_nodelist_expands_in_order_with_padding() -> None:
    assert expand_nodelist("node[01-03,07]") == ["node01", "node02", "node03", "node07"]
    assert expand_nodelist("gpu5,node[9-11],login") == [
        "gpu5",
        "node9",
        "node10",
        "node11",
        "login",
    ]
    assert expand_nodelist("r[1-2]-n[08-09]") == ["r1-n08", "r1-n09", "r2-n08", "r2-n09"]
    assert expand_nodelist("localhost") == ["localhost"]
    for bad, why in (
        ("node[01-03", "unbalanced brackets in 'node\\[01-03'"),
        ("node[3-1]", "bad range '3-1' in 'node\\[3-1\\]'"),
        ("node[a]", "bad range 'a'"),
        (" ", "empty"),
    ):
        with pytest.raises(ConfigError, match=rf"^SLURM_JOB_NODELIST: {why}"):
            expand_nodelist(bad)


def test_task_from_srun_variables() -> None:
    env = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "node[01-03,07]"}
    assert slurm_task({**env, "SLURM_JOB_ID": "123456"}) == SlurmTask(2, 4, "node01:33456")
    assert slurm_task({**env, "ROPE_LAB_COORDINATOR_PORT": "4000"}).coordinator == "node01:4000"
    with pytest.raises(ConfigError, match=r"^SLURM_PROCID: 4 is not below SLURM_NTASKS 4$"):
        slurm_task({**env, "SLURM_PROCID": "4", "SLURM_JOB_ID": "1"})
    with pytest.raises(ConfigError, match=r"^SLURM_NTASKS: not set \(run under srun\)$"):
        slurm_task({"SLURM_PROCID": "0"})
    with pytest.raises(ConfigError, match=r"^SLURM_JOB_ID: not a number: 'x'$"):
        slurm_task({**env, "SLURM_JOB_ID": "x"})
    with pytest.raises(ConfigError, match=r"^ROPE_LAB_COORDINATOR_PORT: not a port number: 0$"):
        slurm_task({**env, "ROPE_LAB_COORDINATOR_PORT": "0"})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_two_srun_like_tasks_train_the_trial(tmp_path: Path) -> None:
    """Two `--from-slurm` tasks on localhost (SLURM_PROCID 0 and 1): task 0 records the train
    stage done, with the losses of one process (rtol 1e-5); a task count other than
    `train.processes` is one line naming both."""
    from rope_lab.trial.pipeline import run_train_stage

    base = tiny_trial("rope", steps=12, checkpoint_every=6)
    cfg = replace(base, **{"ntk.enabled": False, "train.log_every": 1, "train.processes": 2})
    trial_file = tmp_path / "trial.yaml"
    trial_file.write_text(yaml.safe_dump(to_dict(cfg)))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ROPE_LAB_COMPILE_CACHE": "0",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NODELIST": "localhost",
        "ROPE_LAB_COORDINATOR_PORT": str(_free_port()),
    }
    argv = [sys.executable, "-m", "rope_lab.trial.processes", "--from-slurm", str(trial_file)]
    tasks = [
        subprocess.Popen(
            [*argv, str(tmp_path / "run")],
            env={**env, "SLURM_PROCID": str(k)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    outs = [t.communicate(timeout=300) for t in tasks]
    assert [t.returncode for t in tasks] == [0, 0], [o[0][-3000:] + o[1][-3000:] for o in outs]
    assert json.loads(outs[0][0].splitlines()[-1]) == {"status": "done", "error": None}
    folder = trial_dir(tmp_path / "run", cfg.trial_id)
    done = json.loads((folder / "stages" / "train" / "done.json").read_text())
    assert (done["status"], done["tokens_seen"]) == ("done", 12 * 8 * 16)
    two = read_trial_table(folder, "train").sort("step")["loss"].to_numpy()
    one_cfg = replace(cfg, **{"train.processes": 1})
    assert run_train_stage(to_dict(one_cfg), tmp_path / "one")["status"] == "done"
    one = read_trial_table(trial_dir(tmp_path / "one", cfg.trial_id), "train").sort("step")
    np.testing.assert_allclose(two, one["loss"].to_numpy(), rtol=1e-5)

    wrong = subprocess.run(
        [*argv, str(tmp_path / "other")],
        env={**env, "SLURM_PROCID": "0", "SLURM_NTASKS": "3"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode == 1
    assert wrong.stderr == (
        f"rope-lab: error: train.processes: 2 in {trial_file} but SLURM_NTASKS is 3\n"
    )
