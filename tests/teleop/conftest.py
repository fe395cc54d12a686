"""pygame/SDL without a screen, sound card or input devices: the dummy video and audio drivers."""

from __future__ import annotations

import os

import pytest

os.environ["SDL_VIDEODRIVER"] = "dummy"
os.environ["SDL_AUDIODRIVER"] = "dummy"
os.environ["PYGAME_HIDE_SUPPORT_PROMPT"] = "1"


@pytest.fixture
def sdl():
    """pygame's display (for the event queue) and joystick modules, initialised; a clean queue."""
    import pygame

    pygame.display.init()
    pygame.joystick.init()
    pygame.event.clear()
    yield pygame
    pygame.event.clear()
    pygame.joystick.quit()
    pygame.display.quit()
