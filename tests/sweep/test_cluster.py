"""A two-node Ray cluster on this machine with token authentication: `rope-lab sweep run
--address` runs a sweep on both nodes, and a node without the cluster's token is refused.

Both nodes are `ray start --block` processes with RAY_AUTH_MODE=token and one generated token
shared through RAY_AUTH_TOKEN_PATH (as slurm/ray_sweep.sbatch does). Ray picks this machine's own
address for both; no traffic leaves the machine. Teardown stops only this test's Ray processes:
`ray stop` would stop every Ray instance on the machine, including other test runs'.
"""

import contextlib
import copy
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import yaml

from rope_lab.trial.placement import placed_call

pytestmark = [pytest.mark.slow, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the virtualenv's bin: ray, rope-lab
MARK = "ROPE_LAB_TEST_RAY_CLUSTER"  # in the environment of every Ray process this test starts
REFUSED = "InvalidAuthToken"


def write_tiny_spec(folder: Path, name: str = "cluster_tiny") -> Path:
    """sweeps/smoke.yaml cut to two cheap trials: width 32, alibi and none, 30 steps."""
    spec = yaml.safe_load((REPO / "sweeps" / "smoke.yaml").read_text())
    base = copy.deepcopy(spec["base"])
    base["model"]["width"] = 32
    base["train"].update(steps=30, warmup_steps=5, log_every=10)
    base["eval"]["length_multipliers"] = [1, 2]
    base["ntk"] = {"enabled": False}
    tiny = {
        "name": name,
        "description": "two tiny trials for cluster tests",
        "base": base,
        "grid": {"model.position.kind": ["alibi", "none"]},
        "resources": {"num_cpus": 1, "num_gpus": 0},
        "max_retries": 0,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any RAY_* variable, the virtualenv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def marked(mark: str) -> list[psutil.Process]:
    """Processes whose environment carries this test's mark."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARK) == mark:
                found.append(p)
        except (psutil.Error, OSError):
            pass
    return found


@dataclass
class Cluster:
    root: Path  # short: Ray puts unix sockets under each node's --temp-dir
    env: dict[str, str]  # token auth on, this cluster's token
    address: str = ""
    nodes: list[subprocess.Popen] = field(default_factory=list)

    def start_node(self, name: str, *args: str) -> None:
        log = open(self.root / f"{name}.log", "w")  # noqa: SIM115 (the node outlives this call)
        cmd = [str(BIN / "ray"), "start", "--block", *args, f"--temp-dir={self.root / name}"]
        cmd += ["--num-cpus=1", "--object-store-memory=100000000", "--disable-usage-stats"]
        cmd += [f"--dashboard-agent-listen-port={free_port()}"]
        self.nodes.append(
            subprocess.Popen(
                cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        )

    def alive_nodes(self) -> int:
        """Alive nodes as the GCS sees them, asked from a separate driver process (0 if down)."""
        probe = (
            "import sys, ray\n"
            "ray.init(address=sys.argv[1], log_to_driver=False, logging_level='error')\n"
            "print(sum(n['Alive'] for n in ray.nodes()))\n"
        )
        r = subprocess.run(
            [sys.executable, "-c", probe, self.address],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = r.stdout.split()
        return int(lines[-1]) if r.returncode == 0 and lines else 0

    def wait_for_nodes(self, want: int, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_nodes() >= want:
                return
            dead = [n.args for n in self.nodes if n.poll() is not None]
            assert not dead, f"a Ray node exited: {dead}\n{self.logs()}"
            time.sleep(1)
        pytest.fail(f"fewer than {want} Ray nodes after {timeout:.0f}s\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.root.glob("*.log"))

    def stop(self) -> None:
        """SIGTERM to each `ray start --block` (it stops its node's processes), workers first;
        then SIGKILL whatever of this test's processes is left."""
        for node in reversed(self.nodes):
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
        for node in reversed(self.nodes):
            try:
                node.wait(timeout=30)
            except subprocess.TimeoutExpired:
                node.kill()
        for p in marked(str(self.root)):
            with contextlib.suppress(psutil.Error):
                p.kill()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """Head plus one worker, one CPU each, token authentication on."""
    root = Path(tempfile.mkdtemp(prefix="rlc_", dir="/tmp"))
    gen_home = root / "gen_home"  # an empty HOME: --generate makes a new token, ~/.ray untouched
    gen_home.mkdir()
    generated = subprocess.run(
        [str(BIN / "ray"), "get-auth-token", "--generate"],
        env=clean_env(HOME=str(gen_home)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert len(generated) >= 32, "ray get-auth-token printed no token"
    token = root / "token"
    with os.fdopen(os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(generated)
    (gen_home / ".ray" / "auth_token").unlink()
    home = root / "home"
    home.mkdir()
    env = clean_env(
        HOME=str(home), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), **{MARK: str(root)}
    )
    c = Cluster(root, env)
    try:
        import ray.util

        port = free_port()
        c.address = f"{ray.util.get_node_ip_address()}:{port}"
        c.start_node(
            "head",
            "--head",
            f"--port={port}",
            "--include-dashboard=false",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={free_port()}",
            f"--ray-client-server-port={free_port()}",
        )
        c.wait_for_nodes(1)
        c.start_node("worker", f"--address={c.address}")
        c.wait_for_nodes(2)
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def refused_join(c: Cluster, name: str, **env: str) -> subprocess.Popen:
    """`ray start --address` of a third node with `env` instead of the cluster's token."""
    home = c.root / f"{name}_home"
    home.mkdir()
    return subprocess.Popen(
        [
            str(BIN / "ray"),
            "start",
            f"--address={c.address}",
            "--num-cpus=1",
            f"--temp-dir={c.root / name}",
            "--disable-usage-stats",
        ],
        env=clean_env(HOME=str(home), **{MARK: str(c.root)}, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def ran_tasks(node_temp_dir: Path) -> bool:
    """Whether a Ray worker on this node ran a sweep stage (worker logs name their tasks: the
    function the runner submits, `placement.placed_call`)."""
    logs = node_temp_dir.glob("session_*/logs/worker-*.out")
    name = f":task_name:{placed_call.__name__}"
    return any(name in p.read_text(errors="replace") for p in logs)


def test_sweep_runs_on_two_authenticated_nodes(cluster: Cluster, tmp_path: Path) -> None:
    spec = write_tiny_spec(tmp_path)
    out = tmp_path / "runs"
    start = time.perf_counter()
    # Two nodes try to join while the sweep runs: one without any token, one with a wrong one.
    wrong = tmp_path / "wrong_token"
    wrong.write_text("0" * 64)
    wrong.chmod(0o600)
    intruders = {
        "no token": refused_join(cluster, "no_token"),
        "wrong token": refused_join(
            cluster, "wrong_token", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(wrong)
        ),
    }
    command = ["sweep", "run", str(spec), "--address", cluster.address, "--out", str(out)]
    sweep = subprocess.run(
        [str(BIN / "rope-lab"), *command],
        env=cluster.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(f"\nsweep on the 2-node cluster: {time.perf_counter() - start:.1f}s")
    assert sweep.returncode == 0, f"{sweep.stdout}\n{sweep.stderr}\n{cluster.logs()}"
    assert "2 done" in sweep.stdout, sweep.stdout
    finished = sorted((out / "cluster_tiny" / "trials").glob("*/_SUCCESS"))
    assert len(finished) == 2, finished

    # The two one-CPU trials ran at the same time, one on each node.
    assert ran_tasks(cluster.root / "head"), "no sweep task ran on the head node"
    assert ran_tasks(cluster.root / "worker"), "no sweep task ran on the worker node"

    for what, proc in intruders.items():
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode != 0, f"a node with {what} joined the cluster:\n{output}"
        assert REFUSED in output, f"{what}: not refused for its token:\n{output[-2000:]}"
    assert cluster.alive_nodes() == 2
