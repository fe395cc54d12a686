"""reflexlab.dataset with cameras: MP4 round trips, dropped frames, recovery, a full disk, and SIGKILL mid-recording.

Real ffmpeg (imageio-ffmpeg's binary), real files. The disk-full tests fill a real filesystem: a file-size rlimit in a
child process (EFBIG, needs nothing special) and a small tmpfs mounted in a private mount namespace (ENOSPC, needs
``unshare -m``, i.e. root or user namespaces; skipped with the reason otherwise).
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pyarrow.parquet as pq
import pytest

from reflexlab.dataset import (
    EPISODES_PATH,
    INFO_PATH,
    VIDEO_PATH,
    Dataset,
    DatasetError,
    DatasetWriter,
    dropped_column,
    load_dataset,
)
from reflexlab.dataset import writer as dataset_writer

REPO = Path(__file__).resolve().parents[2]
FPS = 30
FEATURES = {"observation.state": (3,), "action": (2,)}
CAMERA = "observation.images.wrist"
SHAPE = (24, 32, 3)
VIDEOS = {CAMERA: SHAPE}
CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def toy_length(episode: int) -> int:
    return 3 + episode % 4


def toy_image(episode: int, t: int) -> np.ndarray:
    """A flat colour per (episode, step) plus a horizontal ramp: survives yuv420p within a few levels."""
    colour = np.array([(40 * episode + 7 * t) % 200, (90 + 13 * t) % 200, (150 + 29 * episode) % 200])
    ramp = np.linspace(0, 40, SHAPE[1])[None, :, None]
    return (colour[None, None, :] + ramp + np.zeros(SHAPE)).astype(np.uint8)


def record_toy_episode(
    writer: DatasetWriter, drop: tuple[int, ...] = (), pause_s: float = 0.0, camera: bool = True
) -> int:
    episode = writer.num_episodes
    for t in range(toy_length(episode)):
        frame = {"observation.state": np.full(3, episode + t / 10), "action": np.array([episode, -t], dtype=np.float64)}
        if camera:
            frame[CAMERA] = None if t in drop else toy_image(episode, t)
        writer.add_frame(frame, reward=float(t))
        time.sleep(pause_s)
    return writer.save_episode(f"task {episode % 2}")


def assert_toy_episode(ds: Dataset, i: int, drop: tuple[int, ...] = ()) -> None:
    length = toy_length(i)
    ep = ds.episode(i)
    np.testing.assert_array_equal(ep["action"][:, 0], np.full(length, i, dtype=np.float32))
    if CAMERA not in ds.video_features:
        return
    frames = np.stack(list(ds.video_frames(i, CAMERA)))
    assert frames.shape == (length, *SHAPE) and frames.dtype == np.uint8
    for t in range(length):
        source = max((s for s in range(t + 1) if s not in drop), default=None)  # a dropped frame repeats the last one
        want = np.zeros(SHAPE) if source is None else toy_image(i, source).astype(float)
        error = np.abs(frames[t].astype(float) - want)
        assert error.mean() < 4.0 and error.max() <= 16, f"episode {i} frame {t}: error {error.mean()}/{error.max()}"
    np.testing.assert_array_equal(ep[dropped_column(CAMERA)], [t in drop for t in range(length)])
    meta = ds.episode_meta(i)
    assert meta[f"videos/{CAMERA}/dropped_frames"] == len(drop)
    assert meta[f"videos/{CAMERA}/to_timestamp"] == pytest.approx(length / FPS)


def frame_pts(path: Path) -> list[float]:
    """Presentation times of every frame as ffmpeg itself reports them (showinfo filter)."""
    run = subprocess.run(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-i", str(path), "-vf", "showinfo", "-f", "null", "-"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(t) for t in re.findall(r"pts_time:\s*([0-9.]+)", run.stderr)]


# --- round trip --------------------------------------------------------------------------------------------------
def test_camera_frames_round_trip_with_lerobot_metadata(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path, FPS, "toy", FEATURES, videos=VIDEOS) as writer:
        record_toy_episode(writer)
        record_toy_episode(writer, drop=(0, 2))
    with DatasetWriter(tmp_path, FPS, "toy", FEATURES, videos=VIDEOS) as writer:  # append after reopening
        record_toy_episode(writer)
    ds = load_dataset(tmp_path)
    assert (ds.num_episodes, ds.video_features, ds.vector_features) == (3, VIDEOS, FEATURES)
    for i in range(3):
        assert_toy_episode(ds, i, drop=(0, 2) if i == 1 else ())
        path = ds.video_path(i, CAMERA)
        assert path == tmp_path / VIDEO_PATH.format(video_key=CAMERA, chunk_index=0, file_index=i)
        np.testing.assert_allclose(frame_pts(path), np.arange(toy_length(i)) / FPS, atol=1e-3)

    info = json.loads((tmp_path / INFO_PATH).read_text())
    assert info["video_path"] == VIDEO_PATH and info["total_videos"] == 3
    feature = info["features"][CAMERA]
    assert (feature["dtype"], feature["shape"], feature["names"]) == (
        "video",
        [24, 32, 3],
        ["height", "width", "channels"],
    )
    assert feature["info"]["video.codec"] == "h264" and feature["info"]["video.pix_fmt"] == "yuv420p"
    assert feature["info"]["video.fps"] == FPS and feature["info"]["video.is_depth_map"] is False
    assert info["features"][dropped_column(CAMERA)] == {"dtype": "bool", "shape": [1], "names": None}
    columns = pq.read_schema(tmp_path / EPISODES_PATH).names
    for name in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
        assert f"videos/{CAMERA}/{name}" in columns
    assert list(tmp_path.rglob("*.mp4")) and not list(tmp_path.rglob("*.tmp"))


def test_writer_refuses_bad_cameras_and_names_backward_timestamps(tmp_path: Path) -> None:
    for videos, key in [
        ({CAMERA: (25, 32, 3)}, CAMERA),
        ({CAMERA: (24, 32)}, CAMERA),
        ({"../escape": SHAPE}, "../escape"),
        ({"action": SHAPE}, "action"),
    ]:
        with pytest.raises(DatasetError) as err:
            DatasetWriter(tmp_path / "refused", FPS, "toy", FEATURES, videos=videos)
        assert err.value.key == key
    vectors = {"observation.state": np.zeros(3), "action": np.zeros(2)}
    with DatasetWriter(tmp_path, FPS, "toy", FEATURES, videos=VIDEOS) as writer:
        for image in (np.zeros(SHAPE, np.float32), np.zeros((24, 32, 4), np.uint8)):
            with pytest.raises(DatasetError, match="uint8") as err:
                writer.add_frame({**vectors, CAMERA: image})
            assert (err.value.key, err.value.episode) == (CAMERA, 0)
        with pytest.raises(DatasetError, match="pass None") as err:
            writer.add_frame(vectors)
        writer.add_frame({**vectors, CAMERA: np.zeros(SHAPE, np.uint8)}, measured_timestamp=2.0)
        writer.add_frame({**vectors, CAMERA: np.zeros(SHAPE, np.uint8)}, measured_timestamp=2.5)
        with pytest.raises(DatasetError) as err:
            writer.add_frame({**vectors, CAMERA: np.zeros(SHAPE, np.uint8)}, measured_timestamp=2.25)
        message = str(err.value)
        assert err.value.key == "measured_timestamp" and "episode 0" in message and "frame 2" in message
        assert "2.25" in message and "2.5" in message
        writer.discard_episode()
        assert not list(tmp_path.rglob("*.tmp")), "discarding must remove the episode's temp video"
    with pytest.raises(DatasetError) as err:
        DatasetWriter(tmp_path, FPS, "toy", FEATURES, videos={CAMERA: (48, 64, 3)})
    assert err.value.key == f"features.{CAMERA}"


def test_missing_or_broken_videos_are_named_and_crash_debris_is_removed(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path, FPS, "toy", FEATURES, videos=VIDEOS) as writer:
        record_toy_episode(writer)
        record_toy_episode(writer)
    ds = load_dataset(tmp_path)
    ds.video_path(1, CAMERA).write_bytes(b"not an mp4")
    with pytest.raises(DatasetError) as err:
        list(ds.video_frames(1, CAMERA))
    assert (err.value.episode, err.value.key) == (1, CAMERA)
    ds.video_path(1, CAMERA).unlink()
    with pytest.raises(DatasetError, match="missing") as err:
        load_dataset(tmp_path)
    assert (err.value.episode, err.value.key) == (1, CAMERA)

    # What a crash leaves: a finished but uncommitted video (episode 2) and an encoder's temp file (episode 3).
    ds_dir = tmp_path / "crashed"
    with DatasetWriter(ds_dir, FPS, "toy", FEATURES, videos=VIDEOS) as writer:
        record_toy_episode(writer)
    orphan = ds_dir / VIDEO_PATH.format(video_key=CAMERA, chunk_index=0, file_index=1)
    orphan.write_bytes(b"renamed into place, info.json never committed")
    temp = orphan.with_name("file-002.mp4.tmp")
    temp.write_bytes(b"half an episode")
    assert load_dataset(ds_dir).num_episodes == 1
    with DatasetWriter(ds_dir, FPS, "toy", FEATURES, videos=VIDEOS) as writer:
        assert not orphan.exists() and not temp.exists()
        record_toy_episode(writer)
    ds = load_dataset(ds_dir)
    for i in range(2):
        assert_toy_episode(ds, i)


# --- a full disk -------------------------------------------------------------------------------------------------
def fill_disk(folder: Path) -> Path:
    """Write a ballast file until the filesystem refuses (ENOSPC); deleting it gives the space back."""
    ballast = folder / "ballast"
    with open(ballast, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
    return ballast


def disk_full_child(root: str, how: str, cameras: str) -> None:
    """Runs in a child: records, meets a full disk, checks the dataset is as before, frees space, records on."""
    import resource

    root_path = Path(root)
    camera = cameras == "cameras"
    with DatasetWriter(root_path, FPS, "toy", FEATURES, videos=VIDEOS if camera else None) as writer:
        record_toy_episode(writer, camera=camera)
        if how == "rlimit":  # EFBIG: no file may grow past its current size
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))
            free = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # noqa: E731
        else:  # ENOSPC: a tmpfs filled to the last block
            ballast = fill_disk(root_path.parent)
            free = ballast.unlink
        # The vectors' save: refused, dataset unchanged, frames kept; after freeing space the same save succeeds.
        with pytest.raises(DatasetError) as err:
            record_toy_episode(writer, camera=camera)
        assert "disk full" in str(err.value) and f"dataset {root_path}" in str(err.value), err.value
        assert err.value.episode == 1, err.value
        ds = load_dataset(root_path)
        assert ds.num_episodes == 1
        assert_toy_episode(ds, 0)
        if err.value.key == CAMERA:  # the encoder met the full disk: that episode's video is lost
            with pytest.raises(DatasetError, match="discard_episode"):
                writer.save_episode("task 1")
            writer.discard_episode()
            free()
            assert record_toy_episode(writer, camera=camera) == 1
        else:
            assert "still buffered" in str(err.value)
            free()
            assert writer.save_episode("task 1") == 1
        record_toy_episode(writer, camera=camera)
    ds = load_dataset(root_path)
    assert ds.num_episodes == 3
    for i in range(3):
        assert_toy_episode(ds, i)
    assert not list(root_path.rglob("*.tmp"))
    print(f"ok {err.value.key}")


def test_a_save_that_fails_after_placing_the_videos_can_be_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window between the videos' rename and the meta: a retry reuses the finished videos."""
    publish = dataset_writer.publish_meta
    failures = iter([OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))])

    def publish_once_failing(*args: object) -> None:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        publish(*args)

    with DatasetWriter(tmp_path, FPS, "toy", FEATURES, videos=VIDEOS) as writer:
        record_toy_episode(writer)
        monkeypatch.setattr(dataset_writer, "publish_meta", publish_once_failing)
        with pytest.raises(DatasetError, match=r"disk full.*still buffered") as err:
            record_toy_episode(writer, drop=(1,))
        assert err.value.episode == 1 and load_dataset(tmp_path).num_episodes == 1
        with pytest.raises(DatasetError, match="save again or discard"):
            writer.add_frame({"observation.state": np.zeros(3), "action": np.zeros(2), CAMERA: None})
        assert writer.save_episode("task 1") == 1
    ds = load_dataset(tmp_path)
    assert_toy_episode(ds, 0)
    assert_toy_episode(ds, 1, drop=(1,))


