"""deploy.mcap_export: an episode (vectors, RL columns, a camera) as a rosbag2 MCAP bag, read back three ways.

rosbags (what wrote it), the ``mcap`` reader with ``mcap-ros2-support``'s decoder (what Foxglove-style tools use:
it parses the schemas stored in the file, so it catches a schema that only rosbags could read) and rclpy (what a ROS
node receives).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from rosbags.rosbag2 import Reader
from rosbags.typesys import Stores, get_typestore

from deploy.mcap_export import export_episode_mcap
from reflexlab.dataset import INFO_PATH, Dataset, DatasetError, DatasetWriter, load_dataset
from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec

FPS = 20
JOINTS = ("shoulder", "elbow")
CAMERA = "observation.images.front"
SHAPE = (16, 24, 3)
START_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
# Not exported: the row bookkeeping (the bag is one episode, in step order) and the nominal time.
BOOKKEEPING = {"index", "episode_index", "frame_index", "task_index", "timestamp"}
# Message type of a 1-D column, by numpy dtype kind.
SCALAR_TYPES = {"b": "std_msgs/msg/Bool", "i": "std_msgs/msg/Int64", "f": "std_msgs/msg/Float64"}


def arm_spec(terms: tuple[ObsTerm, ...]) -> Spec:
    action = ActionSpec("joint_position", JOINTS, 1.0, (0.0, 0.0), (-2.0, -2.0), (2.0, 2.0))
    return Spec("arm", "reach", (ObsGroup("policy", terms),), "policy", action, FPS, 500.0)


def image(episode: int, t: int) -> np.ndarray:
    return np.full(SHAPE, (30 * episode + 10 * t) % 250, np.uint8)


def write_arm(root: Path, state_size: int, spec: Spec | None) -> None:
    """Two episodes (4 and 5 steps) with a camera, an intervention at step 1, a policy update at step 2; the second
    ends in success. Steps are timed 50 ms apart from 10 ms, but step 2 came 13 ms late (not frame_index / fps)."""
    features = {"observation.state": (state_size,), "action": (2,), "observation.tool": (1,)}
    with DatasetWriter(root, FPS, "arm", features, spec, videos={CAMERA: SHAPE}) as writer:
        for episode in range(2):
            last = 3 + episode
            for t in range(last + 1):
                frame = {
                    "observation.state": np.arange(state_size) + 10 * episode + t,
                    "action": np.array([episode, t / 4]),
                    "observation.tool": np.array([t]),
                    CAMERA: image(episode, t),
                }
                writer.add_frame(
                    frame,
                    reward=t / 2,
                    terminated=episode == 1 and t == last,
                    truncated=episode == 0 and t == last,
                    success=episode == 1 and t == last,
                    is_intervention=t == 1,
                    policy_version=3 + (t >= 2),
                    measured_timestamp=0.01 + t * 0.05 + 0.013 * (t == 2),
                )
            end = "success" if episode else "time_limit"
            writer.save_episode("reach", {"end_reason": end, "seed": 7 + episode, "start_unix_ns": START_NS})


def expected_stamps(steps: dict[str, np.ndarray], clock: str = "measured_timestamp") -> list[int]:
    """The one clock: the episode's start plus the measured time (the nominal ``timestamp`` where there is none)."""
    return [START_NS + round(float(seconds) * 1e9) for seconds in steps[clock]]


def exported_columns(steps: dict[str, np.ndarray]) -> dict[str, str]:
    """topic -> column name for every per-step column the bag must carry."""
    return {"/" + key.replace(".", "/"): key for key in steps if key not in BOOKKEEPING}


def read_bag(path: Path) -> tuple[dict[str, str], dict[str, list[tuple[int, bytes]]]]:
    """rosbags: (topic -> type, topic -> [(log time ns, CDR bytes)])."""
    with Reader(path) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        messages: dict[str, list[tuple[int, bytes]]] = {topic: [] for topic in types}
        for connection, stamp, data in reader.messages():
            messages[connection.topic].append((stamp, bytes(data)))
    return types, messages


