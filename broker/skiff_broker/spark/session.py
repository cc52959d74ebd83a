"""A local Spark session for ``skiff traces analyze``, benchmarks and tests."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from . import register, require_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Read by the JVM from its start, so that Spark's start-up warnings are not printed either
# (setLogLevel below applies only once the session exists).
ERRORS_ONLY_LOG4J = Path(__file__).with_name("log4j2-errors.properties")


@contextlib.contextmanager
def _output_of_started_processes_to(path: Path) -> Iterator[None]:
    """Processes started meanwhile (the JVM) write their stdout and stderr to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with path.open("ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        yield
    finally:
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)


def local_session(
    app_name: str,
    *,
    cores: int = 2,
    shuffle_partitions: int = 2,
    driver_memory: str = "1g",
    jvm_log: Path | None = None,
) -> SparkSession:
    """A ``local[cores]`` session without the web UI, with the skiff data source registered.

    Python workers run this interpreter, so they see the same packages as the driver. Spark
    logs only errors, from the JVM's start on; with ``jvm_log`` the JVM writes everything
    (the Java runtime's own warnings too) to that file instead of this process's output.
    """
    require_spark()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={ERRORS_ONLY_LOG4J}")
    )
    with _output_of_started_processes_to(jvm_log) if jvm_log else contextlib.nullcontext():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # py4j logs each connection it closes at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    register(spark)
    return spark
