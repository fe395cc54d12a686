"""Every kind of exported file explains itself: a bare onnxruntime user, reading only its metadata, commands
the same robot targets as our runtime (`StepActor`, the runner's action mapping and the safety filter)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from deploy.artifact import METADATA_FORMAT, read_metadata, spec_of
from deploy.onnx_export import export_verified_generator
from deploy.runner import OnnxGenerator, OnnxPolicy
from deploy.safety import SafetyFilter
from deploy.step_actor import StepActor
from policies.generative.normalizer import MinMaxNormalizer
from policies.generative.policy import GenerativePolicy, PolicyConfig, PolicyOptions
from reflexlab.cli import main
from reflexlab.robot import SafetyLimits
from reflexlab.spec import ImageInput, Spec
from tests.deploy.conftest import GENERATOR_SPEC

BARE_USER = Path(__file__).with_name("bare_onnx_user.py")
STEPS = 10  # two and a half chunks at execution_horizon 4: re-plans and a part-used plan
OPTS = PolicyOptions(down_dims=(16, 32), time_embed_dim=16, encoder_hidden=32, encoder_dim=16)
CAMERA_OPTS = dataclasses.replace(
    OPTS,
    down_dims=(16,),
    image_keys=("side",),
    image_size=(16, 16),
    image_channels=(8, 16),
    image_keypoints=4,
    image_feature_dim=8,
)
CAMERA_SPEC = dataclasses.replace(GENERATOR_SPEC, images=(ImageInput("side", 16, 16),))


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def _export_generative(tmp_path: Path, method: str, steps: int | None, spec: Spec, options: PolicyOptions) -> Path:
    """An untrained generative policy whose raw actions span ±25, so the targets it maps to hit the joint limits."""
    torch.manual_seed(0)
    n, a = spec.policy_obs.size, spec.action.size
    obs_norm = MinMaxNormalizer.fit(3 * torch.randn(200, n))
    action_norm = MinMaxNormalizer.fit(8 * torch.randn(200, a))
    cfg = PolicyConfig(method, n, a, spec.observation_horizon, spec.action_chunk, options)
    policy = GenerativePolicy(cfg, obs_norm, action_norm).eval()
    checkpoint = policy.save(tmp_path / f"{method}.pt", {"role": "test"})
    obs = np.random.default_rng(1).normal(0, 3, (4, spec.observation_horizon, n)).astype(np.float32)
    images = {i.name: np.zeros((4, spec.observation_horizon, *i.shape), np.uint8) for i in spec.images}
    out = tmp_path / f"{method}.onnx"
    export_verified_generator(policy, spec, {"role": "test"}, checkpoint, out, obs, images, steps)
    return out


def _feed(spec: Spec, seed: int) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Raw observation terms per step (joint velocities up to tens of rad/s: the scales matter) and the feed file."""
    rng = np.random.default_rng(seed)
    terms = [{t.name: rng.normal(0, 3, t.size).astype(np.float32) for t in spec.policy_obs.terms} for _ in range(STEPS)]
    frames = [{i.name: rng.integers(0, 256, i.shape, dtype=np.uint8) for i in spec.images} for _ in range(STEPS)]
    feed = {f"obs/{s}/{k}": v for s, step in enumerate(terms) for k, v in step.items()}
    feed |= {f"image/{s}/{k}": v for s, step in enumerate(frames) for k, v in step.items()}
    # Start far from the first targets (at the lower limits), so the rate limit binds.
    feed |= {"steps": np.array(STEPS), "seed": np.array(seed), "start_target": np.asarray(spec.action.lower)}
    return terms, feed


