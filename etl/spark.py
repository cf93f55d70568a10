"""The SparkSession of a run: the master and ``spark.*`` settings of the configuration, the project's code shipped.

On a local master (not under spark-submit) the executors' Python workers are children of the driver's JVM
and find the project through ``PYTHONPATH`` (set here for them); on a cluster master or under spark-submit
the project's packages are zipped and shipped with ``addPyFile`` (and spark-submit's ``--master`` wins).
The Spark UI and its console progress bar are off unless set (``spark.ui.enabled=true``), timestamps are
written as Parquet INT64 microseconds (readable by pyarrow and every engine), the session's time zone is UTC,
and what Spark writes (the warehouse's staging) is owner-only (Hadoop's ``fs.permissions.umask-mode`` 077).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Mapping

from pyspark.sql import SparkSession

from etl.config import EtlConfig

__all__ = ["APP_NAME", "PROJECT_PACKAGES", "build_session", "project_zip", "spark_session", "stop_session"]

APP_NAME = "kafka-etl"
#: The packages a task imports (directly or through the others).
PROJECT_PACKAGES = ("etl", "pipeline", "schemas")
PROJECT_ROOT = Path(__file__).resolve().parent.parent

log = logging.getLogger(__name__)

_DEFAULTS = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
             "spark.sql.session.timeZone": "UTC", "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
             "spark.sql.sources.partitionColumnTypeInference.enabled": "true",
             "spark.hadoop.fs.permissions.umask-mode": "077",
             # A task writes the few date/hour directories of its range at once instead of sorting its rows by
             # them first (measured: about half the load time; past 16 directories Spark falls back to sorting).
             "spark.sql.maxConcurrentOutputFileWriters": "16"}


def project_zip(directory: Path) -> Path:
    """A zip of the project's packages (their ``.py`` and ``.avsc`` files) in ``directory``."""
    path = directory / "kafka-etl-project.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in PROJECT_PACKAGES:
            for file in sorted((PROJECT_ROOT / package).rglob("*")):
                if file.suffix in (".py", ".avsc") and "__pycache__" not in file.parts:
                    archive.write(file, file.relative_to(PROJECT_ROOT))
    return path


def build_session(config: EtlConfig) -> SparkSession:
    """A SparkSession (new, or the running one) for ``config``'s master and Spark settings."""
    return spark_session(config["spark.master"], config.spark_settings)


def spark_session(master: str, spark_settings: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession (new, or the running one) on ``master`` with ``spark_settings`` over the defaults."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    local = master.startswith("local") and not submitted
    if local:
        # The workers run the driver's interpreter (PySpark reads PYSPARK_PYTHON, not spark.pyspark.python).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(PROJECT_ROOT) not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *paths])
    log.info("starting Spark (master %s)", "of spark-submit" if submitted else master)
    builder = SparkSession.builder.appName(APP_NAME)
    if not submitted:
        # Under spark-submit its --master (already in the JVM's configuration) decides.
        builder = builder.master(master)
    settings = {**_DEFAULTS, "spark.pyspark.python": sys.executable, **(spark_settings or {})}
    for name, value in settings.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    if submitted or not session.sparkContext.master.startswith("local"):
        directory = Path(tempfile.mkdtemp(prefix="kafka-etl-"))
        atexit.register(shutil.rmtree, directory, True)
        session.sparkContext.addPyFile(str(project_zip(directory)))
    return session


def stop_session(session: SparkSession, timeout_s: float = 30.0) -> None:
    """Stop ``session`` and the JVM this process started for it (PySpark otherwise keeps the JVM until the
    Python process exits); under spark-submit the JVM is spark-submit's and is left alone."""
    from pyspark import SparkContext

    session.stop()
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None:
        return
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    # PySpark's gateway JVM exits when its standard input (a pipe from this process) closes.
    process.stdin.close()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
