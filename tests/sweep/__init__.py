"""Tests of rope_lab.sweep."""