def decode_bag(path: Path) -> tuple[dict[str, str], dict[str, dict[str, str]], dict[str, list[tuple[int, int, Any]]]]:
    """mcap + mcap-ros2-support, every message of every topic, in file order: (topic -> type, topic -> channel
    metadata, topic -> [(log time, publish time, decoded message)]). The decoder parses the ros2msg schemas stored in
    the file, not rosbags' type store."""
    (file,) = path.glob("*.mcap")
    types: dict[str, str] = {}
    decoded: dict[str, list[tuple[int, int, Any]]] = defaultdict(list)
    with file.open("rb") as stream:
        reader = make_reader(stream, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        assert summary is not None and summary.statistics is not None
        for schema, channel, message, value in reader.iter_decoded_messages(log_time_order=False):
            assert schema is not None and schema.encoding == "ros2msg" and channel.message_encoding == "cdr"
            types[channel.topic] = schema.name
            decoded[channel.topic].append((message.log_time, message.publish_time, value))
        assert sum(map(len, decoded.values())) == summary.statistics.message_count
        metadata = {channel.topic: channel.metadata for channel in summary.channels.values()}
    return types, metadata, dict(decoded)


def stamp_of(message: Any) -> int:
    return message.header.stamp.sec * 10**9 + message.header.stamp.nanosec


def test_episode_becomes_a_bag_that_ros_reads(tmp_path: Path) -> None:
    write_arm(tmp_path / "ds", 2, arm_spec((ObsTerm("joint_pos", 2, "rad"),)))
    out = export_episode_mcap(tmp_path / "ds", 1, tmp_path / "bag", start_ns=START_NS)
    assert out == tmp_path / "bag" and list(out.glob("*.mcap")) and (out / "metadata.yaml").is_file()
    types, messages = read_bag(out)
    steps = load_dataset(tmp_path / "ds").episode(1)
    assert set(types) == {*exported_columns(steps), "/observation/images/front", "/episode"}
    want_types = {
        "/episode": "std_msgs/msg/String",
        "/observation/state": "sensor_msgs/msg/JointState",
        "/action": "std_msgs/msg/Float64MultiArray",
        "/observation/tool": "std_msgs/msg/Float64MultiArray",
        "/next/reward": "std_msgs/msg/Float64",
        "/next/done": "std_msgs/msg/Bool",
        "/next/terminated": "std_msgs/msg/Bool",
        "/next/truncated": "std_msgs/msg/Bool",
        "/next/success": "std_msgs/msg/Bool",
        "/is_intervention": "std_msgs/msg/Bool",
        "/policy_version": "std_msgs/msg/Int64",
        "/observation/images/front": "sensor_msgs/msg/Image",
    }
    assert {topic: types.get(topic) for topic in want_types} == want_types
    want_stamps = expected_stamps(steps)
    store = get_typestore(Stores.ROS2_KILTED)
    for topic in set(types) - {"/episode"}:
        assert [stamp for stamp, _ in messages[topic]] == want_stamps, topic
    assert [stamp for stamp, _ in messages["/episode"]] == want_stamps[:1]
    for t, (stamp, data) in enumerate(messages["/observation/state"]):
        state = store.deserialize_cdr(data, types["/observation/state"])
        assert list(state.name) == list(JOINTS) and len(state.velocity) == 0 and state.header.frame_id == "arm"
        np.testing.assert_array_equal(state.position, [10 + t, 11 + t])
        assert stamp_of(state) == stamp
    for t, (_, data) in enumerate(messages["/action"]):
        np.testing.assert_array_equal(store.deserialize_cdr(data, types["/action"]).data, [1.0, t / 4])
    flags = [store.deserialize_cdr(d, "std_msgs/msg/Bool").data for _, d in messages["/is_intervention"]]
    rewards = [store.deserialize_cdr(d, "std_msgs/msg/Float64").data for _, d in messages["/next/reward"]]
    versions = [store.deserialize_cdr(d, "std_msgs/msg/Int64").data for _, d in messages["/policy_version"]]
    assert flags == [t == 1 for t in range(5)] and rewards == [t / 2 for t in range(5)]
    assert versions == [3, 3, 4, 4, 4]
    for t, (stamp, data) in enumerate(messages["/observation/images/front"]):
        frame = store.deserialize_cdr(data, "sensor_msgs/msg/Image")
        assert (frame.height, frame.width, frame.encoding, frame.step) == (16, 24, "rgb8", 72)
        assert frame.header.frame_id == "front" and stamp_of(frame) == stamp
        assert np.abs(frame.data.astype(int) - int(image(1, t)[0, 0, 0])).max() <= 3
    about = json.loads(store.deserialize_cdr(messages["/episode"][0][1], "std_msgs/msg/String").data)
    assert about["task"] == "reach" and about["episode"]["success"] is True and about["start_ns"] == START_NS

    # The bytes are what a ROS node receives: rclpy's own deserialiser reads them.
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Float64MultiArray, Int64, String

    state = deserialize_message(messages["/observation/state"][2][1], JointState)
    assert list(state.name) == list(JOINTS) and list(state.position) == [12.0, 13.0]
    action = deserialize_message(messages["/action"][2][1], Float64MultiArray)
    assert list(action.data) == [1.0, 0.5] and action.layout.dim[0].label == "action"
    frame = deserialize_message(messages["/observation/images/front"][0][1], Image)
    assert (frame.height, frame.width, frame.encoding, len(frame.data)) == (16, 24, "rgb8", 16 * 24 * 3)
    assert frame.header.frame_id == "front"
    assert deserialize_message(messages["/policy_version"][2][1], Int64).data == 4
    assert json.loads(deserialize_message(messages["/episode"][0][1], String).data)["episode"]["seed"] == 8


def test_every_message_decodes_with_mcap_ros2_support_and_every_column_is_there(tmp_path: Path) -> None:
    write_arm(tmp_path / "ds", 2, arm_spec((ObsTerm("joint_pos", 2, "rad"),)))
    types, metadata, decoded = decode_bag(export_episode_mcap(tmp_path / "ds", 1, tmp_path / "bag", start_ns=START_NS))
    dataset = load_dataset(tmp_path / "ds")
    steps = dataset.episode(1)
    columns = exported_columns(steps)
    assert set(decoded) == {*columns, "/observation/images/front", "/episode"}

    # One clock: every step's messages share log time, publish time and header stamp, increasing on every topic.
    want_stamps = expected_stamps(steps)
    assert (np.diff(want_stamps) > 0).all()
    for topic, messages in decoded.items():
        assert [log for log, _, _ in messages] == (want_stamps[:1] if topic == "/episode" else want_stamps), topic
        assert all(log == publish for log, publish, _ in messages), topic
        for log, _, message in messages:
            assert not hasattr(message, "header") or stamp_of(message) == log, topic

    for topic, key in columns.items():
        values = [message for _, _, message in decoded[topic]]
        if key == "observation.state":
            assert {m.header.frame_id for m in values} == {"arm"}
            np.testing.assert_array_equal([m.position for m in values], steps[key])
            assert all(list(m.name) == list(JOINTS) for m in values)
        elif key in dataset.vector_features:
            np.testing.assert_array_equal([m.data for m in values], steps[key].reshape(len(values), -1))
            assert {m.layout.dim[0].label for m in values} == {key}
        else:
            assert types[topic] == SCALAR_TYPES[steps[key].dtype.kind], topic
            assert [m.data for m in values] == steps[key].tolist(), topic
    assert [m.data for _, _, m in decoded["/next/success"]] == [False] * 4 + [True]
    assert [m.data for _, _, m in decoded["/is_intervention"]] == [t == 1 for t in range(5)]

    frames = list(dataset.video_frames(1, CAMERA))
    images = [message for _, _, message in decoded["/observation/images/front"]]
    assert len(images) == len(frames) == 5
    for frame, message in zip(frames, images, strict=True):
        assert (message.header.frame_id, message.encoding, message.height, message.width) == ("front", "rgb8", 16, 24)
        np.testing.assert_array_equal(np.frombuffer(bytes(message.data), np.uint8).reshape(SHAPE), frame)

    ((log, _, message),) = decoded["/episode"]
    about = json.loads(message.data)
    assert log == want_stamps[0] and about["task"] == "reach" and about["robot_type"] == "arm"
    assert about["clock"] == "measured_timestamp"
    assert about["fps"] == FPS and about["start_ns"] == START_NS
    assert about["episode"] == json.loads(json.dumps(dataset.episode_meta(1)))
    assert about["episode"]["success"] is True and about["episode"]["end_reason"] == "success"
    assert "transient_local" in metadata["/episode"]["offered_qos_profiles"]


def test_timestamp_is_the_clock_when_the_dataset_has_no_measured_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stands in for a LeRobot-written dataset, which has no measured_timestamp: its nominal timestamp is the clock.
    write_arm(tmp_path / "ds", 2, None)
    monkeypatch.setattr(Dataset, "episode", patched_episode(Dataset.episode, drop="measured_timestamp"))
    *_, decoded = decode_bag(export_episode_mcap(tmp_path / "ds", 1, tmp_path / "bag", start_ns=START_NS))
    want = expected_stamps(load_dataset(tmp_path / "ds").episode(1), "timestamp")  # frame_index / fps, in float32
    np.testing.assert_allclose(np.array(want) - START_NS, np.arange(5) * 50_000_000, atol=2)
    for topic, messages in decoded.items():
        assert [log for log, _, _ in messages] == (want[:1] if topic == "/episode" else want), topic
    assert [m.header.frame_id for _, _, m in decoded["/observation/images/front"]] == ["front"] * 5
    assert "/measured_timestamp" not in decoded and "/timestamp" not in decoded
    assert json.loads(decoded["/episode"][0][2].data)["clock"] == "timestamp"


def test_a_column_without_a_ros_message_is_refused_not_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_arm(tmp_path / "ds", 2, None)
    monkeypatch.setattr(Dataset, "episode", patched_episode(Dataset.episode, operator=np.array(list("abcde"))))
    with pytest.raises(DatasetError, match="has no ROS message") as err:
        export_episode_mcap(tmp_path / "ds", 1, tmp_path / "bag", videos=False)
    assert err.value.key == "operator" and not (tmp_path / "bag").exists()


def patched_episode(episode: Any, drop: str | None = None, **extra: np.ndarray) -> Any:
    """`Dataset.episode` without column ``drop`` and with ``extra`` columns added or replaced: what another writer
    (LeRobot) records, or what ours refuses to."""

    def patched(self: Dataset, i: int) -> dict[str, np.ndarray]:
        return {key: values for key, values in {**episode(self, i), **extra}.items() if key != drop}

    return patched


@pytest.mark.parametrize(
    ("state_size", "spec", "want"),
    [
        (4, arm_spec((ObsTerm("joint_pos", 2, "rad"), ObsTerm("joint_vel", 2, "rad/s"))), "velocity"),
        (3, arm_spec((ObsTerm("q", 3, "rad"),)), "std_msgs/msg/Float64MultiArray"),
        (2, None, "std_msgs/msg/Float64MultiArray"),
        # A JointState would drop the goal from the bag.
        (
            5,
            arm_spec((ObsTerm("joint_pos", 2, "rad"), ObsTerm("joint_vel", 2, "rad/s"), ObsTerm("goal", 1, "m"))),
            "std_msgs/msg/Float64MultiArray",
        ),
    ],
)
def test_state_is_joint_state_only_when_the_spec_names_the_joints(
    tmp_path: Path, state_size: int, spec: Spec | None, want: str
) -> None:
    write_arm(tmp_path / "ds", state_size, spec)
    types, messages = read_bag(export_episode_mcap(tmp_path / "ds", 0, tmp_path / "bag", videos=False))
    assert "/observation/images/front" not in types
    if want != "velocity":
        assert types["/observation/state"] == want
        return
    state = get_typestore(Stores.ROS2_KILTED).deserialize_cdr(
        messages["/observation/state"][1][1], types["/observation/state"]
    )
    np.testing.assert_array_equal(state.position, [1.0, 2.0])
    np.testing.assert_array_equal(state.velocity, [3.0, 4.0])


def test_cli_stamps_from_the_recorded_start(tmp_path: Path) -> None:
    from reflexlab.cli import main

    write_arm(tmp_path / "ds", 2, None)
    main(["export-mcap", "--dataset", str(tmp_path / "ds"), "--episode", "1", "--out", str(tmp_path / "bag")])
    *_, decoded = decode_bag(tmp_path / "bag")
    assert [log for log, _, _ in decoded["/action"]] == expected_stamps(load_dataset(tmp_path / "ds").episode(1))


def test_export_refuses_missing_episodes_existing_output_and_corrupt_datasets(tmp_path: Path) -> None:
    write_arm(tmp_path / "ds", 2, None)
    with pytest.raises(DatasetError) as err:
        export_episode_mcap(tmp_path / "ds", 2, tmp_path / "bag")
    assert err.value.episode == 2 and "has 2" in str(err.value)
    assert not (tmp_path / "bag").exists()

    bag = export_episode_mcap(tmp_path / "ds", 0, tmp_path / "bag", videos=False)
    with pytest.raises(FileExistsError, match="overwrite"):
        export_episode_mcap(tmp_path / "ds", 1, bag)
    export_episode_mcap(tmp_path / "ds", 1, bag, overwrite=True)
    assert len(read_bag(bag)[1]["/action"]) == 5
    precious = tmp_path / "notes"
    precious.mkdir()
    with pytest.raises(FileExistsError, match="not a rosbag2 bag"):
        export_episode_mcap(tmp_path / "ds", 0, precious, overwrite=True)
    assert precious.is_dir()

    info = json.loads((tmp_path / "ds" / INFO_PATH).read_text())
    info["total_frames"] += 1
    (tmp_path / "ds" / INFO_PATH).write_text(json.dumps(info))
    with pytest.raises(DatasetError, match="total_frames"):
        export_episode_mcap(tmp_path / "ds", 0, tmp_path / "other")
    assert not list(tmp_path.glob(".*partial"))
