"""The keyboard as a teleop device: held keys drive twist axes at full scale (pygame key events).

Key state is tracked from ``KEYDOWN``/``KEYUP`` events rather than ``pygame.key.get_pressed()``
so that what a test or another program posts with ``pygame.event.post`` drives it exactly as a
person would. When the window loses focus every key counts as released: SDL does not send the
``KEYUP`` of a key let go elsewhere, and a key stuck "down" is a robot that keeps moving.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import numpy as np

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
import pygame

from teleop.devices.base import TeleopDeviceError, TeleopReading, parse_signed_axis
from teleop.devices.config import KeyboardConfig

log = logging.getLogger(__name__)

_EVENTS = (pygame.KEYDOWN, pygame.KEYUP, pygame.WINDOWFOCUSLOST)


class Keyboard:
    """Keys → twist; logical buttons (deadman, toggle) are keys too."""

    def __init__(self, config: KeyboardConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._held: set[int] = set()

    def open(self) -> None:
        if not pygame.display.get_init():
            pygame.display.init()
        if self.config.window and pygame.display.get_surface() is None:
            pygame.display.set_mode((360, 80))
            pygame.display.set_caption("reflexlab teleop — keep this window focused")
        self._axes = {self._code(k, f"keys.{k}"): parse_signed_axis(a) for k, a in self.config.keys.items()}
        self._buttons = {name: self._code(k, f"buttons.{name}") for name, k in self.config.buttons.items()}
        self._held.clear()

    @staticmethod
    def _code(name: str, where: str) -> int:
        try:
            return pygame.key.key_code(name)
        except ValueError:
            raise TeleopDeviceError(
                f"{where}: {name!r} is not a pygame key name (e.g. 'w', 'up', 'left shift')"
            ) from None

    def close(self) -> None:
        self._held.clear()

    def read(self) -> TeleopReading:
        for event in pygame.event.get(eventtype=_EVENTS):
            if event.type == pygame.KEYDOWN:
                self._held.add(event.key)
            elif event.type == pygame.KEYUP:
                self._held.discard(event.key)
            else:
                self._held.clear()
        twist = np.zeros(6)
        for code in self._held:
            if code in self._axes:
                index, sign = self._axes[code]
                twist[index] += sign
        buttons = {name: code in self._held for name, code in self._buttons.items()}
        return TeleopReading(np.clip(twist, -1.0, 1.0), buttons, self._clock())
