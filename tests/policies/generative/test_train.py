"""The training loops' contract: checkpoints, logs, budgets, seeds, and refusals that name what is wrong."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from policies.generative.dagger import DaggerConfig
from policies.generative.policy import GenerativePolicy
from policies.generative.train import TrainConfig, distill_student, train_teacher
from reflexlab.spec import SpecMismatchError
from tests.policies.generative.toy import TINY, toy_episodes, toy_spec

QUICK = TrainConfig(
    method="flow",
    max_steps=5,
    batch_size=16,
    lr=1e-4,
    warmup_steps=2,
    unexecuted_step_weight=1.0,
    progress=False,
    policy=TINY,
)
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # torch's jvp


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return train_teacher(toy_episodes(16), QUICK, tmp_path_factory.mktemp("teacher"), toy_spec().to_json())


def test_checkpoints_logs_and_spec(tmp_path: Path) -> None:
    cfg = dataclasses.replace(QUICK, checkpoint_every=2, log_every=1)
    final = train_teacher(toy_episodes(16), cfg, tmp_path, toy_spec().to_json())
    assert final.name == "model_5.pt"
    assert sorted(p.name for p in tmp_path.glob("model_*.pt")) == ["model_2.pt", "model_4.pt", "model_5.pt"]
    assert not list(tmp_path.glob("*.tmp"))
    assert list(tmp_path.glob("events.out.tfevents.*")), "TensorBoard scalars in the run directory"
    policy, extra = GenerativePolicy.load(final)
    assert extra["step"] == 5 and extra["stopped_by"] == "max_steps" and extra["role"] == "teacher"
    assert extra["spec"] == toy_spec().to_dict()
    assert extra["train_config"]["method"] == "flow"
    assert (policy.cfg.obs_horizon, policy.cfg.horizon) == (2, 4), "horizons come from the Spec"


def test_time_budget_stops_the_run(tmp_path: Path) -> None:
    final = train_teacher(
        toy_episodes(16), dataclasses.replace(QUICK, time_budget_s=0.0), tmp_path, toy_spec().to_json()
    )
    _, extra = GenerativePolicy.load(final)
    assert final.name == "model_1.pt" and extra["stopped_by"] == "time_budget"


def test_same_seed_same_weights(tmp_path: Path) -> None:
    cfg = dataclasses.replace(QUICK, max_steps=3)
    a = GenerativePolicy.load(train_teacher(toy_episodes(16), cfg, tmp_path / "a", toy_spec().to_json()))[0]
    b = GenerativePolicy.load(train_teacher(toy_episodes(16), cfg, tmp_path / "b", toy_spec().to_json()))[0]
    c = GenerativePolicy.load(
        train_teacher(toy_episodes(16), dataclasses.replace(cfg, seed=1), tmp_path / "c", toy_spec().to_json())
    )[0]
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.encoder.net[1].weight, c.encoder.net[1].weight)


def test_non_finite_loss_is_refused_naming_the_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_loss, calls = GenerativePolicy.loss, []

    def loss_that_breaks(self: GenerativePolicy, obs: torch.Tensor, actions: torch.Tensor):
        loss, logs = real_loss(self, obs, actions)
        calls.append(1)
        return (loss * float("nan"), logs) if len(calls) == 3 else (loss, logs)

    monkeypatch.setattr(GenerativePolicy, "loss", loss_that_breaks)
    with pytest.raises(FloatingPointError, match="at step 3"):
        train_teacher(toy_episodes(16), QUICK, tmp_path, toy_spec().to_json())
    assert not list(tmp_path.glob("model_*.pt"))


def test_distillation_refuses_a_teacher_of_another_spec(teacher: Path, tmp_path: Path) -> None:
    cfg = dataclasses.replace(QUICK, method="consistency")
    with pytest.raises(SpecMismatchError, match="task") as err:
        distill_student(teacher, toy_episodes(16), cfg, tmp_path, toy_spec(task="other").to_json())
    assert err.value.field == "task"


@pytest.mark.parametrize("method", ["consistency", "meanflow"])
def test_students_train_and_record_their_teacher(teacher: Path, tmp_path: Path, method: str) -> None:
    cfg = dataclasses.replace(QUICK, method=method, max_steps=2, teacher_steps=2)
    student, extra = GenerativePolicy.load(
        distill_student(teacher, toy_episodes(16), cfg, tmp_path, toy_spec().to_json())
    )
    assert student.method == method and extra["role"] == "student"
    assert extra["teacher"] == str(teacher) and extra["teacher_method"] == "flow" and len(extra["teacher_sha256"]) == 64


def test_students_of_one_teacher_share_one_draw(tmp_path: Path) -> None:
    teacher = train_teacher(toy_episodes(16), QUICK, tmp_path / "teacher", toy_spec().to_json())
    cached = []
    for method in ("consistency", "meanflow"):
        cfg = dataclasses.replace(QUICK, method=method, max_steps=2, teacher_steps=2)
        ckpt = distill_student(teacher, toy_episodes(16), cfg, tmp_path / method, toy_spec().to_json())
        cached.append(GenerativePolicy.load(ckpt)[1]["teacher_samples_cached"])
    assert cached == [False, True]
    assert len(list((tmp_path / "teacher" / "teacher_samples").glob("*.pt"))) == 1


def test_loops_refuse_wrong_methods_and_data(teacher: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="distill_student"):
        train_teacher(
            toy_episodes(16), dataclasses.replace(QUICK, method="consistency"), tmp_path, toy_spec().to_json()
        )
    with pytest.raises(ValueError, match="consistency or meanflow"):
        distill_student(teacher, toy_episodes(16), QUICK, tmp_path, toy_spec().to_json())
    wide = [{"obs": torch.zeros(4, 3), "action": torch.zeros(4, 1)}]
    with pytest.raises(ValueError, match="3 observation values per step but the Spec's policy group 'policy' has 1"):
        train_teacher(wide, QUICK, tmp_path, toy_spec().to_json())


def test_dispersive_regulariser_is_trained_and_logged(tmp_path: Path) -> None:
    options = dataclasses.replace(TINY, dispersive_weight=0.5)
    cfg = dataclasses.replace(QUICK, method="meanflow", max_steps=2, policy=options)
    policy = GenerativePolicy.load(train_teacher(toy_episodes(16), cfg, tmp_path, toy_spec().to_json()))[0]
    obs, actions = torch.zeros(8, 2, 1), torch.zeros(8, 4, 1)
    obs[:, :, 0] = torch.linspace(-0.5, 0.5, 8)[:, None]
    _, logs = policy.train().loss(obs, actions)
    assert {"meanflow_loss", "dispersive_loss", "loss"} <= set(logs)
    assert logs["loss"] == pytest.approx(logs["meanflow_loss"] + 0.5 * logs["dispersive_loss"], rel=1e-5)


def test_dagger_defaults_to_one_round_for_state_only_consistency_students_only() -> None:
    assert DaggerConfig(rounds=None).for_student("consistency", cameras=False).rounds == 1
    assert DaggerConfig(rounds=None).for_student("meanflow", cameras=False).rounds == 0  # a round can wreck it
    assert DaggerConfig(rounds=None).for_student("consistency", cameras=True).rounds == 0
    assert DaggerConfig(rounds=2).for_student("meanflow", cameras=False).rounds == 2  # asked for: done
    assert DaggerConfig(rounds=1).for_student("consistency", cameras=True).rounds == 1  # refused by distill_student
    assert DaggerConfig().rounds == 0  # a TrainConfig runs none unless told
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        DaggerConfig(episodes=0)
