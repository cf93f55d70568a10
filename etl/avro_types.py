"""From an Avro reader schema to the table's columns: the Spark schema and the Arrow schema tasks decode into.

Records become structs, ``["null", T]`` a nullable T, enums strings, arrays arrays, maps maps with string
keys, bytes and fixed binary. Logical types: timestamp-millis/-micros become Spark timestamps (UTC),
local-timestamp-* timestamps without time zone, date dates, uuid strings, decimal decimals; time-millis and
time-micros stay their int and long (Spark has no time of day type). A union of several non-null types has
no column type here and is refused (spark-avro's ``memberN`` structs could be added).

Tasks decode with fastavro from schemas whose logical types (decimal apart) are stripped
(``without_logical_types``): the raw ints and strings go straight into Arrow arrays of the raw Arrow type
(``raw_arrow_type``, timestamps in the Avro unit), and one cast brings the batch to Spark's Arrow types.
Every column is nullable, as Spark makes the columns of files it writes.
"""

from __future__ import annotations

import copy
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

__all__ = ["UnsupportedSchema", "raw_arrow_schema", "spark_schema", "spark_type", "without_logical_types"]

_PRIMITIVE_SPARK = {"boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(),
                    "float": T.FloatType(), "double": T.DoubleType(), "bytes": T.BinaryType(),
                    "string": T.StringType()}
_PRIMITIVE_ARROW = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
                    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}
# Logical types read as the raw value: (Spark type, raw Arrow type the raw value fills).
_LOGICAL = {
    "timestamp-millis": (T.TimestampType(), pa.timestamp("ms", tz="UTC")),
    "timestamp-micros": (T.TimestampType(), pa.timestamp("us", tz="UTC")),
    "local-timestamp-millis": (T.TimestampNTZType(), pa.timestamp("ms")),
    "local-timestamp-micros": (T.TimestampNTZType(), pa.timestamp("us")),
    "date": (T.DateType(), pa.date32()),
    "uuid": (T.StringType(), pa.string()),
}


class UnsupportedSchema(ValueError):
    """An Avro type with no column type here."""


def _resolve(schema: Any, named: dict[str, Any], namespace: str | None) -> tuple[Any, str | None]:
    """A type with named references replaced by their definition (recorded in ``named`` on first sight)."""
    if isinstance(schema, str):
        if schema in _PRIMITIVE_SPARK or schema == "null":
            return schema, namespace
        full = schema if "." in schema or namespace is None else f"{namespace}.{schema}"
        found = named.get(full, named.get(schema))
        if found is None:
            raise UnsupportedSchema(f"unknown Avro type {schema!r}")
        return found
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed"):
        name = schema["name"]
        space = schema.get("namespace", namespace if "." not in name else name.rpartition(".")[0])
        full = name if "." in name else (f"{space}.{name}" if space else name)
        named[full] = (schema, space)
        return schema, space
    return schema, namespace


def _walk(schema: Any, named: dict[str, Any], namespace: str | None) -> tuple[T.DataType, pa.DataType]:
    schema, namespace = _resolve(schema, named, namespace)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise UnsupportedSchema(f"the union {schema} has several non-null types")
        return _walk(branches[0], named, namespace)
    if isinstance(schema, str):
        if schema == "null":
            return T.NullType(), pa.null()
        return _PRIMITIVE_SPARK[schema], _PRIMITIVE_ARROW[schema]
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal":
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        return T.DecimalType(precision, scale), pa.decimal128(precision, scale)
    if logical in _LOGICAL and kind in ("int", "long", "string"):
        return _LOGICAL[logical]
    if kind == "record":
        spark_fields, arrow_fields = [], []
        for field in schema["fields"]:
            spark, arrow = _walk(field["type"], named, namespace)
            spark_fields.append(T.StructField(field["name"], spark, True))
            arrow_fields.append(pa.field(field["name"], arrow))
        return T.StructType(spark_fields), pa.struct(arrow_fields)
    if kind == "enum":
        return T.StringType(), pa.string()
    if kind == "fixed":
        return T.BinaryType(), pa.binary()
    if kind == "array":
        spark, arrow = _walk(schema["items"], named, namespace)
        return T.ArrayType(spark, True), pa.list_(arrow)
    if kind == "map":
        spark, arrow = _walk(schema["values"], named, namespace)
        return T.MapType(T.StringType(), spark, True), pa.map_(pa.string(), arrow)
    if kind in _PRIMITIVE_SPARK or kind == "null":
        return _walk(kind, named, namespace)
    raise UnsupportedSchema(f"unknown Avro type {kind!r}")


def spark_type(schema: Any) -> T.DataType:
    """The Spark type of an Avro type (a JSON-compatible schema)."""
    return _walk(schema, {}, None)[0]


def spark_schema(schema: dict[str, Any]) -> T.StructType:
    """The Spark schema of the table of a record type (its fields become the columns)."""
    spark = spark_type(schema)
    if not isinstance(spark, T.StructType):
        raise UnsupportedSchema("a table's schema must be an Avro record")
    return spark


def raw_arrow_schema(schema: dict[str, Any]) -> pa.Schema:
    """The Arrow schema the raw values fastavro decodes with ``without_logical_types`` fill."""
    arrow = _walk(schema, {}, None)[1]
    return pa.schema(list(arrow))


def without_logical_types(schema: Any) -> Any:
    """A copy of ``schema`` without the logical types that fastavro would turn into Python objects
    (decimal kept: it has no raw form Arrow takes)."""
    schema = copy.deepcopy(schema)
    _strip(schema)
    return schema


def _strip(schema: Any) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _strip(branch)
    elif isinstance(schema, dict):
        if schema.get("logicalType") in _LOGICAL or str(schema.get("logicalType", "")).startswith("time-"):
            del schema["logicalType"]
        for field in schema.get("fields", []):
            _strip(field["type"])
        for key in ("items", "values"):
            if key in schema:
                _strip(schema[key])