def run_child(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=CHILD_ENV, cwd=REPO, timeout=timeout)


CHILD = "import sys; from tests.reflexlab.test_dataset_video import {} as f; f(*sys.argv[1:])"


@pytest.mark.parametrize("cameras", ["vectors", "cameras"])
def test_full_disk_by_file_size_limit_keeps_the_dataset_and_the_frames(tmp_path: Path, cameras: str) -> None:
    argv = [sys.executable, "-c", CHILD.format("disk_full_child"), str(tmp_path / "ds"), "rlimit", cameras]
    run = run_child(argv)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stdout + run.stderr


@pytest.mark.parametrize("cameras", ["vectors", "cameras"])
def test_full_tmpfs_keeps_the_dataset_and_the_frames(tmp_path: Path, cameras: str) -> None:
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a mount namespace for a private tmpfs (unshare -m: {probe.stderr.strip()})")
    mount = tmp_path / "small"
    mount.mkdir()
    script = 'mount -t tmpfs -o size=2m tmpfs "$1" && exec "$2" -c "$3" "$1/ds" tmpfs "$4"'
    child = CHILD.format("disk_full_child")
    argv = ["unshare", "-m", "sh", "-c", script, "sh", str(mount), sys.executable, child, cameras]
    run = run_child(argv)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stdout + run.stderr


