"""rope_lab: length-extrapolation sweeps for position encodings and RoPE scaling."""

__version__ = "0.1.0"
