"""The empirical NTK: kernels (`kernels`), the tracked metrics (`metrics`, registered), tracking
during training (`tracking`) and its cost plan (`plan`, JAX-free)."""