# --- SIGKILL -----------------------------------------------------------------------------------------------------
def record_until_killed(root: str, pause_s: str) -> None:
    """The kill test's child: records camera episodes until SIGKILL, reporting each save once it has returned."""
    with DatasetWriter(Path(root), FPS, "toy", FEATURES, videos=VIDEOS) as writer:
        print("ready", flush=True)
        while True:
            print(f"saved {record_toy_episode(writer, pause_s=float(pause_s))}", flush=True)


def test_sigkill_while_recording_video_never_loses_a_saved_episode(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    rng = random.Random(20261203)
    reported: set[int] = set()
    checked = 0
    for attempt in range(6):
        pause_s = 0.01 if attempt % 2 else 0.0  # odd children record in "real time": most kills land mid-episode
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD.format("record_until_killed"), str(root), str(pause_s)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=CHILD_ENV,
            cwd=REPO,
        )
        assert child.stdout is not None
        if child.stdout.readline() != "ready\n":
            child.kill()
            pytest.fail(f"writer child failed to start: {child.communicate()[1]}")
        time.sleep(rng.uniform(0.1, 0.6))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        reported |= {int(line.split()[1]) for line in out.splitlines() if line.startswith("saved ")}

        ds = load_dataset(root)  # as the crash left it, before any writer recovers it
        assert reported <= set(range(ds.num_episodes)), f"attempt {attempt}: saved episodes lost"
        for i in range(checked, ds.num_episodes):  # earlier ones were checked after an earlier kill
            assert_toy_episode(ds, i)
        checked = ds.num_episodes
    assert len(reported) >= 8, "the children saved too little for the test to mean anything"

    with DatasetWriter(root, FPS, "toy", FEATURES, videos=VIDEOS) as writer:
        record_toy_episode(writer)
    ds = load_dataset(root)
    for i in range(ds.num_episodes):
        assert_toy_episode(ds, i)
    assert len(list(root.rglob("*.mp4"))) == ds.num_episodes and not list(root.rglob("*.tmp"))


