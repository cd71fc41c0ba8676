"""One trial: training (`train`, `objective`), evaluation by length (`evaluate`), the stage and
scaling plans (`stage_plan`, `scaling_plan`, JAX-free), checkpoints, decode evaluation, and the
`pipeline` that runs a trial's stages (`run.run_trial` in this process)."""
