"""Placeholder for the producers component of the pipeline; filled in by its own issue."""
