"""The service skeleton every ``python -m <service>`` shares: the runner (subcommands, settings, logging, signals,
exit codes), the settings options, the process set-up and the /metrics server."""

from pipeline.service.metrics_server import MetricsServer, serve_metrics, serving_metrics
from pipeline.service.process import LOG_FORMAT, OWNER_ONLY_UMASK, log_to_stderr, write_owner_only
from pipeline.service.runner import (EXIT_BAD_SETTINGS, EXIT_FAILED, EXIT_OK, RUN, Service, command_line, fail, main,
                                     parse, run_asyncio, run_threaded)
from pipeline.service.settings import LOG_LEVEL, add_settings_options, settings_values
from pipeline.service.signals import stop_on_signals, stop_on_signals_async

__all__ = ["EXIT_BAD_SETTINGS", "EXIT_FAILED", "EXIT_OK", "LOG_FORMAT", "LOG_LEVEL", "MetricsServer",
           "OWNER_ONLY_UMASK", "RUN", "Service", "add_settings_options", "command_line", "fail", "log_to_stderr", "main", "parse",
           "run_asyncio", "run_threaded", "serve_metrics", "serving_metrics", "settings_values", "stop_on_signals",
           "stop_on_signals_async", "write_owner_only"]
