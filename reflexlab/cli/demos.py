"""`reflexlab demos`: scripted-expert demonstrations, the dataset `bc` learns from."""

from __future__ import annotations

from pathlib import Path


def demos(
    task: str = "panda-push-t",
    episodes: int = 200,
    out: Path = Path("runs/panda-push-t/demos"),
    seed: int = 0,
    num_envs: int = 8,
    cameras: tuple[str, ...] = (),
    image_size: int = 96,
) -> None:
    """Record scripted-expert demonstrations (successful episodes only) in the LeRobot v3 episode format.

    Args:
        task: a demonstration task (e.g. panda-push-t).
        episodes: successful episodes to record.
        out: dataset folder (appended to when it exists).
        seed: seed of the first episode (episode k of a batch uses seed + k).
        num_envs: scenes simulated together.
        cameras: MJCF cameras to record as videos observation.images.CAMERA (panda-push-t: side, top).
        image_size: side of the square camera frames, pixels.
    """
    from sim.demos import record_demos

    s = record_demos(task, episodes, out, seed=seed, num_envs=num_envs, cameras=cameras, image_size=image_size)
    print(
        f"recorded {s.episodes} episodes ({s.attempted} attempted, expert success {s.expert_success_rate:.0%}, "
        f"mean {s.mean_length:.0f} steps) into {out}; {s.two_sided_steps} steps in two-sided detours "
        f"({s.detour_fraction_ccw:.0%} of detour steps counter-clockwise)"
    )
