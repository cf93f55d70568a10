"""Documents generated from the code: ``docs/operations.md`` (ports, processes, settings, metrics).

``python -m infra.docs`` (``make docs``) writes them; ``python -m infra.docs --check`` says whether they are
current. infra sits above every service, so it may read their settings tables and metric definitions.
"""
