"""Tests of rope_lab.reference_vectors."""
