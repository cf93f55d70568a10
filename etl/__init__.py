"""Pipeline stage 3: Spark jobs that load the offline cluster's topics into a Parquet warehouse, exactly once."""
