"""L0: the episode dataset format in the LeRobot v3 layout.

Imports only the standard library, numpy, pyarrow, imageio and the reflexlab core (L0).
"""

from reflexlab.dataset.layout import (
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_FILES_SIZE_IN_MB,
    DATA_PATH,
    DROPPED_PREFIX,
    EPISODE_COLUMNS,
    EPISODES_PATH,
    INFO_PATH,
    LOCK_NAME,
    REQUIRED_VECTORS,
    STATS_PATH,
    STEP_COLUMNS,
    TASKS_PATH,
    VIDEO_CODEC,
    VIDEO_FILES_SIZE_IN_MB,
    VIDEO_PATH,
    VIDEO_PIX_FMT,
    DatasetError,
    FileId,
)
from reflexlab.dataset.reader import Dataset, load_dataset
from reflexlab.dataset.writer import DatasetWriter

__all__ = [
    "CHUNKS_SIZE",
    "CODEBASE_VERSION",
    "DATA_FILES_SIZE_IN_MB",
    "DATA_PATH",
    "DROPPED_PREFIX",
    "EPISODES_PATH",
    "EPISODE_COLUMNS",
    "INFO_PATH",
    "LOCK_NAME",
    "REQUIRED_VECTORS",
    "STATS_PATH",
    "STEP_COLUMNS",
    "TASKS_PATH",
    "VIDEO_CODEC",
    "VIDEO_FILES_SIZE_IN_MB",
    "VIDEO_PATH",
    "VIDEO_PIX_FMT",
    "Dataset",
    "DatasetError",
    "DatasetWriter",
    "FileId",
    "load_dataset",
]
