"""XLA compiler options for programs that run only a few times per trial.

Evaluation and NTK probe sampling are compiled once per trial and called a handful of times, so
their compile time is what counts. LLVM at -O1 instead of the default -O2
compiles them faster at the same speed per call; the training step and the NTK gradient
program run slower per step at -O1, so those two keep the default. Model initialisation stays
eager: its small per-op programs are shared by every later trial of a worker process, which one
jitted program per config is not. The measurements (smoke trials on a 2-core CPU):
benchmarks/RESULTS.md, "Figures moved from rope_lab's docstrings".
"""

FEW_CALLS: dict[str, int] = {"xla_backend_optimization_level": 1}
