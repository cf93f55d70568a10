"""Placeholder for the etl component of the pipeline; filled in by its own issue."""