def test_camera_stats_are_lerobots_per_channel_form_over_every_encoded_frame(tmp_path: Path) -> None:
    """stats.json: per channel (3, 1, 1) in [0, 1], count in frames, q01..q99; exact across a reopened writer."""
    drops = {0: (), 1: (1,), 2: (0, 2)}
    encoded = []
    for session in ((0, 1), (2,)):  # the second session reopens the dataset: its stats come back from stats.json
        with DatasetWriter(tmp_path, FPS, "toy", FEATURES, videos=VIDEOS) as writer:
            for episode in session:
                record_toy_episode(writer, drop=drops[episode])
    for episode, drop in drops.items():
        held = np.zeros(SHAPE, np.uint8)  # what the encoder got: a dropped step repeats the last frame (black first)
        for t in range(toy_length(episode)):
            held = held if t in drop else toy_image(episode, t)
            encoded.append(held)
    pixels = np.stack(encoded).reshape(len(encoded), -1, 3).astype(np.float64)
    stats = json.loads((tmp_path / "meta" / "stats.json").read_text())[CAMERA]
    assert stats["count"] == [len(encoded)] == [load_dataset(tmp_path).num_frames]
    for name in ("mean", "std", "min", "max", "q01", "q10", "q50", "q90", "q99"):
        assert np.asarray(stats[name]).shape == (3, 1, 1), name
    np.testing.assert_allclose(np.ravel(stats["mean"]), pixels.reshape(-1, 3).mean(axis=0) / 255, rtol=1e-9)
    np.testing.assert_allclose(np.ravel(stats["std"]), pixels.reshape(-1, 3).std(axis=0) / 255, rtol=1e-9)
    np.testing.assert_array_equal(np.ravel(stats["max"]), pixels.reshape(-1, 3).max(axis=0) / 255)
    per_frame = np.quantile(pixels, 0.5, axis=1, method="inverted_cdf")  # merged as LeRobot merges them
    np.testing.assert_allclose(np.ravel(stats["q50"]), per_frame.mean(axis=0) / 255, rtol=1e-9)
    assert load_dataset(tmp_path).stats[CAMERA] == stats
