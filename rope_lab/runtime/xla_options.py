"""XLA compiler options for programs that run only a few times per trial.

Evaluation and NTK probe sampling are compiled once per trial and called a handful of times, so
their compile time is what counts. LLVM at -O1 instead of the default -O2
compiles them about 25% faster at the same speed per call (smoke trial, quiet 2-core CPU: eval
forward 1.58 -> 1.23 s, 6.3 vs 5.6 ms per call; the training step 3.5 -> 2.6 s but 11% slower
per step, and the NTK gradient program 17% slower, so those two keep the default). Model
initialisation stays eager: its small per-op programs are shared by every later trial of a
worker process, which one jitted program per config is not (4 smoke trials in one process:
51.4 s of compilation eager, 54.0 s jitted).
"""

FEW_CALLS: dict[str, int] = {"xla_backend_optimization_level": 1}
