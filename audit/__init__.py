"""Placeholder for the audit component of the pipeline; filled in by its own issue."""
