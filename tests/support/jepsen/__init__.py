"""Jepsen-style testing of acknowledged writes under broker failures.

``history``: what producers sent and got acknowledged and what consumers read; ``checker``: the
anomalies in a history against the partitions' final logs; ``clients``: the producers and consumers
that write and read a history; ``nemesis``: bounces a partition's leader; ``workload``: runs them
together and reads the final logs.
"""
