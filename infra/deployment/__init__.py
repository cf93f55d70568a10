"""The whole pipeline on one machine, under supervisord: `python -m infra.deployment up|down|clean|status|chaos`
(behind `make pipeline-up`, `make pipeline-down`, `make pipeline-clean` and `python -m pipeline status|chaos`)."""
