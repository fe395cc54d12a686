"""Arrow columns of a dataset's Parquet files as numpy arrays, or why they cannot be (the reader names the file).

Our writer stores vectors as fixed-size float32 lists (a scalar float for shape (1,)); LeRobot's writer and others
may use variable-size lists or float64, which read the same as long as every row has the feature's length.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def vector_values(column: pa.Array, size: int) -> np.ndarray | str:
    """(rows, size) float32 values of a list column (or of a float column, for size 1), or why it is not that."""
    kind = column.type
    if size == 1 and pa.types.is_floating(kind):
        values = scalar_values(column, "float32")
        return values if isinstance(values, str) else values.reshape(len(column), 1)
    if not (pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return f"column type {kind} is not a list of floats"
    if not pa.types.is_floating(kind.value_type):
        return f"column type {kind} is not a list of floats"
    lengths = pc.fill_null(pc.list_value_length(column), -1).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(lengths != size)
    if len(bad):
        return f"row {int(bad[0])} has {int(lengths[bad[0]])} values, the feature's shape is ({size},)"
    flat = column.flatten()
    if flat.null_count:
        return "holds null values"
    return flat.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(column), size)


def scalar_values(column: pa.Array, dtype: str) -> np.ndarray | str:
    """1-D values of a scalar column, or why it is not one."""
    if pa.types.is_nested(column.type):
        return f"column type {column.type} is nested; the feature's shape is (1,)"
    if column.null_count:
        return "holds null values"
    return column.to_numpy(zero_copy_only=False).astype(dtype)


def pandas_index(table: pa.Table) -> str | None:
    """The column pandas restores as a table's index (LeRobot's tasks.parquet keeps its task strings there)."""
    raw = (table.schema.metadata or {}).get(b"pandas")
    if raw is None:
        return None
    try:
        index = json.loads(raw)["index_columns"]
    except (ValueError, KeyError, TypeError):
        return None
    return index[0] if len(index) == 1 and isinstance(index[0], str) else None
