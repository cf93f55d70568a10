"""Prometheus for the pipeline: the scrape configuration generator (:mod:`.config`), the demo's targets
(:mod:`.topology`), the recording and alert rules (``rules/``) and their promtool unit tests (``tests/``).

``python -m infra.prometheus --out DIR --demo`` writes DIR/prometheus.yml for the demo topology; then
``prometheus --config.file DIR/prometheus.yml --storage.tsdb.path DIR/data``.
"""
