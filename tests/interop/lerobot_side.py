"""LeRobot's side of the interop checks: runs in LeRobot's own venv (``make setup-lerobot``), imports nothing of ours.

Each sub-command does what a LeRobot user would do with a dataset folder and writes what it saw to files that
`tests/interop/test_lerobot.py` compares with our own reader:

* ``load ROOT OUT``: ``LeRobotDataset`` on ROOT; every item (vectors, scalars, task string, decoded frames as uint8),
  windows queried with ``delta_timestamps``, ``meta.stats`` -> OUT/items.npz, OUT/windows.npz, OUT/meta.json.
* ``train ROOT``: one optimiser step of LeRobot's diffusion policy on ROOT through LeRobot's own pre-processor,
  normalising with the dataset's stats; prints the loss and which features the normaliser had stats for.
* ``workers ROOT OUT``: the items again through a ``DataLoader`` with 2 worker processes (as LeRobot's trainer
  reads), frames and indices -> OUT/workers.npz.
* ``aggregate OUT ROOT...``: ``aggregate_datasets`` of the ROOTs into OUT, then loads OUT.
* ``write ARRAYS OUT``: a dataset written by LeRobot's own writer (``LeRobotDataset.create``/``add_frame``/
  ``save_episode``) from the episodes in ARRAYS (npz: ``ep{i}.{feature}``; images as uint8 HWC), fps/task in its
  ``meta`` entry.

Decoding a frame in the parent before DataLoader workers start breaks the workers' decoding ("Could not push packet
to decoder: Invalid data found when processing input"): LeRobot caches torchcodec decoders per file and the forked
workers inherit them. It happens the same way on a dataset LeRobot's own writer made, so it is LeRobot's behaviour,
not our files': ``workers`` starts its workers before anything is decoded, as LeRobot's trainer does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

REPO_ID = "reflexlab/interop"  # a local name only: nothing is fetched from a hub (HF_HUB_OFFLINE=1)


def _as_array(value: object) -> np.ndarray:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _frame_uint8(frames: torch.Tensor) -> np.ndarray:
    """(…, C, H, W) float in [0, 1] -> (…, H, W, C) uint8: LeRobot divides the decoded uint8 by 255."""
    return np.moveaxis((frames.numpy() * 255.0).round().astype(np.uint8), -3, -1)


def load(root: Path, out: Path) -> None:
    dataset = LeRobotDataset(REPO_ID, root=root)
    cameras = dataset.meta.video_keys
    items: dict[str, list[np.ndarray]] = {}
    tasks = []
    for i in range(len(dataset)):
        item = dataset[i]
        tasks.append(item.pop("task"))
        for key, value in item.items():
            items.setdefault(key, []).append(_frame_uint8(value) if key in cameras else _as_array(value))
    np.savez(out / "items.npz", **{key: np.stack(values) for key, values in items.items()})
    fps = dataset.fps
    deltas = {"action": [k / fps for k in range(4)], "observation.state": [-2 / fps, -1 / fps, 0.0]}
    deltas |= {key: [-1 / fps, 0.0] for key in cameras}
    windowed = LeRobotDataset(REPO_ID, root=root, delta_timestamps=deltas)
    windows: dict[str, list[np.ndarray]] = {}
    for i in range(len(windowed)):
        item = windowed[i]
        for key in [*deltas, *(f"{k}_is_pad" for k in deltas)]:
            value = item[key]
            windows.setdefault(key, []).append(_frame_uint8(value) if key in cameras else _as_array(value))
    np.savez(out / "windows.npz", **{key: np.stack(values) for key, values in windows.items()})
    stats = {key: {stat: np.asarray(v).tolist() for stat, v in s.items()} for key, s in dataset.meta.stats.items()}
    meta = {
        "tasks": tasks,
        "fps": fps,
        "num_episodes": dataset.num_episodes,
        "cameras": cameras,
        "stats": stats,
        "deltas": deltas,
    }
    (out / "meta.json").write_text(json.dumps(meta))


def train(root: Path) -> None:
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    meta = LeRobotDataset(REPO_ID, root=root).meta
    config = DiffusionConfig(device="cpu", down_dims=(32, 64), n_action_steps=4, horizon=8, num_inference_steps=2)
    config.crop_shape = None  # frames as recorded
    policy = make_policy(config, ds_meta=meta)
    dataset = LeRobotDataset(REPO_ID, root=root, delta_timestamps=resolve_delta_timestamps(config, meta))
    preprocessor, _ = make_pre_post_processors(config, dataset_stats=meta.stats)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=0)
    raw = next(iter(loader))
    batch = preprocessor(raw)
    normalised = {}
    for key in (*policy.config.image_features, "observation.state", "action"):
        # mean/std-normalised frames leave [0, 1]; min/max-normalised vectors land in [-1, 1]
        normalised[key] = not torch.equal(batch[key].cpu(), raw[key])
    optimiser = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    policy.train()
    loss, _ = policy.forward(batch)
    loss.backward()
    optimiser.step()
    print(json.dumps({"loss": float(loss), "normalised": normalised, "images": list(policy.config.image_features)}))


def workers(root: Path, out: Path) -> None:
    dataset = LeRobotDataset(REPO_ID, root=root)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=2)
    seen: dict[str, list[np.ndarray]] = {"index": []}
    for batch in loader:
        seen["index"].append(batch["index"].numpy())
        for key in dataset.meta.video_keys:
            seen.setdefault(key, []).append(_frame_uint8(batch[key]))
    np.savez(out / "workers.npz", **{key: np.concatenate(values) for key, values in seen.items()})


def aggregate(out: Path, roots: list[Path]) -> None:
    from lerobot.datasets.aggregate import aggregate_datasets

    aggregate_datasets([f"{REPO_ID}-{k}" for k in range(len(roots))], REPO_ID, roots=roots, aggr_root=out)
    dataset = LeRobotDataset(REPO_ID, root=out)
    last = dataset[len(dataset) - 1]
    print(
        json.dumps(
            {
                "frames": len(dataset),
                "episodes": dataset.num_episodes,
                "tasks": list(dataset.meta.tasks.index),
                "last_episode_index": int(last["episode_index"]),
            }
        )
    )


def write(arrays: Path, out: Path) -> None:
    data = np.load(arrays)
    meta = json.loads(str(data["meta"]))
    features = {}
    for key, shape in meta["vectors"].items():
        features[key] = {"dtype": "float32", "shape": tuple(shape), "names": None}
    for key, shape in meta["videos"].items():
        features[key] = {"dtype": "video", "shape": tuple(shape), "names": ["height", "width", "channels"]}
    dataset = LeRobotDataset.create(REPO_ID, fps=meta["fps"], features=features, root=out, robot_type="panda")
    for episode in range(meta["episodes"]):
        length = len(data[f"ep{episode}.action"])
        for t in range(length):
            frame = {key: data[f"ep{episode}.{key}"][t] for key in features}
            dataset.add_frame({**frame, "task": meta["task"]})
        dataset.save_episode()
    dataset.finalize()
    print(json.dumps({"episodes": dataset.num_episodes, "frames": dataset.num_frames}))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "load":
        load(Path(args[0]), Path(args[1]))
    elif command == "train":
        train(Path(args[0]))
    elif command == "workers":
        workers(Path(args[0]), Path(args[1]))
    elif command == "aggregate":
        aggregate(Path(args[0]), [Path(a) for a in args[1:]])
    elif command == "write":
        write(Path(args[0]), Path(args[1]))
    else:
        raise SystemExit(f"unknown command {command!r}: load, workers, train, aggregate or write")