def _bare_user(model: Path, feed: dict[str, np.ndarray], tmp_path: Path) -> dict[str, np.ndarray]:
    """Run `bare_onnx_user.py` in an isolated interpreter; check that nothing of ours was imported."""
    np.savez(tmp_path / "feed.npz", **feed)
    result = tmp_path / "result.npz"
    r = subprocess.run(
        [sys.executable, "-I", str(BARE_USER), str(model), str(tmp_path / "feed.npz"), str(result)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [], "the bare user imported reflexlab, torch or MuJoCo"
    return dict(np.load(result))


def _targets(model: OnnxPolicy | OnnxGenerator, actions: list[np.ndarray], start: np.ndarray) -> np.ndarray:
    """The controller's mapping: the runner's targets (offset + scale·action) through the safety filter."""
    a = model.spec.action
    filt = SafetyFilter(SafetyLimits(a.names, a.lower, a.upper, a.max_rate), model.spec.control_rate_hz)
    filt.reset(start)
    return np.stack([filt(model.joint_targets(x), 0.0) for x in actions])


def _check_targets(got: dict[str, np.ndarray], spec: Spec, actions: list[np.ndarray], targets: np.ndarray) -> None:
    assert np.abs(got["actions"] - np.stack(actions)).max() <= 1e-5
    assert np.abs(got["targets"] - targets).max() <= 1e-5
    moved = np.abs(got["targets"][0] - np.asarray(spec.action.lower)).max()
    assert moved == pytest.approx(spec.action.max_rate / spec.control_rate_hz), "the rate limit bound at the start"


def test_bare_onnxruntime_user_runs_the_ppo_policy_from_its_metadata(exported, tmp_path: Path) -> None:
    path, _ = exported
    actor = StepActor(path)
    terms, feed = _feed(actor.spec, seed=3)
    got = _bare_user(path, feed, tmp_path)
    actions = [actor.act(actor.model.assemble(t)) for t in terms]
    _check_targets(got, actor.spec, actions, _targets(actor.model, actions, actor.spec.action.lower))


@pytest.mark.parametrize(("method", "steps"), [("consistency", None), ("meanflow", None), ("diffusion", 2)])
def test_bare_onnxruntime_user_runs_generators_from_their_metadata(
    tmp_path: Path, method: str, steps: int | None
) -> None:
    """One-step students and an unrolled teacher: history, noise, current index and re-plans all from the metadata."""
    path = _export_generative(tmp_path, method, steps, GENERATOR_SPEC, OPTS)
    actor = StepActor(path, seed=5)  # draws its noise as the metadata says: standard normal, (1, H, A) per chunk
    terms, feed = _feed(actor.spec, seed=5)
    got = _bare_user(path, feed, tmp_path)
    actions = [actor.act(actor.model.assemble(t)) for t in terms]
    targets = _targets(actor.model, actions, actor.spec.action.lower)
    _check_targets(got, actor.spec, actions, targets)
    assert got["noise"].shape == (3, 8, 12) and abs(got["noise"].std() - 1) < 0.1
    a, unclipped = actor.spec.action, np.stack([actor.model.joint_targets(x) for x in actions])
    assert ((unclipped < a.lower) | (unclipped > a.upper)).any(), "the joint limits clipped some targets"
    bounds = read_metadata(path)["interface"]["outputs"]["action_chunk"]["clipped_in_graph_to"]
    assert np.isclose(got["chunks"], bounds["lower"], atol=1e-5).any(), "the graph's own clip bound somewhere"


def test_bare_onnxruntime_user_feeds_a_camera_generator(tmp_path: Path) -> None:
    path = _export_generative(tmp_path, "consistency", None, CAMERA_SPEC, CAMERA_OPTS)
    gen = OnnxGenerator(path)
    terms, feed = _feed(gen.spec, seed=2)
    feed["steps"] = np.array(1)
    got = _bare_user(path, feed, tmp_path)
    history = np.stack([gen.assemble(terms[0])] * 2)
    frames = np.stack([feed["image/0/side"]] * 2)
    chunk = gen.sample(history, noise=got["noise"][0], images={"side": frames})
    assert np.abs(got["chunks"][0] - chunk).max() <= 1e-5
    assert np.abs(got["actions"][0] - chunk[1]).max() <= 1e-5, "index observation_horizon - 1 is the current step"


def test_metadata_says_what_the_graph_applies(exported, generator, tmp_path: Path) -> None:
    """PPO graphs apply the Spec's scales; generative policies' min-max normalisers replace them and clip actions."""
    policy = read_metadata(exported[0])["interface"]
    assert policy["format"] == METADATA_FORMAT and policy["kind"] == "policy" and "chunk" not in policy
    obs = policy["inputs"]["obs"]
    assert (obs["spec_scales_applied_in_graph"], obs["normalization_in_graph"]) == (True, "none")
    assert [t["name"] for t in obs["terms"]][-1] == "last_action" and obs["terms"][-1]["start"] == 35
    assert policy["outputs"]["action"]["clipped_in_graph_to"] is None
    assert policy["action"]["scale"] == 0.25 and policy["control_rate_hz"] == 50.0
    assert "the graph applies the Spec's per-term scales, so do not scale them" in policy["usage"]

    tiny = read_metadata(generator.path)["interface"]
    assert tiny["inputs"]["obs"]["spec_scales_applied_in_graph"] and "sampling" not in tiny
    assert tiny["chunk"]["current_index"] == 1 and tiny["chunk"]["execute_steps"] == 4

    student = read_metadata(_export_generative(tmp_path, "meanflow", None, GENERATOR_SPEC, OPTS))["interface"]
    obs = student["inputs"]["obs"]
    assert (obs["spec_scales_applied_in_graph"], obs["normalization_in_graph"]) == (False, "min_max")
    assert student["sampling"] == {"method": "meanflow", "network_evaluations": 1, "deterministic_given_noise": True}
    assert student["inputs"]["noise"]["distribution"] == "standard_normal"


def test_inspect_prints_it_for_people(exported, generator, capsys) -> None:
    main(["inspect", str(exported[0])])
    shown = capsys.readouterr().out
    assert "the graph applies the Spec's scales and normalises: none" in shown and "FR_hip_joint" in shown
    assert "joint_vel             23    12        0.05  rad/s" in shown
    main(["inspect", str(generator.path)])
    shown = capsys.readouterr().out
    assert "current step: index 1" in shown and "distribution: standard_normal (mean 0, std 1)" in shown


def _rewrite(path: Path, out: Path, change: dict[str, str | None]) -> Path:
    """``path`` with metadata keys replaced (or dropped, for None)."""
    model = onnx.load(str(path))
    props = {p.key: p.value for p in model.metadata_props}
    props = {k: v for k, v in {**props, **change}.items() if v is not None}
    del model.metadata_props[:]
    for k, v in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.save_model(model, str(out))
    return out


def test_files_from_before_the_format_still_load_and_newer_formats_are_refused(exported, tmp_path, capsys) -> None:
    path = exported[0]
    before = ("reflexlab_spec", "reflexlab_version")  # the only reflexlab_ keys files carried before the format
    dropped = {p.key: None for p in onnx.load(str(path)).metadata_props if p.key.startswith("reflexlab_")}
    old = _rewrite(path, tmp_path / "old.onnx", {k: v for k, v in dropped.items() if k not in before})
    meta: dict[str, Any] = read_metadata(old)
    assert meta["interface"] is None and meta["checkpoint_sha256"] == read_metadata(path)["checkpoint_sha256"]
    assert OnnxPolicy(old).spec == spec_of(path), "serving reads it as before"
    main(["inspect", str(old)])
    assert "Exported before models described themselves" in capsys.readouterr().out
    newer = _rewrite(path, tmp_path / "newer.onnx", {"reflexlab_format": "reflexlab.onnx/2"})
    with pytest.raises(ValueError, match=r"newer than this reflexlab's reflexlab\.onnx/1: upgrade"):
        read_metadata(newer)
