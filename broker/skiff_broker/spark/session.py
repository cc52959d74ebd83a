"""A local Spark session for ``skiff traces analyze``, benchmarks and tests."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from . import register, require_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_session(
    app_name: str, *, cores: int = 2, shuffle_partitions: int = 2, driver_memory: str = "1g"
) -> SparkSession:
    """A ``local[cores]`` session without the web UI, with the skiff data source registered.

    Python workers run this interpreter, so they see the same packages as the driver.
    """
    require_spark()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
