"""SDL's virtual joystick, reached through ctypes on the SDL2 library pygame bundles.

``SDL_JoystickAttachVirtual`` makes a device that pygame's joystick API sees like a plugged-in
pad; ``SDL_JoystickSetVirtualAxis/Button/Hat`` move its inputs (applied when SDL next pumps
events) and ``SDL_JoystickDetachVirtual`` unplugs it, with the same ``JOYDEVICEREMOVED`` event.
"""

from __future__ import annotations

import ctypes
import glob
import os

import pygame

SDL_JOYSTICK_TYPE_UNKNOWN = 0  # axes start at 0 (the game-controller type starts axes 4/5 at -1)
HAT = {(0, 0): 0, (0, 1): 1, (1, 0): 2, (0, -1): 4, (-1, 0): 8}


def _sdl() -> ctypes.CDLL:
    """The SDL2 that pygame already loaded (the same handle, so the same joystick subsystem)."""
    root = os.path.dirname(pygame.__file__)
    paths = glob.glob(os.path.join(root, "..", "pygame.libs", "libSDL2-2*.so*")) + glob.glob(
        os.path.join(root, "libSDL2-2*.so*")
    )
    lib = ctypes.CDLL(paths[0])
    lib.SDL_JoystickAttachVirtual.argtypes = [ctypes.c_int] * 4
    lib.SDL_JoystickDetachVirtual.argtypes = [ctypes.c_int]
    lib.SDL_JoystickOpen.argtypes = [ctypes.c_int]
    lib.SDL_JoystickOpen.restype = ctypes.c_void_p
    lib.SDL_JoystickClose.argtypes = [ctypes.c_void_p]
    lib.SDL_JoystickInstanceID.argtypes = [ctypes.c_void_p]
    lib.SDL_JoystickGetDeviceInstanceID.argtypes = [ctypes.c_int]
    lib.SDL_JoystickSetVirtualAxis.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int16]
    lib.SDL_JoystickSetVirtualButton.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint8]
    lib.SDL_JoystickSetVirtualHat.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint8]
    lib.SDL_GetError.restype = ctypes.c_char_p
    return lib


class VirtualJoystick:
    """A virtual pad: ``set_axis(i, -1..1)``, ``set_button(i, down)``, ``set_hat(i, (x, y))``, ``unplug()``."""

    def __init__(self, axes: int = 6, buttons: int = 11, hats: int = 1) -> None:
        self.sdl = _sdl()
        index = self.sdl.SDL_JoystickAttachVirtual(SDL_JOYSTICK_TYPE_UNKNOWN, axes, buttons, hats)
        if index < 0:
            raise RuntimeError(f"SDL_JoystickAttachVirtual failed: {self.sdl.SDL_GetError().decode()}")
        self.handle = self.sdl.SDL_JoystickOpen(index)
        self.instance_id = self.sdl.SDL_JoystickInstanceID(self.handle)

    def set_axis(self, axis: int, value: float) -> None:
        raw = -32768 if value <= -1.0 else round(value * 32767)
        assert self.sdl.SDL_JoystickSetVirtualAxis(self.handle, axis, raw) == 0

    def set_button(self, button: int, down: bool) -> None:
        assert self.sdl.SDL_JoystickSetVirtualButton(self.handle, button, int(down)) == 0

    def set_hat(self, hat: int, value: tuple[int, int]) -> None:
        assert self.sdl.SDL_JoystickSetVirtualHat(self.handle, hat, HAT[value]) == 0

    def unplug(self) -> None:
        index = next(
            i
            for i in range(pygame.joystick.get_count())
            if self.sdl.SDL_JoystickGetDeviceInstanceID(i) == self.instance_id
        )
        self.sdl.SDL_JoystickClose(self.handle)
        assert self.sdl.SDL_JoystickDetachVirtual(index) == 0
