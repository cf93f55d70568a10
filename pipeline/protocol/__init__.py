"""The Apache Kafka wire protocol: API schemas declared as data, one codec, and the RecordBatch v2 format."""
