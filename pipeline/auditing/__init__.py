"""The audit's client library, which every tier uses (the emulators, the mirror, the ETL) and the audit service reads:
counting a tier's events per topic and window (`counting`), a sketch of their ids (`sketch`), their latency
(`latency`), and publishing the resulting AuditCount records (`publisher`). It sits below the services, as
Chaperone's client library sits apart from its service (`audit`)."""
