"""State store: Arrow tables per operator partition, delta/snapshot files, schema + operator metadata.

Pure Python + pyarrow; nothing here imports pyspark (the operators' state steps open stores
inside Spark tasks).
"""

from statestream.state.provider import (
    OP_COLUMN,
    STATE_FILE_FORMAT_VERSION,
    StateStoreProvider,
    clear_provider_cache,
    get_provider,
    loaded_providers,
    maintain_loaded_providers,
)
from statestream.state.store import (
    CUSTOM_METRIC_NAMES,
    FOUND_COLUMN,
    ReadStateStore,
    StateStore,
    StateStoreConf,
    StateStoreId,
    StateStoreMetrics,
)

__all__ = [
    "StateStoreId",
    "StateStoreConf",
    "StateStoreMetrics",
    "ReadStateStore",
    "StateStore",
    "StateStoreProvider",
    "get_provider",
    "clear_provider_cache",
    "loaded_providers",
    "maintain_loaded_providers",
    "FOUND_COLUMN",
    "OP_COLUMN",
    "CUSTOM_METRIC_NAMES",
    "STATE_FILE_FORMAT_VERSION",
]
