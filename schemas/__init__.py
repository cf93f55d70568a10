"""Placeholder for the schemas component of the pipeline; filled in by its own issue."""
