"""Pipeline stage 4, the audit service (the paper's section 5): `audit.service` counts what each cluster holds,
collects the AuditCount records every tier publishes with the client library `pipeline.auditing` (counts, and a
sketch of their ids) and reconciles every window (`audit.reconcile`)."""
