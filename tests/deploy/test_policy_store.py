"""deploy.policy_store: the versioned policy folder between a real-world RL learner and its actor.

Real ONNX files (the tiny quadruped generator of conftest, exported by `export_generator`), real onnxruntime sessions
through `StepActor`; a half-synced copy, a crash mid-publish, a failed parity check, another task's policy and a file
that is not ONNX are each shown to leave the actor on its last good version.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from deploy import policy_store
from deploy.onnx_export import export_generator
from deploy.policy_store import PolicyFollower, PolicyStore, PolicyStoreError
from tests.deploy.conftest import GENERATOR_SPEC, TINY_FACTS, Generator, TinyGenerator

META = {"checkpoint_sha256": "0" * 64, "teacher": "none (test)"}


def obs() -> np.ndarray:
    return np.zeros(GENERATOR_SPEC.policy_obs.size)


def test_published_versions_are_picked_up_between_episodes(generator: Generator, tmp_path: Path) -> None:
    store = PolicyStore(tmp_path / "policies")
    follower = PolicyFollower(store, GENERATOR_SPEC)
    assert follower.refresh() is None and follower.actor is None and store.latest() is None
    first = store.publish(generator.path, round=0, parity_error=2e-7, tolerance=1e-5, info={"episodes": 0})
    assert first.version == 1 and first.path.read_bytes() == generator.path.read_bytes()
    assert first.record["round"] == 0 and first.record["spec"] == GENERATOR_SPEC.to_dict()
    assert follower.refresh() == first and follower.version == 1
    assert follower.actor is not None and follower.actor.act(obs()).shape == (GENERATOR_SPEC.action.size,)
    assert follower.refresh() is None  # nothing newer: the actor keeps its policy (and its plan)
    second = store.publish(generator.path, round=1, parity_error=0.0, tolerance=1e-5)
    assert [v.version for v in store.versions()] == [1, 2] and store.latest(GENERATOR_SPEC, after=1) == second
    assert follower.refresh() == second and follower.version == 2


def test_a_half_synced_version_is_invisible_until_complete(generator: Generator, tmp_path: Path) -> None:
    """rsync/Syncthing may copy the record before the model, or the model in pieces: neither is taken early."""
    source, mirror = PolicyStore(tmp_path / "learner"), PolicyStore(tmp_path / "actor")
    published = source.publish(generator.path, round=0, parity_error=0.0, tolerance=1e-5)
    mirror.root.mkdir()
    shutil.copy(source.root / "v000001.json", mirror.root)  # the record arrived first
    assert mirror.versions() == [] and mirror.latest() is None
    data = published.path.read_bytes()
    (mirror.root / published.path.name).write_bytes(data[: len(data) // 2])  # then half the model
    assert mirror.versions() == []
    (mirror.root / published.path.name).write_bytes(data)
    assert [v.version for v in mirror.versions()] == [1]


def test_a_learner_killed_mid_publish_leaves_nothing_deployable_and_no_reused_number(
    generator: Generator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PolicyStore(tmp_path)

    def killed(path: Path, value: object) -> None:
        raise KeyboardInterrupt  # dies after the model's rename, before the record's

    monkeypatch.setattr(policy_store, "write_json_atomically", killed)
    with pytest.raises(KeyboardInterrupt):
        store.publish(generator.path, round=0, parity_error=0.0, tolerance=1e-5)
    monkeypatch.undo()
    assert (tmp_path / "v000001.onnx").exists() and store.versions() == []
    assert store.publish(generator.path, round=0, parity_error=0.0, tolerance=1e-5).version == 2


def test_a_version_failing_its_parity_check_is_never_deployed(generator: Generator, tmp_path: Path) -> None:
    store = PolicyStore(tmp_path)
    follower = PolicyFollower(store, GENERATOR_SPEC)
    store.publish(generator.path, round=0, parity_error=0.0, tolerance=1e-5)
    assert follower.refresh() is not None
    for error in (3e-4, float("nan")):
        with pytest.raises(PolicyStoreError, match=r"version \d rejected, not deployed: export parity error"):
            store.publish(generator.path, round=1, parity_error=error, tolerance=1e-5)
    assert set(store.rejected()) == {2, 3} and "over the tolerance" in store.rejected()[2]
    assert not (tmp_path / "v000002.onnx").exists()
    assert follower.refresh() is None and follower.version == 1
    assert store.publish(generator.path, round=2, parity_error=0.0, tolerance=1e-5).version == 4


def test_another_tasks_policy_is_named_and_skipped_the_actor_keeps_the_last_good(
    generator: Generator, tmp_path: Path
) -> None:
    store = PolicyStore(tmp_path / "policies")
    store.publish(generator.path, round=0, parity_error=0.0, tolerance=1e-5)
    other_spec = dataclasses.replace(GENERATOR_SPEC, task="quadruped-jump")
    other = tmp_path / "other.onnx"
    export_generator(TinyGenerator(other_spec).eval(), other_spec, other, META, TINY_FACTS)
    store.publish(other, round=1, parity_error=0.0, tolerance=1e-5)
    follower = PolicyFollower(store, GENERATOR_SPEC)
    assert follower.refresh() is not None and follower.version == 1  # v2 skipped, v1 deployed
    assert "v000002.onnx" in follower.skipped[2] and "quadruped-jump" in follower.skipped[2]
    with pytest.raises(PolicyStoreError, match=r"v000002\.onnx is for another robot or task.*task"):
        store.latest(GENERATOR_SPEC)
    assert follower.refresh() is None  # skipped once, not retried every episode


def test_a_file_that_is_not_a_policy_is_rejected_at_publish(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not an onnx file")
    store = PolicyStore(tmp_path / "policies")
    with pytest.raises(PolicyStoreError, match=r"junk\.onnx is not a readable reflexlab ONNX file"):
        store.publish(junk, round=0, parity_error=0.0, tolerance=1e-5)
    assert store.versions() == [] and json.loads((store.root / "v000001.rejected.json").read_text())["round"] == 0


def test_the_learner_says_how_many_episodes_it_wants(tmp_path: Path) -> None:
    store = PolicyStore(tmp_path / "store")
    assert store.wanted() is None  # no word yet: an actor collects without limit
    store.want(12)
    assert PolicyStore(tmp_path / "store").wanted() == 12  # another process (the actor) reads it
    store.want(None)
    assert store.wanted() is None


def test_a_policy_reading_cameras_the_actor_does_not_record_is_skipped(
    generator: Generator, camera_generator: Generator, tmp_path: Path
) -> None:
    store = PolicyStore(tmp_path / "policies")
    store.publish(generator.path, round=0, parity_error=0.0, tolerance=1e-5)
    store.publish(camera_generator.path, round=1, parity_error=0.0, tolerance=1e-5)
    blind = PolicyFollower(store, GENERATOR_SPEC)
    assert blind.refresh() is not None and blind.version == 1
    assert "reads camera(s) ['front'] and this actor records none" in blind.skipped[2]
    seeing = PolicyFollower(store, GENERATOR_SPEC, cameras=("front",))
    assert seeing.refresh() is not None and seeing.version == 2 and seeing.actor.cameras == ("front",)
