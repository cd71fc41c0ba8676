"""Tests of rope_lab.analysis.plots."""
