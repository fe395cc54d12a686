"""The teacher's noise → chunk map, drawn once before distillation.

Both students learn the teacher's deterministic sampler (DDIM η = 0, or Euler) as a *coupling*
of noise and chunk. Consistency distillation regresses the student's one step onto the teacher's
chunk from the same noise (RL-100). The MeanFlow student learns the average velocity of the
straight paths between each noise and the teacher's chunk from it: a reflowed coupling (Liu et
al., rectified flow), whose paths do not cross where the teacher's map is smooth, so the
average velocity over [0, 1] is exactly ε − chunk and one step recovers the teacher's sample.
Learnt from data instead, MeanFlow must discover that map itself from independent (ε, A) pairs;
with a 15-minute CPU budget it reached 0.26 mean max coverage on panda-push-t where the teacher
had 0.42.

Drawing the pairs once (as Luhman & Luhman's knowledge distillation does) rather than running the
K-step teacher inside every training step is the other reason: with the teacher in the loop a
consistency step cost 3.7× a plain training step (1.9 vs 7 steps/s for a (32, 64, 128) U-Net), so
a student saw ~1,000 batches in 10 minutes. ``per_window`` noise draws per training window keep
the teacher's spread of modes at every state in the set.

With cameras, a sample keeps the index of its window rather than a copy of the window's frames
(8 draws of a 96×96 window of 2 frames would copy 440 kB per window): `gather` fetches them from
the `ChunkWindows` when a batch is drawn.

`TeacherSamples.load_or_draw` keeps the draw in the teacher's run folder, keyed by everything the
samples depend on (the teacher checkpoint's hash, sampling steps, draws per window, seed and the
windows' observations and frames): 72,704 teacher@100 pairs cost ~16 CPU-minutes on panda-push-t,
and every student of a teacher (consistency, MeanFlow, each ablation) learns the same pairs.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from policies.generative.data import ChunkWindows
from policies.generative.policy import GenerativePolicy
from reflexlab.io import replace_atomically

CACHE_FORMAT = 1


@dataclass(frozen=True)
class TeacherSamples:
    """Triples (obs (N, To, n) raw, noise (N, H, A), teacher chunk (N, H, A) raw), N = windows × draws.

    With cameras also ``window`` (N,), each sample's window in ``windows``, whose frames `gather`
    appends as a fourth element (B, To, K, 3, H, W).
    """

    obs: torch.Tensor
    noise: torch.Tensor
    chunk: torch.Tensor
    window: torch.Tensor | None = None
    windows: ChunkWindows | None = None

    def __len__(self) -> int:
        return len(self.obs)

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.obs[idx], self.noise[idx], self.chunk[idx]
        if self.window is None or self.windows is None:
            return out
        return (*out, self.windows.gather_images(self.window[idx]))

    @classmethod
    @torch.no_grad()
    def draw(
        cls,
        teacher: GenerativePolicy,
        windows: ChunkWindows,
        per_window: int,
        steps: int,
        seed: int = 0,
        batch_size: int = 4096,
        device: str = "cpu",
        progress: bool = True,
    ) -> TeacherSamples:
        """Sample the teacher at ``steps`` (its deterministic sampler) from ``per_window`` noises per window."""
        if per_window < 1:
            raise ValueError(f"per_window must be >= 1, got {per_window}")
        all_obs = windows.obs[windows.obs_index]
        cameras = teacher.image_encoders is not None
        if not cameras:
            return cls.draw_at(teacher, all_obs, per_window, steps, seed, batch_size, device, progress)
        if windows.images is None:
            raise ValueError(f"the teacher reads cameras {list(teacher.image_keys)} but the episodes carry no images")
        teacher = teacher.eval().to(device)
        gen = torch.Generator().manual_seed(seed)
        obs = all_obs.repeat(per_window, 1, 1)
        window = torch.arange(len(windows)).repeat(per_window)
        noise = torch.randn((len(obs), teacher.cfg.horizon, teacher.cfg.action_dim), generator=gen)
        chunk = torch.empty_like(noise)
        with tqdm(total=len(obs), desc=f"teacher@{steps} samples", file=sys.stderr, disable=not progress) as bar:
            # Cameras: encode each window's frames once (in eval mode the condition is deterministic), in
            # small batches (conv activations of 4096 windows would take GBs), and share it over the draws.
            cond = torch.cat(
                [
                    teacher.condition(
                        all_obs[sl].to(device), windows.gather_images(torch.arange(len(windows))[sl]).to(device)
                    )
                    for sl in (slice(i, i + 256) for i in range(0, len(windows), 256))
                ]
            )
            for start in range(0, len(obs), batch_size):
                sl = slice(start, start + batch_size)
                x = teacher.sample_normalized(cond[window[sl].to(device)], noise[sl].to(device), steps)
                chunk[sl] = teacher.action_norm.unnormalize(x).cpu()
                bar.update(len(chunk[sl]))
        _check_finite(chunk)
        return cls(obs, noise, chunk, window, windows)

    @classmethod
    @torch.no_grad()
    def draw_at(
        cls,
        teacher: GenerativePolicy,
        states: torch.Tensor,
        per_state: int,
        steps: int,
        seed: int = 0,
        batch_size: int = 4096,
        device: str = "cpu",
        progress: bool = True,
    ) -> TeacherSamples:
        """A state-only teacher's samples at observation histories ``states`` (M, To, n) raw, ``per_state``
        noises each: the windows of a dataset (`draw`) or the states a student visited (`dagger`)."""
        if per_state < 1:
            raise ValueError(f"per_state must be >= 1, got {per_state}")
        if teacher.image_encoders is not None:
            raise ValueError(f"the teacher reads cameras {list(teacher.image_keys)}: draw its samples from windows")
        teacher = teacher.eval().to(device)
        gen = torch.Generator().manual_seed(seed)
        obs = states.repeat(per_state, 1, 1)
        noise = torch.randn((len(obs), teacher.cfg.horizon, teacher.cfg.action_dim), generator=gen)
        chunk = torch.empty_like(noise)
        with tqdm(total=len(obs), desc=f"teacher@{steps} samples", file=sys.stderr, disable=not progress) as bar:
            for start in range(0, len(obs), batch_size):
                sl = slice(start, start + batch_size)
                chunk[sl] = teacher.sample(obs[sl].to(device), noise[sl].to(device), steps).cpu()
                bar.update(len(chunk[sl]))
        _check_finite(chunk)
        return cls(obs, noise, chunk)

    def __add__(self, other: TeacherSamples) -> TeacherSamples:
        """Both sets of samples (state-only): DAgger's aggregate of the dataset's and the visited states'."""
        if self.window is not None or other.window is not None:
            raise ValueError("only state-only teacher samples can be concatenated")
        return TeacherSamples(
            *(
                torch.cat([a, b])
                for a, b in ((self.obs, other.obs), (self.noise, other.noise), (self.chunk, other.chunk))
            )
        )

    @classmethod
    def load_or_draw(
        cls,
        teacher: GenerativePolicy,
        teacher_sha256: str,
        windows: ChunkWindows,
        per_window: int,
        steps: int,
        cache_dir: Path,
        seed: int = 0,
        device: str = "cpu",
        progress: bool = True,
    ) -> tuple[TeacherSamples, bool]:
        """(samples, whether they came from ``cache_dir``): `draw`'s samples, drawn once per key and kept.

        A cache file that cannot be read or does not match its key (a killed writer cannot leave one:
        files are replaced atomically) is reported on stderr and drawn again.
        """
        key = _cache_key(teacher_sha256, windows, per_window, steps, seed)
        path = Path(cache_dir) / f"teacher{steps}_x{per_window}_seed{seed}_{key[:16]}.pt"
        if path.exists():
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
                if state.get("format") != CACHE_FORMAT or state.get("key") != key:
                    raise ValueError("it was written for other samples (its key differs)")
                window = state["window"]
                return cls(
                    state["obs"], state["noise"], state["chunk"], window, windows if window is not None else None
                ), True
            except Exception as e:  # any unreadable cache is drawn again, never trusted
                print(f"teacher samples cache {path} is unusable ({e}); drawing them again", file=sys.stderr)
        samples = cls.draw(teacher, windows, per_window, steps, seed=seed, device=device, progress=progress)
        state = {"format": CACHE_FORMAT, "key": key, "window": samples.window}
        state |= {"obs": samples.obs, "noise": samples.noise, "chunk": samples.chunk}
        replace_atomically(path, lambda tmp: torch.save(state, tmp))
        return samples, False


def _check_finite(chunk: torch.Tensor) -> None:
    if not torch.isfinite(chunk).all():
        raise FloatingPointError("the teacher produced non-finite chunks: its checkpoint is broken")


def _cache_key(teacher_sha256: str, windows: ChunkWindows, per_window: int, steps: int, seed: int) -> str:
    """What a draw depends on: the teacher's weights, its steps, the noise (seed, count) and the windows' inputs."""
    h = hashlib.sha256(f"{CACHE_FORMAT}|{teacher_sha256}|{steps}|{per_window}|{seed}".encode())
    for t in (windows.obs, windows.obs_index, windows.images):
        if t is not None:
            h.update(str((tuple(t.shape), t.dtype)).encode())
            h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()
