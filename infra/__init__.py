"""The deployment above the services: the demo topology (topology.yml) run under supervisord (`deployment`), its
Prometheus configuration and rules (`prometheus`), and the `status` and `chaos` subcommands it registers for
`python -m pipeline`."""
