"""Export one recorded episode as a rosbag2 MCAP bag, so ROS users replay it with ``ros2 bag play``, rviz or Foxglove.

Written with ``rosbags`` (pure Python, no ROS install needed): rosbag2 format version 9, storage ``mcap``, CDR bytes
and type hashes identical to what rclpy serialises (Kilted message definitions). Every step becomes one message per
topic, stamped ``start_ns`` + the step's ``timestamp`` (the dataset keeps times relative to the episode start; pass
the wall-clock start if you know it). Messages with a header carry the same stamp in ``header.stamp``.

Topics (a feature name's dots become slashes):

=================================  ==================================  =============================================
topic                              type                                from
=================================  ==================================  =============================================
``/observation/state``             ``sensor_msgs/msg/JointState``      ``observation.state`` when the Spec names the
                                                                       joints (see below), else
                                   ``std_msgs/msg/Float64MultiArray``
``/action``                        ``std_msgs/msg/Float64MultiArray``  ``action`` (dimension label: the feature name)
``/<other vector feature>``        ``std_msgs/msg/Float64MultiArray``  e.g. ``/observation/environment_state``
``/is_intervention``               ``std_msgs/msg/Bool``               who commanded the step
``/next/reward``                   ``std_msgs/msg/Float32``            the step's reward
``/<video feature>``               ``sensor_msgs/msg/Image``           ``rgb8``, e.g. ``/observation/images/wrist``
=================================  ==================================  =============================================

The Spec (info.json ``reflexlab_spec``) names the joints when its action is joint-space (``joint_position`` or
``joint_torque``: the action names are the joints). ``observation.state`` is then published as JointState if it
holds exactly one value per joint (positions), or if it is laid out like the Spec's policy observation group and
that group has a ``joint_pos`` term (plus ``joint_vel`` for velocities). Anything else stays a Float64MultiArray:
guessing which slice is a joint position would mislabel data.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

from reflexlab.dataset import Dataset, DatasetError, load_dataset
from reflexlab.spec import Spec

JOINT_SPACE_KINDS = ("joint_position", "joint_torque")
FLOAT_ARRAY = "std_msgs/msg/Float64MultiArray"
JOINT_STATE = "sensor_msgs/msg/JointState"

Build = Callable[[int, Any], Any]  # (step, header) -> that step's message on one topic


def topic_of(feature: str) -> str:
    """The topic a feature is published on: ``observation.images.wrist`` -> ``/observation/images/wrist``."""
    return "/" + feature.replace(".", "/")


def export_episode_mcap(
    dataset_root: Path | str,
    episode_index: int,
    out_path: Path | str,
    *,
    overwrite: bool = False,
    start_ns: int = 0,
    videos: bool = True,
) -> Path:
    """Write episode ``episode_index`` of the dataset at ``dataset_root`` as a rosbag2 MCAP bag folder ``out_path``.

    ``overwrite`` replaces an existing bag (only a folder holding a rosbag2 ``metadata.yaml``: a mistyped path to any
    other folder is never deleted). ``start_ns``: the episode's start, ns since the epoch. ``videos=False`` leaves
    the camera topics out (they dominate the bag's size). Returns the bag folder.

    The bag is written next to ``out_path`` and renamed into place when complete, so a failed export leaves no
    half bag. Raises `DatasetError` for a corrupt dataset or an episode that does not exist, `FileExistsError` when
    ``out_path`` exists and may not be replaced.
    """
    out = Path(out_path)
    _check_output(out, overwrite)
    dataset = load_dataset(dataset_root)
    if not 0 <= episode_index < dataset.num_episodes:
        raise DatasetError(
            dataset.root, f"no such episode; the dataset has {dataset.num_episodes}", episode=episode_index
        )
    staging = out.parent / f".{out.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        _write_bag(dataset, episode_index, staging / out.name, start_ns, videos)
        if out.exists():
            shutil.rmtree(out)
        (staging / out.name).rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _check_output(out: Path, overwrite: bool) -> None:
    if not out.exists():
        return
    if not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True (CLI: --overwrite) to replace it")
    if not (out.is_dir() and (out / "metadata.yaml").is_file()):
        raise FileExistsError(f"{out} exists and is not a rosbag2 bag (no metadata.yaml); refusing to delete it")


def _write_bag(dataset: Dataset, episode: int, path: Path, start_ns: int, videos: bool) -> None:
    store = get_typestore(Stores.ROS2_KILTED)
    steps = dataset.episode(episode)
    stamps = start_ns + np.round(steps["timestamp"].astype(np.float64) * 1e9).astype(np.int64)
    joints = _joint_layout(dataset.spec, dataset.vector_features["observation.state"][0])
    topics: dict[str, tuple[str, Build]] = {}  # topic -> (message type, step's message from (step, header))
    for key in dataset.vector_features:
        if key == "observation.state" and joints is not None:
            topics[topic_of(key)] = (JOINT_STATE, _joint_states(store, steps[key], joints))
        else:
            topics[topic_of(key)] = (FLOAT_ARRAY, _float_arrays(store, key, steps[key]))
    topics["/is_intervention"] = ("std_msgs/msg/Bool", _scalars(store, "Bool", steps["is_intervention"], bool))
    topics["/next/reward"] = ("std_msgs/msg/Float32", _scalars(store, "Float32", steps["next.reward"], float))
    if videos:
        for key in dataset.video_features:
            topics[topic_of(key)] = ("sensor_msgs/msg/Image", _images(store, dataset.video_frames(episode, key)))
    header_type = store.types["std_msgs/msg/Header"]
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        connections = {
            topic: writer.add_connection(topic, kind, typestore=store) for topic, (kind, _) in topics.items()
        }
        for step, stamp in enumerate(stamps.tolist()):
            header = header_type(stamp=_time(store, stamp), frame_id="")
            for topic, (kind, build) in topics.items():
                writer.write(connections[topic], stamp, store.serialize_cdr(build(step, header), kind))


def _joint_layout(spec: Spec | None, size: int) -> tuple[list[str], slice, slice | None] | None:
    """(joint names, position slice, velocity slice) of observation.state, or None when the Spec does not say."""
    if spec is None or spec.action.kind not in JOINT_SPACE_KINDS:
        return None
    names = list(spec.action.names)
    if size == len(names):
        return names, slice(0, size), None
    group = spec.policy_obs
    slices = group.slices()
    terms = {t.name: t.size for t in group.terms}
    if group.size != size or terms.get("joint_pos") != len(names):
        return None
    velocity = slices["joint_vel"] if terms.get("joint_vel") == len(names) else None
    return names, slices["joint_pos"], velocity


def _time(store: Typestore, ns: int) -> Any:
    return store.types["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def _joint_states(store: Typestore, values: np.ndarray, joints: tuple[list[str], slice, slice | None]) -> Build:
    names, position, velocity = joints
    message_type = store.types[JOINT_STATE]
    rows = values.astype(np.float64)
    empty = np.zeros(0, np.float64)

    def build(step: int, header: Any) -> Any:
        velocities = empty if velocity is None else rows[step, velocity].copy()
        return message_type(
            header=header, name=names, position=rows[step, position].copy(), velocity=velocities, effort=empty
        )

    return build


def _images(store: Typestore, frames: Iterator[np.ndarray]) -> Build:
    """Frames are decoded as the steps go (one per step, in order): a long episode's video never sits in memory."""
    message_type = store.types["sensor_msgs/msg/Image"]

    def build(step: int, header: Any) -> Any:
        frame = next(frames)
        height, width, _ = frame.shape
        return message_type(
            header=header,
            height=height,
            width=width,
            encoding="rgb8",
            is_bigendian=0,
            step=width * 3,
            data=frame.reshape(-1),
        )

    return build


def _float_arrays(store: Typestore, key: str, values: np.ndarray) -> Build:
    size = values.shape[1]
    dimension = store.types["std_msgs/msg/MultiArrayDimension"](label=key, size=size, stride=size)
    layout = store.types["std_msgs/msg/MultiArrayLayout"](dim=[dimension], data_offset=0)
    message_type = store.types[FLOAT_ARRAY]
    rows = values.astype(np.float64)
    return lambda step, header: message_type(layout=layout, data=rows[step])


def _scalars(store: Typestore, name: str, values: np.ndarray, kind: type) -> Build:
    message_type = store.types[f"std_msgs/msg/{name}"]
    return lambda step, header: message_type(data=kind(values[step]))
