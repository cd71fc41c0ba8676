"""One trial: training (`train`, `objective`), evaluation by length (`evaluate`, `finetune`), the
stage and scaling plans (`stage_plan`, `scaling_plan`, JAX-free), checkpoints, decode
evaluation, and the `pipeline` that runs a trial's stages (JAX-free; what each stage computes
is `stage_work`; `run.run_trial` in this process)."""
