"""Placeholder for the mirror component of the pipeline; filled in by its own issue."""
