"""Tests of the slurm/ scripts against a real single-node Slurm."""
