"""``spark.read.format("skiff")``: the Skiff data source for PySpark.

Register it once per session, then read and write topics::

    from skiff_broker.spark import register
    register(spark)
    df = spark.read.format("skiff").option("endpoints", "127.0.0.1:8081") \
        .option("topic", "orders").load()

Options are listed in :mod:`skiff_broker.spark.options`.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .options import parse_source_options
from .reader import SkiffBatchReader, SkiffStreamReader
from .schema import SCHEMA_DDL
from .writer import SkiffBatchWriter, SkiffStreamWriter, write_target


class SkiffDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "skiff"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return SkiffBatchReader(parse_source_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SkiffStreamReader(parse_source_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return SkiffBatchWriter(write_target(dict(self.options), schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return SkiffStreamWriter(write_target(dict(self.options), schema))
