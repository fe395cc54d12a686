"""L0: the episode dataset format in the LeRobot v3 layout.

Imports only the standard library, numpy, pyarrow, imageio and the reflexlab core (L0).
"""

from reflexlab.dataset.layout import (
    CAMERA_PREFIX,
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_FILES_SIZE_IN_MB,
    DATA_PATH,
    EPISODE_COLUMNS,
    EPISODES_PATH,
    FORMAT_VERSION,
    IMAGE_PREFIX,
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
    camera_name,
    dropped_column,
)
from reflexlab.dataset.reader import Dataset, load_dataset
from reflexlab.dataset.writer import DatasetWriter

__all__ = [
    "CAMERA_PREFIX",
    "CHUNKS_SIZE",
    "CODEBASE_VERSION",
    "DATA_FILES_SIZE_IN_MB",
    "DATA_PATH",
    "EPISODES_PATH",
    "EPISODE_COLUMNS",
    "FORMAT_VERSION",
    "IMAGE_PREFIX",
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
    "camera_name",
    "dropped_column",
    "load_dataset",
]
