"""A user with onnxruntime and numpy, nothing of ours: runs an exported file from its metadata alone.

`test_onnx_metadata` starts this script in a bare interpreter (``python -I``). It reads the
``reflexlab_*`` metadata through onnxruntime, assembles the raw observation terms it is given in the
stated order, keeps a generator's history and draws its noise as stated, runs the session, executes a
chunk from the stated current index, and maps every action to a robot target as ``reflexlab_action``
says. Usage::

    python -I bare_onnx_user.py MODEL FEED.npz RESULT.npz

FEED.npz: ``steps``; ``obs/<step>/<term>`` raw term values; ``image/<step>/<camera>`` uint8 frames
(3, H, W) for a model with cameras; ``seed`` for the noise; ``start_target``, the target before the
first step (the rate limit counts from it). RESULT.npz: ``actions`` and ``targets`` per step, ``chunks``
(the raw outputs) and for a generator ``noise`` (every draw). The last stdout line is a JSON list of
the modules of ours (or torch, MuJoCo) that got imported: it must be empty.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnxruntime as ort

FORMAT = "reflexlab.onnx/1"
OURS = {"reflexlab", "deploy", "policies", "sim", "real", "teleop", "calib", "tests", "torch", "mujoco"}


def main(model: str, feed_path: str, result_path: str) -> None:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    if meta.get("reflexlab_format") != FORMAT:
        raise SystemExit(f"not a {FORMAT} file: {meta.get('reflexlab_format')!r}")
    inputs = json.loads(meta["reflexlab_inputs"])
    outputs = json.loads(meta["reflexlab_outputs"])
    action = json.loads(meta["reflexlab_action"])
    rate_hz = json.loads(meta["reflexlab_control_rate_hz"])
    generator = meta["reflexlab_kind"] == "generator"
    chunk = json.loads(meta["reflexlab_chunk"]) if generator else None
    feed = np.load(feed_path)

    obs_input = inputs["obs"]
    if obs_input["caller_scaling"] != "none":
        raise SystemExit(f"this user feeds raw values; the file asks for {obs_input['caller_scaling']!r}")
    ((out_name, out_desc),) = outputs.items()
    cameras = [name for name, spec in inputs.items() if spec["dtype"] == "uint8"]
    noise_spec = inputs.get("noise")
    if noise_spec is not None and noise_spec["distribution"] != "standard_normal":
        raise SystemExit(f"unknown noise distribution {noise_spec['distribution']!r}")
    rng = np.random.default_rng(int(feed["seed"]))

    offset, scale = np.asarray(action["offset"], np.float64), float(action["scale"])
    lower, upper = np.asarray(action["lower"], np.float64), np.asarray(action["upper"], np.float64)
    previous = np.asarray(feed["start_target"], np.float64)
    histories: dict[str, np.ndarray] = {}
    plan: list[np.ndarray] = []
    actions, targets, chunks, noises = [], [], [], []
    for step in range(int(feed["steps"])):
        obs = np.concatenate(
            [np.asarray(feed[f"obs/{step}/{t['name']}"], np.float32).reshape(t["size"]) for t in obs_input["terms"]]
        )
        if not generator:
            out = session.run([out_name], {"obs": obs[None]})[0][0]
            chunks.append(out)
            a = out
        else:
            newest = {"obs": obs, **{c: feed[f"image/{step}/{c.removeprefix('image.')}"] for c in cameras}}
            for name, value in newest.items():
                length = inputs[name]["shape"][1]
                if name not in histories:  # an episode's start: every slot holds the first observation
                    histories[name] = np.stack([value] * length)
                else:
                    histories[name] = np.concatenate([histories[name][1:], value[None]])
            if not plan:
                shape = [1 if d == "batch" else d for d in noise_spec["shape"]]
                noise = rng.standard_normal(shape, dtype=np.float32) * noise_spec["std"] + noise_spec["mean"]
                feeds = {name: h[None] for name, h in histories.items()} | {"noise": noise.astype(np.float32)}
                out = session.run([out_name], feeds)[0][0]
                bounds = out_desc["clipped_in_graph_to"]
                if bounds is not None:
                    low, high = np.asarray(bounds["lower"]) - 1e-5, np.asarray(bounds["upper"]) + 1e-5
                    if not ((out >= low) & (out <= high)).all():
                        raise SystemExit("the output leaves the bounds the metadata says the graph clips it to")
                noises.append(noise[0])
                chunks.append(out)
                first = chunk["current_index"]
                plan = list(out[first : first + chunk["execute_steps"]])
            a = plan.pop(0)
        target = np.clip(offset + scale * np.asarray(a, np.float64), lower, upper)
        if action["max_rate"] is not None:
            max_step = action["max_rate"] / rate_hz
            delta = target - previous
            if action["max_rate_limits"] == "each dimension":
                delta = np.clip(delta, -max_step, max_step)
            else:  # the vector's Euclidean norm
                norm = float(np.linalg.norm(delta))
                delta = delta * min(1.0, max_step / norm) if norm > 0 else delta
            target = previous + delta
        previous = target
        actions.append(np.asarray(a, np.float64))
        targets.append(target)
    result = {"actions": np.stack(actions), "targets": np.stack(targets), "chunks": np.stack(chunks)}
    if generator:
        result["noise"] = np.stack(noises)
    np.savez(result_path, **result)
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in OURS)))


if __name__ == "__main__":
    main(*sys.argv[1:])
