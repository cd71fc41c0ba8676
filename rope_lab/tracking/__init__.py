"""Live tracking of a sweep's trials in TensorBoard and Weights & Biases (`tracking:` block)."""
