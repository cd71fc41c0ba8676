"""Mutation testing of rope_lab's numerics and IO modules with mutmut.

For each module this copies the checkout to a scratch folder, configures mutmut there to mutate
that module only and to run the default-suite test files that cover it, runs `mutmut run`, and
counts the mutants by outcome. The checkout itself is never modified. Each mutant's tests run in
a process forked from a server that has imported nothing of the tests: forked from a process
that already ran polars or XLA, their thread pools deadlock.

    .venv/bin/python tests/mutation/run_mutmut.py                       # every module
    .venv/bin/python tests/mutation/run_mutmut.py rope_lab/runtime/atomic.py    # some
    .venv/bin/python tests/mutation/run_mutmut.py --keep DIR ...        # keep the scratch copies

Score = killed / (killed + survived); mutants that time out (an edit that makes a loop or a
compilation hang) and mutants no selected test reaches are listed apart. Too slow for CI:
minutes for a small module, an hour or more for the largest. `mutmut results` and
`mutmut show NAME` inside a kept copy list and show the survivors.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from known_defects import scratch_copy

_POSITION_TESTS = (
    "tests/model/positions/test_positions.py",
    "tests/model/positions/test_position_laws.py",
)
_SCALING_TESTS = (
    "tests/model/test_rope.py",
    "tests/model/scalings",
    "tests/model/positions/test_position_laws.py",
)
_RESULTS_TESTS = ("tests/results/test_results.py", "tests/runtime/test_atomic.py")
MODULES = {
    "rope_lab/runtime/atomic.py": ("tests/runtime/test_atomic.py", "tests/results/test_results.py"),
    **{f"rope_lab/results/{m}.py": _RESULTS_TESTS for m in ("columns", "store", "lease", "scan")},
    "rope_lab/ntk/metrics.py": ("tests/ntk/test_metrics.py", "tests/ntk/test_columns.py"),
    "rope_lab/model/rope.py": _SCALING_TESTS,
    **{
        f"rope_lab/model/scalings/{m}.py": _SCALING_TESTS
        for m in ("base", "yarn", "ntk_by_parts", "dynamic_yarn", "llama3", "longrope")
    },
    "rope_lab/model/rotation.py": _POSITION_TESTS,
    **{
        f"rope_lab/model/positions/{where}{m}.py": _POSITION_TESTS
        for m in ("alibi", "rotary", "learned")
        for where in ("", "modules/")
    },
    **{
        f"rope_lab/model/positions/{where}kerple.py": ("tests/model/positions/test_kerple.py",)
        for where in ("", "modules/")
    },
    "rope_lab/trial/train.py": ("tests/trial/test_train.py",),
    "rope_lab/trial/optimizer.py": ("tests/trial/test_train.py", "tests/model/test_transformer.py"),
    "rope_lab/trial/objective.py": ("tests/trial/test_objective.py", "tests/trial/test_train.py"),
    "rope_lab/trial/evaluate.py": ("tests/trial/test_evaluate.py",),
    "rope_lab/trial/finetune.py": ("tests/trial/test_evaluate.py",),
    "rope_lab/ntk/kernels.py": ("tests/ntk/test_kernels.py", "tests/ntk/test_columns.py"),
    "rope_lab/ntk/tracking.py": ("tests/ntk/test_tracking.py", "tests/ntk/test_columns.py"),
}

CONFIG = """
[tool.mutmut]
source_paths = ["rope_lab/"]
only_mutate = [{module!r}]
pytest_add_cli_args_test_selection = {tests!r}
pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-x"]
process_isolation = "forkserver"
forkserver_warmup = "none"
"""

OUTCOME = re.compile(r"^\s*(\S+__mutmut_\d+): (.+)$")


def mutate(module: str, tests: tuple[str, ...], root: Path, timeout: float) -> Counter:
    """Run mutmut on `module` in a scratch copy at `root`; counts of mutants by outcome."""
    scratch_copy(root)
    with open(root / "pyproject.toml", "a") as f:
        f.write(CONFIG.format(module=module, tests=list(tests)))
    mutmut = Path(sys.executable).with_name("mutmut")
    log = root / "mutmut.log"
    with open(log, "w") as out:
        try:
            subprocess.run(
                [str(mutmut), "run", "--max-children", "1"],
                cwd=root,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            out.write(f"\nmutmut run stopped after {timeout:.0f} s\n")
    listing = subprocess.run(
        [str(mutmut), "results", "--all", "true"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    counts: Counter = Counter()
    for line in listing.splitlines():
        match = OUTCOME.match(line)
        if match:
            counts[match.group(2).strip()] += 1
    return counts


def score_line(module: str, counts: Counter, seconds: float) -> str:
    """One markdown table row: module, killed, survived, timeout, no tests, other, score."""
    killed, survived = counts["killed"], counts["survived"]
    known = killed + survived + counts["timeout"] + counts["no tests"]
    other = sum(counts.values()) - known
    score = f"{killed / (killed + survived):.0%}" if killed + survived else "n/a"
    return (
        f"| {module} | {killed} | {survived} | {counts['timeout']} | {counts['no tests']} "
        f"| {other} | {score} | {seconds / 60:.0f} min |"
    )


def main(argv: list[str] | None = None) -> int:
    """Mutate the named modules (all by default) and print a markdown table of scores."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"default: {' '.join(MODULES)}")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per module")
    parser.add_argument("--keep", type=Path, help="keep the scratch copies under this folder")
    parser.add_argument("--tests", nargs="+", help="test files to run instead of the module's")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}")
    print("| module | killed | survived | timeout | no tests | other | score | time |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for module in args.modules or MODULES:
        with tempfile.TemporaryDirectory(prefix="mutmut_") as tmp:
            parent = args.keep or Path(tmp)
            root = parent / Path(module).stem
            start = time.perf_counter()
            tests = tuple(args.tests) if args.tests else MODULES[module]
            counts = mutate(module, tests, root, args.timeout)
            print(score_line(module, counts, time.perf_counter() - start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
