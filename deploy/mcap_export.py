"""Export one recorded episode as a rosbag2 MCAP bag, so ROS users replay it with ``ros2 bag play``, rviz or Foxglove.

Written with ``rosbags`` (pure Python, no ROS install needed): rosbag2 format version 9, storage ``mcap``, CDR bytes
and type hashes identical to what rclpy serialises (Kilted message definitions).

Every per-step column of the episode is a topic (a column's dots become slashes), found from the data rather than
listed here, so a column the recorder gains later is exported without a change here. What the bag holds:

=================================  ==================================  =============================================
topic                              type                                from
=================================  ==================================  =============================================
``/observation/state``             ``sensor_msgs/msg/JointState``      ``observation.state`` when the Spec names the
                                                                       joints and the vector holds nothing else
                                                                       (see below), else
                                   ``std_msgs/msg/Float64MultiArray``
``/action``, ``/<other vector>``   ``std_msgs/msg/Float64MultiArray``  every other vector feature, e.g.
                                                                       ``/observation/environment_state``
                                                                       (dimension label: the feature name)
``/<bool column>``                 ``std_msgs/msg/Bool``               e.g. ``/next/success``, ``/next/done``,
                                                                       ``/next/terminated``, ``/next/truncated``,
                                                                       ``/is_intervention``, a camera's dropped-frame
                                                                       flag
``/<integer column>``              ``std_msgs/msg/Int64``              e.g. ``/policy_version``
``/<float column>``                ``std_msgs/msg/Float64``            e.g. ``/next/reward``, ``/measured_timestamp``
``/<video feature>``               ``sensor_msgs/msg/Image``           ``rgb8``, e.g. ``/observation/images/wrist``
``/episode``                       ``std_msgs/msg/String``             ONE message, latched: JSON of the task string,
                                                                       ``robot_type``, ``fps``, ``clock``,
                                                                       ``start_ns`` and the episode's metadata
                                                                       (``episode_meta``: success, end_reason,
                                                                       seed, ...)
(none)                                                                 ``index``, ``episode_index``,
                                                                       ``frame_index``, ``task_index``,
                                                                       ``timestamp``
=================================  ==================================  =============================================

Left out are only the bookkeeping columns, pure redundancy in a bag: the indices say which rows of the dataset the
step was (the bag is one episode, its messages are in step order and ``/episode`` names the episode and task), and
the nominal ``timestamp`` is frame_index / fps (or, in datasets without ``measured_timestamp``, the clock itself).
``measured_timestamp`` stays a topic although the stamps come from it: it keeps the recorded float exactly (stamps
are whole nanoseconds) and is read like any other column.

The episode's metadata is a message on a topic rather than rosbag2 ``custom_data``: ``ros2 bag info`` lists the
topics (``/episode``, 1 message) but never prints ``custom_data``, and Foxglove shows every topic's messages (Raw
Messages panel). ``/episode`` is offered ``transient_local`` (latched), so ``ros2 bag play`` hands it to subscribers
that join late.

One clock. Every message of a step, on every topic, has the same log time, publish time and (where the type has one)
``header.stamp``: ``start_ns`` + the step's ``measured_timestamp`` when the dataset has that column (the time the
robot or simulator measured the step at), else + its ``timestamp``; ``/episode`` is stamped with the first step.
``start_ns`` is the episode's wall-clock start when known (the dataset keeps times relative to it). Stamps increase
strictly on every topic (the reader refuses a dataset whose ``timestamp`` or ``measured_timestamp`` does not), so TF
buffers and message filters never see time go back.

Frames. An Image's ``header.frame_id`` is its camera's name (`camera_name`: the video key without
``observation.images.``, the whole key if it has no such prefix); a
JointState's is the dataset's ``robot_type``, the robot whose joints it lists (ROS tools do not look JointState's
frame up in TF).

The Spec (info.json ``reflexlab_spec``) names the joints when its action is joint-space (``joint_position`` or
``joint_torque``: the action names are the joints). ``observation.state`` is then published as JointState if it
holds exactly one value per joint (positions), or if it is laid out like the Spec's policy observation group and
that group's terms are ``joint_pos`` (plus ``joint_vel`` for velocities) and nothing else. Anything else stays a
Float64MultiArray: guessing which slice is a joint position would mislabel data, and a JointState of a vector that
also holds other terms (a quadruped's gravity, command, last action) would drop those values from the bag.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

from reflexlab.dataset import Dataset, DatasetError, camera_name, load_dataset
from reflexlab.spec import Spec

JOINT_SPACE_KINDS = ("joint_position", "joint_torque")
FLOAT_ARRAY = "std_msgs/msg/Float64MultiArray"
JOINT_STATE = "sensor_msgs/msg/JointState"
IMAGE = "sensor_msgs/msg/Image"
STRING = "std_msgs/msg/String"
# Per-step columns that are not exported (why: the module docstring).
BOOKKEEPING = ("index", "episode_index", "frame_index", "task_index", "timestamp")
# The columns a step's stamp can come from, preferred first: the measured time over the nominal frame_index / fps.
CLOCKS = ("measured_timestamp", "timestamp")
EPISODE_TOPIC = "/episode"
# A 1-D column's numpy dtype kind -> its message type and the Python type its ``data`` field takes.
SCALAR_TYPES: dict[str, tuple[str, type]] = {
    "b": ("std_msgs/msg/Bool", bool),
    "i": ("std_msgs/msg/Int64", int),
    "u": ("std_msgs/msg/Int64", int),
    "f": ("std_msgs/msg/Float64", float),
}
# rosbag2's "latched": a late subscriber still gets the last message. Durations 0: unspecified, the RMW's default
# (no deadline, lifespan or lease).
LATCHED = Qos(
    QosHistory.KEEP_LAST,
    1,
    QosReliability.RELIABLE,
    QosDurability.TRANSIENT_LOCAL,
    QosTime(0, 0),
    QosTime(0, 0),
    QosLiveliness.AUTOMATIC,
    QosTime(0, 0),
    False,
)

Build = Callable[[int, Any], Any]  # (step, its builtin_interfaces/Time stamp) -> that step's message on one topic


def topic_of(feature: str) -> str:
    """The topic a feature is published on: ``observation.images.wrist`` -> ``/observation/images/wrist``."""
    return "/" + feature.replace(".", "/")


def clock_of(steps: dict[str, np.ndarray]) -> str:
    """The column an episode's messages are stamped from: ``measured_timestamp`` if recorded, else ``timestamp``."""
    return next(key for key in CLOCKS if key in steps)


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
    half bag. Raises `DatasetError` for a corrupt dataset, an episode that does not exist or a column no ROS
    message here holds, `FileExistsError` when ``out_path`` exists and may not be replaced.
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
    clock = clock_of(steps)
    stamps = start_ns + np.round(steps[clock].astype(np.float64) * 1e9).astype(np.int64)
    topics = _step_topics(store, dataset, steps)
    if videos:
        for key in dataset.video_features:
            topics[topic_of(key)] = (IMAGE, _images(store, camera_name(key), dataset.video_frames(episode, key)))
    meta = dataset.episode_meta(episode)
    about = {
        "task": meta["tasks"][0],
        "robot_type": dataset.robot_type,
        "fps": dataset.fps,
        "clock": clock,
        "start_ns": start_ns,
        "episode": meta,
    }
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        latched = writer.add_connection(EPISODE_TOPIC, STRING, typestore=store, offered_qos_profiles=[LATCHED])
        writer.write(latched, int(stamps[0]), store.serialize_cdr(store.types[STRING](data=json.dumps(about)), STRING))
        connections = {
            topic: writer.add_connection(topic, kind, typestore=store) for topic, (kind, _) in topics.items()
        }
        for step, stamp in enumerate(stamps.tolist()):
            time = _time(store, stamp)
            for topic, (kind, build) in topics.items():
                writer.write(connections[topic], stamp, store.serialize_cdr(build(step, time), kind))


