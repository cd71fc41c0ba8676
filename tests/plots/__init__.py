"""Tests of rope_lab.plots."""
