"""deploy.mcap_export: an episode (vectors + a camera) as a rosbag2 MCAP bag, read back with rosbags and rclpy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import Reader
from rosbags.typesys import Stores, get_typestore

from deploy.mcap_export import export_episode_mcap
from reflexlab.dataset import INFO_PATH, DatasetError, DatasetWriter, load_dataset
from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec

FPS = 20
JOINTS = ("shoulder", "elbow")
CAMERA = "observation.images.front"
SHAPE = (16, 24, 3)
START_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


def arm_spec(terms: tuple[ObsTerm, ...]) -> Spec:
    action = ActionSpec("joint_position", JOINTS, 1.0, (0.0, 0.0), (-2.0, -2.0), (2.0, 2.0))
    return Spec("arm", "reach", (ObsGroup("policy", terms),), "policy", action, FPS, 500.0)


def image(episode: int, t: int) -> np.ndarray:
    return np.full(SHAPE, (30 * episode + 10 * t) % 250, np.uint8)


def write_arm(root: Path, state_size: int, spec: Spec | None) -> None:
    features = {"observation.state": (state_size,), "action": (2,), "observation.tool": (1,)}
    with DatasetWriter(root, FPS, "arm", features, spec, videos={CAMERA: SHAPE}) as writer:
        for episode in range(2):
            for t in range(4 + episode):
                frame = {
                    "observation.state": np.arange(state_size) + 10 * episode + t,
                    "action": np.array([episode, t / 4]),
                    "observation.tool": np.array([t]),
                    CAMERA: image(episode, t),
                }
                writer.add_frame(frame, reward=t / 2, is_intervention=t == 1, timestamp=0.01 + t * 0.05)
            writer.save_episode("reach")


def read_bag(path: Path) -> tuple[dict[str, str], dict[str, list[tuple[int, bytes]]]]:
    """(topic -> type, topic -> [(log time ns, CDR bytes)])."""
    with Reader(path) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        messages: dict[str, list[tuple[int, bytes]]] = {topic: [] for topic in types}
        for connection, stamp, data in reader.messages():
            messages[connection.topic].append((stamp, bytes(data)))
    return types, messages


def test_episode_becomes_a_bag_that_ros_reads(tmp_path: Path) -> None:
    write_arm(tmp_path / "ds", 2, arm_spec((ObsTerm("joint_pos", 2, "rad"),)))
    out = export_episode_mcap(tmp_path / "ds", 1, tmp_path / "bag", start_ns=START_NS)
    assert out == tmp_path / "bag" and list(out.glob("*.mcap")) and (out / "metadata.yaml").is_file()
    types, messages = read_bag(out)
    assert types == {
        "/observation/state": "sensor_msgs/msg/JointState",
        "/action": "std_msgs/msg/Float64MultiArray",
        "/observation/tool": "std_msgs/msg/Float64MultiArray",
        "/is_intervention": "std_msgs/msg/Bool",
        "/next/reward": "std_msgs/msg/Float32",
        "/observation/images/front": "sensor_msgs/msg/Image",
    }
    steps = load_dataset(tmp_path / "ds").episode(1)
    want_stamps = [START_NS + round(float(ts) * 1e9) for ts in steps["timestamp"]]
    store = get_typestore(Stores.ROS2_KILTED)
    for topic in types:
        assert [stamp for stamp, _ in messages[topic]] == want_stamps, topic
    for t, (stamp, data) in enumerate(messages["/observation/state"]):
        state = store.deserialize_cdr(data, types["/observation/state"])
        assert list(state.name) == list(JOINTS) and len(state.velocity) == 0
        np.testing.assert_array_equal(state.position, [10 + t, 11 + t])
        assert state.header.stamp.sec * 10**9 + state.header.stamp.nanosec == stamp
    for t, (_, data) in enumerate(messages["/action"]):
        np.testing.assert_array_equal(store.deserialize_cdr(data, types["/action"]).data, [1.0, t / 4])
    flags = [store.deserialize_cdr(d, "std_msgs/msg/Bool").data for _, d in messages["/is_intervention"]]
    rewards = [store.deserialize_cdr(d, "std_msgs/msg/Float32").data for _, d in messages["/next/reward"]]
    assert flags == [t == 1 for t in range(5)] and rewards == pytest.approx([t / 2 for t in range(5)])
    for t, (_, data) in enumerate(messages["/observation/images/front"]):
        frame = store.deserialize_cdr(data, "sensor_msgs/msg/Image")
        assert (frame.height, frame.width, frame.encoding, frame.step) == (16, 24, "rgb8", 72)
        assert np.abs(frame.data.astype(int) - int(image(1, t)[0, 0, 0])).max() <= 3

    # The bytes are what a ROS node receives: rclpy's own deserialiser reads them.
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Float64MultiArray

    state = deserialize_message(messages["/observation/state"][2][1], JointState)
    assert list(state.name) == list(JOINTS) and list(state.position) == [12.0, 13.0]
    action = deserialize_message(messages["/action"][2][1], Float64MultiArray)
    assert list(action.data) == [1.0, 0.5] and action.layout.dim[0].label == "action"
    frame = deserialize_message(messages["/observation/images/front"][0][1], Image)
    assert (frame.height, frame.width, frame.encoding, len(frame.data)) == (16, 24, "rgb8", 16 * 24 * 3)


@pytest.mark.parametrize(
    ("state_size", "spec", "want"),
    [
        (4, arm_spec((ObsTerm("joint_pos", 2, "rad"), ObsTerm("joint_vel", 2, "rad/s"))), "velocity"),
        (3, arm_spec((ObsTerm("q", 3, "rad"),)), "std_msgs/msg/Float64MultiArray"),
        (2, None, "std_msgs/msg/Float64MultiArray"),
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
