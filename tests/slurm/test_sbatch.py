"""slurm/ray_sweep.sbatch under a real single-node Slurm started by slurm/local_slurm.sh: the
job starts an authenticated Ray cluster, runs a tiny sweep on it, stops only its own Ray
processes and removes its token; a rerun skips the finished trials (what a requeue does).

Needs root (munged, slurmctld, slurmd) and Slurm or apt-get to install it; skipped otherwise,
except under CI=true, where a Slurm that cannot be started fails the test.
"""

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers import unavailable
from tests.sweep.test_cluster import clean_env, write_tiny_spec

pytestmark = [pytest.mark.slow, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "slurm" / "ray_sweep.sbatch"
LOCAL_SLURM = REPO / "slurm" / "local_slurm.sh"
VENV = Path(sys.executable).parent.parent
CPUS = min(2, os.cpu_count() or 1)


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: slurm/local_slurm.sh starts munged, slurmctld and slurmd"
    tools = ("sbatch", "slurmctld", "slurmd", "munged")
    if not all(shutil.which(t) for t in tools) and not shutil.which("apt-get"):
        return "Slurm is not installed and apt-get is not available to install it"
    return None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A running single-node Slurm; yields the environment for sbatch (SLURM_CONF set)."""
    reason = skip_reason()
    if reason:
        print(f"\nSKIPPED: {reason}")
        unavailable(reason)
    folder = tmp_path_factory.mktemp("slurm")
    start = time.perf_counter()
    up = subprocess.run(
        ["bash", str(LOCAL_SLURM), "start", str(folder)],
        # MinJobAge=10: `sbatch --wait` polls every 8 s instead of backing off to 32 s
        env={**os.environ, "LOCAL_SLURM_CONF_EXTRA": "MinJobAge=10"},
        capture_output=True,
        text=True,
        timeout=900,  # the first run installs the packages
    )
    assert up.returncode == 0, f"local Slurm did not start:\n{up.stdout}\n{up.stderr}"
    print(f"\nlocal Slurm up in {time.perf_counter() - start:.1f}s")
    try:
        yield clean_env(SLURM_CONF=str(folder / "slurm.conf"))
    finally:
        subprocess.run(["bash", str(LOCAL_SLURM), "stop", str(folder)], timeout=120, check=False)


def sbatch(env: dict[str, str], folder: Path, out: Path, launch: str) -> tuple[int, str, str]:
    """`sbatch --wait` the script on the tiny spec on one node; (exit status, job id, job log)."""
    job_env = {
        **env,
        "SPEC": str(write_tiny_spec(folder)),
        "OUT": str(out),
        "VENV": str(VENV),
        "RAY_LAUNCH": launch,
        "RAY_JOB_DIR": str(folder / f"job_{launch}"),
    }
    options = [f"--output={folder}/job-%j.out"]
    start = time.perf_counter()
    r = subprocess.run(
        ["sbatch", "--wait", "--nodes=1", f"--cpus-per-task={CPUS}", *options, str(SCRIPT)],
        env=job_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    match = re.search(r"Submitted batch job (\d+)", r.stdout)
    assert match, f"sbatch did not submit:\n{r.stdout}\n{r.stderr}"
    job = match.group(1)
    log = (folder / f"job-{job}.out").read_text()
    seconds = time.perf_counter() - start
    print(f"sbatch --wait ({launch}, job {job}): {seconds:.1f}s, exit status {r.returncode}")
    return r.returncode, job, log


def leftover(job: str) -> list[str]:
    """Processes of the job's Ray cluster still alive on this machine."""
    found = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.environ().get("ROPE_LAB_RAY_CLUSTER") == f"slurm-{job}":
                found.append(f"{p.pid} {p.info['name']}")
        except (psutil.Error, OSError):
            pass
    return found


def other_ray_processes() -> list[psutil.Process]:
    """Processes of Ray instances running on this machine, found the way `ray symmetric-run`
    looks for one: a process with a --gcs-address argument."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(a.startswith("--gcs-address") for a in p.info["cmdline"] or ()):
            found.append(p)
    return found


def no_other_ray(timeout: float = 60.0) -> list[str]:
    """Make "no Ray instance runs on this machine" true where this test run can: wait for Ray
    instances that are shutting down, then stop those started by this pytest process (its
    descendants). Returns the instances still running, which belong to someone else."""
    me = psutil.Process()
    mine = {p.pid for p in me.children(recursive=True)}
    deadline = time.monotonic() + timeout
    while (others := other_ray_processes()) and time.monotonic() < deadline:
        for p in others:
            if p.pid in mine:
                with contextlib.suppress(psutil.Error):
                    p.terminate()
        time.sleep(1.0)
    return [f"{p.pid} {' '.join(p.info['cmdline'] or ())[:120]}" for p in other_ray_processes()]


def check_finished(rc: int, job: str, log: str, out: Path, folder: Path, launch: str) -> None:
    assert rc == 0, log[-6000:]
    assert f"{launch} launch" in log, log[-3000:]
    finished = sorted((out / "cluster_tiny" / "trials").glob("*/_SUCCESS"))
    assert len(finished) == 2, log[-6000:]
    assert not (folder / f"job_{launch}").exists(), "the job left its token behind"
    assert not leftover(job), f"Ray processes of job {job} still run: {leftover(job)}"
    assert not Path(f"/tmp/ray_{job}").exists(), "the job left its Ray temp dir behind"


def test_sbatch_manual_launch_then_rerun_skips(slurm: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "runs"
    rc, job, log = sbatch(slurm, tmp_path, out, "manual")
    check_finished(rc, job, log, out, tmp_path, "manual")
    assert "2 done" in log, log[-3000:]

    # What a requeue after preemption does: the same job again; finished trials are skipped.
    rc, job, log = sbatch(slurm, tmp_path, out, "manual")
    check_finished(rc, job, log, out, tmp_path, "manual")
    assert "2 skipped (already finished)" in log, log[-3000:]


def test_sbatch_symmetric_run(slurm: dict[str, str], tmp_path: Path) -> None:
    # `ray symmetric-run` refuses to start where any Ray instance already runs on the node.
    others = no_other_ray()
    if others:
        reason = f"Ray instances not started by this test run are running: {others}"
        print(f"\nSKIPPED: {reason}")
        unavailable(reason)
    out = tmp_path / "runs"
    rc, job, log = sbatch(slurm, tmp_path, out, "symmetric")
    check_finished(rc, job, log, out, tmp_path, "symmetric")
    assert "Head node started" in log, log[-3000:]
