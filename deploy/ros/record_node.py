"""`ros2 run reflexlab record_node`: `reflexlab record` with its options as ROS parameters, for launch files.

The recording loop (env + policy + teleop arbiter + dataset writer) is one process on purpose: the
arbiter must decide inside the control step, and the writer must see exactly what was executed.
The arm driver (`franka_node`) and cameras (`camera_node`) are separate nodes, as on any robot.
"""

from __future__ import annotations

import sys
from pathlib import Path

import rclpy
from rclpy.node import Node

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)

PARAMETERS: dict[str, object] = {
    "out": "runs/record/panda-push-t",
    "task": "panda-push-t",
    "episodes": 10,
    "policy": "expert",  # expert | none | path to an exported .onnx
    "teleop": "none",  # config name in config/teleop, a YAML path, or none (an empty string is no ROS parameter)
    "sim_as_real": False,  # on a robot the driver node runs beside this one
    "start_bridge": False,  # sim-as-real: the launch file starts arm_bridge
    "reset": ["scripted", "human"],
    "episode_time_s": 30.0,
    "seed": 0,
    "policy_version": 0,
    # NAME=SOURCE[,NAME=SOURCE…] (see `reflexlab record --cameras`), or none
    "cameras": "none",
}


class RecordNode(Node):
    """Holds the recording options as declared parameters (so launch files are checked against them)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("recorder", **kwargs)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)

    def options(self) -> dict[str, object]:
        return {name: self.get_parameter(name).value for name in PARAMETERS}


def main(argv: list[str] | None = None) -> None:
    from deploy.step_actor import StepActor
    from real.session import RecordOptions, record_session

    rclpy.init(args=argv if argv is not None else sys.argv)
    node = RecordNode()
    p = node.options()
    node.destroy_node()
    rclpy.try_shutdown()
    options = RecordOptions(
        out=Path(str(p["out"])),
        task=str(p["task"]),
        episodes=int(p["episodes"]),
        policy=str(p["policy"]),
        sim_as_real=bool(p["sim_as_real"]),
        start_bridge=bool(p["start_bridge"]),
        reset=tuple(p["reset"]),  # type: ignore[arg-type]
        episode_time_s=float(p["episode_time_s"]),
        seed=int(p["seed"]),
        policy_version=int(p["policy_version"]),
        cameras=() if p["cameras"] in ("", "none") else tuple(str(p["cameras"]).split(",")),
    )
    teleop = str(p["teleop"])
    record_session(options, None if teleop in ("", "none") else teleop, onnx_actor=StepActor)


if __name__ == "__main__":
    main()
