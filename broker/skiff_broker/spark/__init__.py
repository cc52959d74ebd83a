"""Skiff and Spark: a PySpark data source for topics, and the trace-latency job.

Needs the ``spark`` extra (``pip install 'skiff-broker[spark]'``): PySpark 4.2 or newer
with PyArrow and NumPy, and matplotlib for plots. Nothing here imports PySpark until it is
used, so ``skiff`` works without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MISSING_EXTRA = (
    "this needs PySpark, PyArrow, NumPy and matplotlib: install them with "
    "pip install 'skiff-broker[spark]' "
    "(PySpark 4.2 or newer; Spark also needs Java 17 or newer on the PATH)"
)


class SparkExtraMissing(ImportError):
    """The ``spark`` extra is not installed."""


def require_spark() -> None:
    """Raise :class:`SparkExtraMissing` with what to install if PySpark cannot be imported."""
    try:
        import numpy  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark
    except ImportError as exc:
        raise SparkExtraMissing(MISSING_EXTRA) from exc
    major, minor = (int(part) for part in pyspark.__version__.split(".")[:2])
    if (major, minor) < (4, 2):
        raise SparkExtraMissing(f"PySpark {pyspark.__version__} is too old; {MISSING_EXTRA}")


def register(spark: SparkSession) -> None:
    """Make ``format("skiff")`` available in ``spark``."""
    require_spark()
    from .data_source import SkiffDataSource

    spark.dataSource.register(SkiffDataSource)
