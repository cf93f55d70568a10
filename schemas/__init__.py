"""The pipeline's Avro event schemas (stage 1 of the pipeline, the paper's section 5).

`schemas/avro/*.avsc` holds one file per named type: the EventHeader every event embeds, the activity
events (PageViewEvent, ClickEvent, SearchEvent, ProfileViewEvent, AdImpressionEvent), the operational
events (ServiceCallEvent, SystemMetricsEvent) and the audit's AuditCount, plus later versions of a type
as `<Name>.v<N>.avsc`. `schemas.events` loads them as self-contained schemas and names their topics and
registry subjects. `schemas.registry` is the schema registry service (`python -m schemas.registry`), with
the Confluent Schema Registry's REST API.
"""
