"""A person's device, in the robot's base frame, as the arm env's `Intervention`.

`teleop` knows devices, frames and arbitration but no robot; `real.tasks` knows the action space
but no device. This joins them for end-effector tasks: the device twist is mapped into the base
frame (`teleop.frames.FrameMapper`, the tool frame using the measured end-effector orientation)
and integrated into an end-effector target, which the task turns into its action.

The target integrates from where the person *commanded* the arm, not from where it is measured:
an impedance-controlled arm lags its target, and re-anchoring on the measurement every step would
make the arm slower than the stick asks. The target is kept inside what the task can command (no
wind-up at the workspace edge), and re-anchored on the measured pose whenever the
person takes over again, so a takeover never starts with a jump.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from real.env import Decision
from real.ros_arm import ArmState
from real.tasks import ArmTask
from teleop.arbiter import InterventionArbiter
from teleop.config import TeleopConfig, load_teleop_config, make_device
from teleop.devices.base import TeleopDevice, TeleopReading
from teleop.frames import FrameMapper
from teleop.intervention import DeviceIntervention

TELEOP_CONFIG_DIR = Path(__file__).resolve().parents[1] / "config" / "teleop"


class ArmIntervention:
    """`real.env.Intervention` for an end-effector task: device + arbiter + base-frame target integration.

    Args:
        device: an opened teleop device.
        config: its teleop config (frame mapping and arbitration).
        task: the arm task (maps an end-effector position to an action).
        dt: the control period (s): one step integrates twist × dt.
    """

    def __init__(self, device: TeleopDevice, config: TeleopConfig, task: ArmTask, dt: float) -> None:
        if config.frame.mode != "twist":
            raise ValueError(f"an end-effector task needs frame.mode: twist, got {config.frame.mode!r}")
        self.task, self.dt = task, dt
        self.mapper = FrameMapper(config.frame)
        self.arbiter = InterventionArbiter(config.arbiter)
        self._device = DeviceIntervention(device, self.arbiter, self._teleop_action)
        self._target: np.ndarray | None = None
        self._step = 0
        self._last_teleop_step = -2

    def decide(self, policy_action: np.ndarray, hold_action: np.ndarray, state: ArmState) -> Decision:
        self._step += 1
        s = self._device.decide(policy_action, hold_action, state)
        return Decision(s.action, s.is_intervention, s.source, s.reason)

    def reset(self, seed: int | None = None) -> None:
        self._device.reset(seed)
        self._target = None
        self._last_teleop_step = -2

    def close(self) -> None:
        self._device.device.close()

    @property
    def last_reading(self) -> TeleopReading | None:
        return self._device.last_reading

    def _teleop_action(self, reading: TeleopReading, state: ArmState) -> np.ndarray:
        if self._target is None or self._last_teleop_step != self._step - 1:
            self._target = state.ee_pos.copy()  # a fresh takeover starts where the arm is
        self._last_teleop_step = self._step
        twist = self.mapper.twist(reading.twist, state.ee_quat)
        # Clipped as it integrates: pushing into the workspace edge for 5 s must not take 5 s to undo.
        self._target = self.task.clip_ee(self._target + twist[:3] * self.dt)
        return self.task.ee_action(self._target)


def make_intervention(teleop: str, task: ArmTask, dt: float) -> ArmIntervention:
    """Open the device named by a teleop config (a name in config/teleop, or a YAML path)."""
    path = Path(teleop)
    if not path.suffix:
        path = TELEOP_CONFIG_DIR / f"{teleop}.yaml"
    if not path.exists():
        shipped = ", ".join(sorted(p.stem for p in TELEOP_CONFIG_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"teleop config {teleop!r} not found (shipped: {shipped}; or give a YAML path)")
    config = load_teleop_config(path)
    device = make_device(config)
    device.open()
    return ArmIntervention(device, config, task, dt)