def _step_topics(store: Typestore, dataset: Dataset, steps: dict[str, np.ndarray]) -> dict[str, tuple[str, Build]]:
    """topic -> (message type, step's message) for every per-step column but the bookkeeping ones."""
    vectors = dataset.vector_features
    joints = _joint_layout(dataset.spec, vectors["observation.state"][0])
    topics: dict[str, tuple[str, Build]] = {}
    for key, values in steps.items():
        if key in BOOKKEEPING:
            continue
        rows = values.reshape(len(values), -1)  # a vector as (T, d), even a (1,) one held as a plain column
        if key == "observation.state" and joints is not None:
            topics[topic_of(key)] = (JOINT_STATE, _joint_states(store, dataset.robot_type or "", rows, joints))
        elif key in vectors:
            topics[topic_of(key)] = (FLOAT_ARRAY, _float_arrays(store, key, rows))
        elif values.ndim == 1 and values.dtype.kind in SCALAR_TYPES:
            kind, cast = SCALAR_TYPES[values.dtype.kind]
            topics[topic_of(key)] = (kind, _scalars(store, kind, values, cast))
        else:
            raise DatasetError(
                dataset.root, f"a {values.dtype} column of shape {values.shape} has no ROS message here", key=key
            )
    return topics


def _joint_layout(spec: Spec | None, size: int) -> tuple[list[str], slice, slice | None] | None:
    """(joint names, position slice, velocity slice) of observation.state, or None when the Spec does not say or the
    vector holds more than joint positions and velocities (a JointState would drop the rest)."""
    if spec is None or spec.action.kind not in JOINT_SPACE_KINDS:
        return None
    names = list(spec.action.names)
    if size == len(names):
        return names, slice(0, size), None
    group = spec.policy_obs
    terms = {t.name: t.size for t in group.terms}
    if group.size != size or terms.get("joint_pos") != len(names) or not set(terms) <= {"joint_pos", "joint_vel"}:
        return None
    if "joint_vel" in terms and terms["joint_vel"] != len(names):
        return None
    slices = group.slices()
    return names, slices["joint_pos"], slices.get("joint_vel")


