"""Storage: one partition's log of segment files with sparse offset and time indexes."""
