"""The audit: `audit.counting` is what every tier uses to count its events and publish AuditCount records;
the audit service that reconciles the tiers comes with its own issue."""
