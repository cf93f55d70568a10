"""Frontend emulators: N frontend servers of one datacenter publishing activity and operational events.

The event model is pure and deterministic (`producers.workload.Workload`, drawing on the site tables of
`producers.catalog`, the distributions of `producers.sampling`, the search and ad tables of
`producers.vocabulary`, the backend-call model of `producers.servicecalls` and the host model of
`producers.hosts`); the emulator around it encodes the events in Avro with their registered schema ids,
publishes them through our Producer at a target rate, and audits what the brokers acknowledged.
"""
