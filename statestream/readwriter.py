"""DataStreamReader and DataStreamWriter under PySpark's module name (``readwriter``).

They live in ``reader.py`` and ``writer.py``: the reader makes DataFrames and the DataFrame makes
the writer, so one module holding both would import ``dataframe.py`` and be imported by it. This
module only re-exports them; nothing in the package imports it.
"""

from __future__ import annotations

from statestream.reader import DataStreamReader, SourceSpec, memory_stream_df
from statestream.writer import DataStreamWriter

__all__ = ["DataStreamReader", "DataStreamWriter", "SourceSpec", "memory_stream_df"]
