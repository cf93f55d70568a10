"""Pipeline stage 2, the mirror: the datacenter clusters copied into the offline cluster (the paper's
"embedded consumers" pulling from the live datacenters), at least once, with exact lineage.

- :mod:`mirror.service`: MirrorService, the consumers, the target producer and the commits.
- :mod:`mirror.tracker`: which source offsets may be committed (never past an unacknowledged record).
- :mod:`mirror.topics`: target topics created like their sources.
- :mod:`pipeline.lineage` (below the services: the ETL reads it too): the lineage headers and the lookup behind
  ``python -m mirror lineage``.
- :mod:`mirror.audit`, :mod:`mirror.metrics`: the tier-mirror AuditCount records, Prometheus metrics.
- :mod:`mirror.config`: the settings; ``python -m mirror --help-config`` lists them.
"""
