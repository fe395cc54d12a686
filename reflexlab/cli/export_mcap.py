"""`reflexlab export-mcap`: one recorded episode as a rosbag2 MCAP bag, for the ROS tools."""

from __future__ import annotations

import json
from pathlib import Path


def export_mcap(
    dataset: Path,
    episode: int = 0,
    out: Path | None = None,
    overwrite: bool = False,
    videos: bool = True,
) -> None:
    """Convert one recorded episode to a rosbag2 MCAP bag (for ros2 bag, Foxglove, PlotJuggler).

    Every per-step column becomes a topic (vectors, reward, end flags, success, interventions, policy_version,
    dropped-frame flags), each camera a sensor_msgs/Image whose frame_id is the camera's name, and the task and
    episode metadata (success, end reason, seed, ...) one latched JSON message on /episode; the topic table is in
    `deploy.mcap_export`. All topics share one clock: each step's messages are stamped with the episode's
    wall-clock start when it was recorded by `reflexlab record` (episode metadata ``start_unix_ns``, else 0) plus
    the step's measured time (its nominal timestamp in datasets that have no measured one).

    Args:
        dataset: the dataset folder (reflexlab record, reflexlab demos).
        episode: episode index.
        out: bag folder to write (default: DATASET/mcap/episode_NNNNNN).
        overwrite: replace an existing bag.
        videos: include camera frames as sensor_msgs/Image.
    """
    from deploy.mcap_export import export_episode_mcap
    from reflexlab.dataset import load_dataset

    meta = load_dataset(dataset).episode_meta(episode) if dataset.exists() else {}
    target = out or dataset / "mcap" / f"episode_{episode:06d}"
    path = export_episode_mcap(
        dataset, episode, target, overwrite=overwrite, start_ns=int(meta.get("start_unix_ns", 0)), videos=videos
    )
    print(json.dumps({"bag": str(path)}))
