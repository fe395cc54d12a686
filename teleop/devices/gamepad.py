"""A game controller through pygame's joystick API (SDL 2), with unplug detection.

SDL facts this module is built around (pygame 2.6.1 / SDL 2.28.4, measured with SDL's virtual
joystick under ``SDL_VIDEODRIVER=dummy``):

* An unplugged joystick does not raise: the ``Joystick`` object stays "initialised" and its axes,
  buttons and hats read 0 — a gamepad that silently reads zero. The only signal is the
  ``JOYDEVICEREMOVED`` event (preceded by events that zero every input), so ``read()`` watches
  for it and reports ``connected=False``; a ``JOYDEVICEADDED`` of the same device reconnects.
* Analogue triggers are axes resting at -1.0, not 0 (SDL's game-controller layout, axes 4 and 5);
  an unmapped -1 would command full speed, so triggers are remapped to [0, 1]. Some drivers report
  0 for a trigger until it is first touched; a trigger therefore counts as released until it has
  been seen at rest (-1) once.
* Event axis values are ``raw / 32767`` (-32768 gives -1.00003); values are clipped to [-1, 1].
* By default SDL drops joystick input while the app's window is not focused; the
  ``SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS`` hint is set so a gamepad works beside any other window.
* Joystick events must be consumed or the SDL queue fills and later events (the removal) are lost;
  ``read()`` takes only joystick events (``pygame.event.get(eventtype=...)``), so keyboard events
  stay for `teleop.devices.keyboard`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import numpy as np

os.environ.setdefault("SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS", "1")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
import pygame

from teleop.devices.base import AXES, TeleopDeviceError, TeleopReading, disconnected, shape_axes
from teleop.devices.config import AxisSource, GamepadConfig

log = logging.getLogger(__name__)

_JOY_EVENTS = (
    pygame.JOYAXISMOTION,
    pygame.JOYBALLMOTION,
    pygame.JOYHATMOTION,
    pygame.JOYBUTTONDOWN,
    pygame.JOYBUTTONUP,
    pygame.JOYDEVICEADDED,
    pygame.JOYDEVICEREMOVED,
)


def init_pygame_events() -> None:
    """Initialise what pygame's event queue needs (its display module) and the joystick module."""
    if not pygame.display.get_init():
        pygame.display.init()
    if not pygame.joystick.get_init():
        pygame.joystick.init()


class Gamepad:
    """A gamepad as a `TeleopDevice`; the mapping from sticks/triggers/hats/buttons comes from config."""

    def __init__(self, config: GamepadConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._joy: pygame.joystick.JoystickType | None = None
        self._guid = ""
        self._reason = "not opened"

    def open(self) -> None:
        init_pygame_events()
        pygame.event.pump()  # let SDL see devices attached since init
        count = pygame.joystick.get_count()
        names = [pygame.joystick.Joystick(i).get_name() for i in range(count)]
        if self.config.name_contains is not None:
            wanted = self.config.name_contains.lower()
            index = next((i for i, n in enumerate(names) if wanted in n.lower()), None)
            if index is None:
                raise TeleopDeviceError(
                    f"name_contains: no joystick named like {wanted!r}; connected: {names or 'none'}"
                )
        else:
            index = self.config.index
            if index >= count:
                raise TeleopDeviceError(
                    f"index: joystick {index} not present; connected: {names or 'none'} (is it paired/plugged in, "
                    "and readable: /dev/input/event* needs the 'input' group)"
                )
        self._attach(pygame.joystick.Joystick(index))

    def _attach(self, joy: pygame.joystick.JoystickType) -> None:
        joy.init()
        self._check_mapping(joy)
        self._joy, self._guid, self._reason = joy, joy.get_guid(), ""
        # a trigger that already reads -1 is known to be at rest; others wait for their first rest
        self._trigger_seen_rest = {
            src.trigger: joy.get_axis(src.trigger) <= -0.99
            for sources in self.config.twist.values()
            for src in sources
            if src.trigger is not None
        }
        log.info("opened gamepad %r (%s)", joy.get_name(), self._guid)

    def _check_mapping(self, joy: pygame.joystick.JoystickType) -> None:
        limits = {"axis": joy.get_numaxes(), "trigger": joy.get_numaxes(), "hat": joy.get_numhats()}
        limits["button"] = joy.get_numbuttons()
        for name, sources in self.config.twist.items():
            for src in sources:
                for kind, n in limits.items():
                    i = getattr(src, kind)
                    if i is not None and i >= n:
                        raise TeleopDeviceError(f"twist.{name}: {joy.get_name()!r} has {n} {kind}s, no {kind} {i}")
        for name, i in self.config.buttons.items():
            if i >= limits["button"]:
                raise TeleopDeviceError(f"buttons.{name}: {joy.get_name()!r} has {limits['button']} buttons, no {i}")

    def close(self) -> None:
        if self._joy is not None and self._joy.get_init():
            self._joy.quit()
        self._joy = None

    def read(self) -> TeleopReading:
        now = self._clock()
        for event in pygame.event.get(eventtype=_JOY_EVENTS):
            if event.type == pygame.JOYDEVICEREMOVED and self._joy is not None:
                if event.instance_id == self._joy.get_instance_id():
                    self._reason = f"gamepad {self._joy.get_name()!r} removed (SDL JOYDEVICEREMOVED)"
                    log.error(self._reason)
                    self.close()
            elif event.type == pygame.JOYDEVICEADDED and self._joy is None and event.guid == self._guid:
                self._attach(pygame.joystick.Joystick(event.device_index))
        if self._joy is None:
            return disconnected(self._reason, now)
        raw = np.array([sum(self._source(src) for src in self.config.twist.get(axis, ())) for axis in AXES])
        cal = self.config.calibration
        twist = shape_axes(raw, cal.deadzone, cal.scale, cal.sign)  # type: ignore[arg-type]
        buttons = {name: bool(self._joy.get_button(i)) for name, i in self.config.buttons.items()}
        return TeleopReading(twist, buttons, now, raw=raw)

    def _source(self, src: AxisSource) -> float:
        joy = self._joy
        assert joy is not None
        if src.axis is not None:
            value = joy.get_axis(src.axis)
        elif src.trigger is not None:
            value = joy.get_axis(src.trigger)
            self._trigger_seen_rest[src.trigger] |= value <= -0.99
            value = (value + 1.0) / 2.0 if self._trigger_seen_rest[src.trigger] else 0.0
        elif src.hat is not None:
            value = joy.get_hat(src.hat)[0 if src.hat_axis == "x" else 1]
        else:
            value = joy.get_button(src.button)
        return src.sign * float(np.clip(value, -1.0, 1.0))