def _time(store: Typestore, ns: int) -> Any:
    return store.types["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def _header(store: Typestore, stamp: Any, frame_id: str) -> Any:
    return store.types["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)


def _joint_states(
    store: Typestore, frame_id: str, values: np.ndarray, joints: tuple[list[str], slice, slice | None]
) -> Build:
    names, position, velocity = joints
    message_type = store.types[JOINT_STATE]
    rows = values.astype(np.float64)
    empty = np.zeros(0, np.float64)

    def build(step: int, stamp: Any) -> Any:
        velocities = empty if velocity is None else rows[step, velocity].copy()
        return message_type(
            header=_header(store, stamp, frame_id),
            name=names,
            position=rows[step, position].copy(),
            velocity=velocities,
            effort=empty,
        )

    return build


def _images(store: Typestore, frame_id: str, frames: Iterator[np.ndarray]) -> Build:
    """Frames are decoded as the steps go (one per step, in order): a long episode's video never sits in memory."""
    message_type = store.types[IMAGE]

    def build(step: int, stamp: Any) -> Any:
        frame = next(frames)
        height, width, _ = frame.shape
        return message_type(
            header=_header(store, stamp, frame_id),
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
    return lambda step, stamp: message_type(layout=layout, data=rows[step])


def _scalars(store: Typestore, kind: str, values: np.ndarray, cast: type) -> Build:
    message_type = store.types[kind]
    return lambda step, stamp: message_type(data=cast(values[step]))
