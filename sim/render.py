"""Camera frames of simulated scenes: what a camera policy sees in sim (demos with cameras, evaluation).

Offscreen rendering with `mujoco.Renderer` needs ``MUJOCO_GL=egl`` (or ``osmesa``) set before MuJoCo is
imported (the CLI and the test suite set it). Software EGL takes ~2–36 ms per frame here depending on
size, so scenes are rendered only when a policy or dataset asks for a camera.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import imageio.v2 as imageio
import mujoco
import numpy as np


class SceneRenderer:
    """Renders a named MJCF camera of many `MjData` (one model) to uint8 RGB frames (N, H, W, 3).

    One `mujoco.Renderer` per frame size, created on first use and kept (its GL context belongs to the
    thread that created it). ``close`` frees them.
    """

    def __init__(self, model: mujoco.MjModel) -> None:
        self.model = model
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}

    @property
    def cameras(self) -> list[str]:
        return [self.model.camera(i).name for i in range(self.model.ncam)]

    def render(self, datas: Sequence[mujoco.MjData], camera: str, height: int, width: int) -> np.ndarray:
        if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
            raise ValueError(
                f"the scene has no camera {camera!r}; its MJCF cameras: {', '.join(self.cameras) or 'none'}"
            )
        size = (int(height), int(width))
        renderer = self._renderers.get(size)
        if renderer is None:
            renderer = self._renderers[size] = mujoco.Renderer(self.model, *size)
        out = np.empty((len(datas), *size, 3), np.uint8)
        for i, data in enumerate(datas):
            renderer.update_scene(data, camera=camera)
            out[i] = renderer.render()
        return out

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()


def write_video(path: Path, frames: list[np.ndarray], fps: int) -> None:
    """An H.264 MP4 of RGB frames (a rollout for a person to watch)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with imageio.get_writer(path, fps=fps, codec="libx264", quality=7, macro_block_size=8) as w:
        for f in frames:
            w.append_data(f)
