"""Tests of the research studies under ``research/`` (imported as ``research.<name>``)."""
