"""`reflexlab serve`: the ROS 2 policy node; imports neither torch nor MuJoCo, as on a robot computer."""

from __future__ import annotations

import json
from pathlib import Path


def serve(
    model: Path,
    robot: str = "quadruped",
    rate: float = 500.0,
    policy_rate: float = 0.0,
    seconds: float | None = None,
) -> None:
    """Serve an exported policy as a ROS 2 lifecycle node (configured and activated at once); Ctrl-C stops.

    Args:
        model: the exported .onnx policy.
        robot: robot config YAML path, or a name in config/robots.
        rate: control rate (Hz): commands published per second.
        policy_rate: policy evaluations per second; 0 = the model's own control rate.
        seconds: stop after this long (default: run until Ctrl-C).
    """
    from deploy.ros.policy_node import run

    diag = run(model, robot, rate, policy_rate, seconds)
    print(json.dumps(diag))
