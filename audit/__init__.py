"""Pipeline stage 4, the audit (the paper's section 5): `audit.counting` is what every tier uses to count its
events and publish AuditCount records (with a sketch of their ids, `audit.sketch`); `audit.service` counts
what each cluster holds, collects the tiers' counts and reconciles every window (`audit.reconcile`)."""
