"""Prometheus for the pipeline: the scrape configuration generator (:mod:`.config`), the recording and alert
rules (``rules/``) and their promtool unit tests (``tests/``). The deployment (:mod:`infra.deployment`) writes
``var/prometheus/prometheus.yml`` for its processes with :func:`.config.write`; ``python -m infra.prometheus
--out DIR --target JOB=HOST:PORT`` writes one for targets given by hand.
"""
