"""Measure a device's deadzone and full-scale deflection, and print the calibration to paste.

Devices differ: a SpaceMouse at rest jitters by a few counts, and its full deflection is not
pyspacemouse's nominal 350 counts on every model (some exceed 1.0, others never reach it), so an
uncalibrated device either creeps when untouched or never commands full speed on some axes.
``python -m teleop.calibrate config/teleop/spacemouse.yaml`` records the device untouched, then
while every axis is pushed to its limits, and prints a ``calibration:`` block.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable

import numpy as np
import yaml

from teleop.config import load_teleop_config, make_device
from teleop.devices.base import AXES, TeleopDevice
from teleop.devices.config import AxisCalibration


def fit_calibration(
    rest: np.ndarray, sweep: np.ndarray, sign: tuple[float, ...] = (1.0,) * 6, margin: float = 1.5
) -> tuple[AxisCalibration, list[str]]:
    """Deadzone from the rest jitter (× ``margin``), scale from the largest deflection per axis.

    Args:
        rest: (N, 6) raw values with the device untouched.
        sweep: (M, 6) raw values while each axis was pushed both ways to its limit.
        sign: kept from the existing calibration (a set-up choice, not a measurement).

    Returns:
        the calibration, and notes for axes that could not be measured (never moved, or noisy at rest).
    """
    jitter = np.max(np.abs(rest), axis=0)
    reach = np.max(np.abs(sweep), axis=0)
    notes = []
    deadzone = np.minimum(jitter * margin, 0.5)
    scale = np.ones(6)
    for i, axis in enumerate(AXES):
        if reach[i] <= 2 * max(jitter[i], 1e-3):
            notes.append(f"{axis}: never moved clearly beyond rest noise (reach {reach[i]:.3f}); scale left at 1")
            continue
        if jitter[i] * margin > 0.5:
            notes.append(f"{axis}: rest jitter {jitter[i]:.3f} is large — re-centre the device or check it")
        # full deflection must map to 1 *after* the rescaled deadzone: (reach - dz) / (1 - dz) * scale = 1
        scale[i] = (1.0 - deadzone[i]) / max(reach[i] - deadzone[i], 1e-6)
    cal = AxisCalibration(
        deadzone=tuple(np.round(deadzone, 3)), scale=tuple(np.round(scale, 3)), sign=tuple(map(float, sign))
    )
    return cal, notes


def record(device: TeleopDevice, seconds: float, rate_hz: float = 100.0, clock: Callable[[], float] = time.monotonic):
    """(N, 6) raw samples read for ``seconds``; stops early if the device disconnects."""
    samples = []
    end = clock() + seconds
    while clock() < end:
        reading = device.read()
        if not reading.connected:
            raise RuntimeError(f"device disconnected during calibration: {reading.reason}")
        samples.append(reading.raw if reading.raw is not None else reading.twist)
        time.sleep(1.0 / rate_hz)
    return np.array(samples).reshape(-1, 6)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="teleop YAML (config/teleop/*.yaml)")
    parser.add_argument("--rest-s", type=float, default=3.0)
    parser.add_argument("--sweep-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    config = load_teleop_config(args.config)
    device = make_device(config)
    device.open()
    try:
        input(f"Leave the device untouched, then press Enter ({args.rest_s:g} s)... ")
        rest = record(device, args.rest_s)
        input(f"Push every axis both ways to its limit after Enter ({args.sweep_s:g} s)... ")
        sweep = record(device, args.sweep_s)
    finally:
        device.close()
    sign = getattr(getattr(config.device, "calibration", None), "sign", (1.0,) * 6)
    cal, notes = fit_calibration(rest, sweep, sign)
    for note in notes:
        print("note:", note)
    print(yaml.safe_dump({"calibration": {k: list(v) for k, v in dataclasses.asdict(cal).items()}}, sort_keys=False))


if __name__ == "__main__":
    main()
