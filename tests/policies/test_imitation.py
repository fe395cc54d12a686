"""Dataset → teacher → one-step students → ONNX → seeded evaluation, with real (tiny) training runs,
and the refusals on the way: a teacher from another task, a corrupt dataset, wrong-shaped noise."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from deploy.runner import OnnxGenerator, PolicyInputError
from policies.chunk_eval import evaluate_chunks
from policies.generative.dagger import DaggerConfig, visited_states
from policies.generative.policy import GenerativePolicy
from policies.generative.sampler import TorchSampler
from policies.imitation import distill_run, is_generative, load_generative, train_bc_run
from reflexlab.cli.export import export_generative_checkpoint
from reflexlab.dataset import DatasetError, DatasetWriter, load_dataset
from reflexlab.spec import SpecMismatchError
from sim.demos import record_demos

TINY = {"down_dims": (16, 32)}
NO_DAGGER = DaggerConfig(rounds=0)  # `test_dagger_rounds_label_the_states_the_student_visits` runs them


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("imitation")
    demos = root / "demos"
    record_demos("panda-push-t", 4, demos, seed=0, num_envs=4, progress=False)
    teacher = root / "diffusion"
    train_bc_run("diffusion", demos, teacher, 20, None, 0, progress=False, **TINY)
    out = {"demos": demos, "diffusion": teacher}
    for method in ("consistency", "meanflow"):
        out[method] = root / method
        distill_run(
            teacher, method, demos, out[method], 6, None, 0, progress=False, dagger=NO_DAGGER, **DISTILL[method]
        )
    return out


DISTILL = {
    "consistency": {"lr": 5e-4, "teacher_sampling_steps": 3, "unexecuted_step_weight": 0.5, "execution_horizon": 2},
    "meanflow": {},
}


def test_runs_record_their_spec_and_lineage(runs: dict[str, Path]) -> None:
    teacher, spec, extra, _ = load_generative(runs["diffusion"])
    assert (spec.observation_horizon, spec.action_chunk, spec.execution_horizon) == (2, 16, 8)
    assert extra["role"] == "teacher" and teacher.method == "diffusion"
    for method in ("consistency", "meanflow"):
        student, s_spec, s_extra, _ = load_generative(runs[method])
        ta = DISTILL[method].get("execution_horizon", 2)  # a student may re-plan more often than its teacher (8)
        assert student.method == method and s_spec == dataclasses.replace(spec, execution_horizon=ta)
        assert s_extra["role"] == "student" and s_extra["teacher_method"] == "diffusion"
        assert is_generative(runs[method])
        cfg = s_extra["train_config"]
        want = DISTILL[method] or {"lr": 1e-3, "teacher_sampling_steps": 100, "unexecuted_step_weight": 0.1}
        got = (cfg["lr"], cfg["teacher_steps"], cfg["unexecuted_step_weight"])
        assert got == (want["lr"], want["teacher_sampling_steps"], want["unexecuted_step_weight"])
    mf_options = load_generative(runs["meanflow"])[0].cfg.options
    assert (mf_options.meanflow_endpoint_weight, mf_options.meanflow_jump_fraction) == (1.0, 0.0), "distill's defaults"
    assert teacher.cfg.options.meanflow_endpoint_weight == 0.0, "only a distilled student has a teacher's pairs"


@pytest.mark.parametrize(("run", "steps"), [("consistency", None), ("meanflow", None), ("diffusion", 3)])
def test_export_matches_torch_and_rejects_bad_noise(
    runs: dict[str, Path], tmp_path: Path, run: str, steps: int | None
) -> None:
    out = tmp_path / f"{run}.onnx"
    result = export_generative_checkpoint(runs[run], out, steps=steps, num_obs=16)
    assert result["max_abs_error"] <= 1e-4 and result["sampling_steps"] == (steps or 1)
    gen = OnnxGenerator(out)
    s = gen.spec
    ta = 8 if run == "diffusion" else 2  # the ONNX file's Spec keeps the student's own Ta
    assert (s.action_chunk, s.execution_horizon, s.observation_horizon) == (16, ta, 2)
    obs = np.tile(np.array([0.4, 0.1, 0.5, 0.0, 1.0, 0.0], np.float32), (1, 2, 1))  # (batch, To, n)
    chunk = gen.sample(obs, np.zeros((1, 16, 2), np.float32))
    assert chunk.shape == (1, 16, 2) and np.isfinite(chunk).all()
    with pytest.raises(PolicyInputError, match="noise has shape"):
        gen.sample(obs, np.zeros((1, 8, 2), np.float32))


def test_evaluation_is_seeded(runs: dict[str, Path]) -> None:
    policy, spec, _, _ = load_generative(runs["consistency"])
    sampler = TorchSampler(policy, 1)
    a = evaluate_chunks(sampler, spec, [100, 101], noise_seed=3, episode_steps=16)
    b = evaluate_chunks(sampler, spec, [100, 101], noise_seed=3, episode_steps=16)
    np.testing.assert_array_equal(a.max_coverage, b.max_coverage)
    assert spec.execution_horizon == 2 and a.replans == 8 and a.steps.tolist() == [16, 16]  # Ta from the Spec
    summary = a.summary()
    assert set(summary) == {
        "mean_max_coverage", "mean_max_coverage_sem", "success_rate", "success_rate_sem", "mean_steps",
    }  # fmt: skip
    assert summary["mean_max_coverage_sem"] == pytest.approx(a.max_coverage.std(ddof=1) / np.sqrt(2))


def test_ensembled_evaluation_is_the_policy_nodes_ensembling(runs: dict[str, Path]) -> None:
    """Ensembling re-plans every step; over one chunk (Ta = 1) it is exactly the receding execution."""
    from reflexlab.chunking import ChunkConfig

    policy, spec, _, _ = load_generative(runs["consistency"])
    torch_sampler = TorchSampler(policy, 1)

    def visited(ta: int, chunking: ChunkConfig | None = None) -> tuple[int, np.ndarray]:
        """(re-plans, every observation history the policy was asked about)."""
        seen = []

        def sampler(obs: np.ndarray, noise: np.ndarray) -> np.ndarray:
            seen.append(obs[:, -1].copy())
            return torch_sampler(obs, noise)

        res = evaluate_chunks(
            sampler, dataclasses.replace(spec, execution_horizon=ta), [100, 101], 3, 12, chunking=chunking
        )
        return res.replans, np.stack(seen)

    receding, ensembled = visited(1), visited(1, ChunkConfig("ensemble"))
    assert receding[0] == ensembled[0] == 12
    np.testing.assert_array_equal(ensembled[1], receding[1])
    averaged, open_loop = visited(4, ChunkConfig("ensemble", 0.0)), visited(4)
    assert (averaged[0], open_loop[0]) == (12, 3)
    assert not np.allclose(averaged[1][[0, 4, 8]], open_loop[1]), "averaged chunks move the pusher elsewhere"


def test_evaluation_films_the_first_episode(runs: dict[str, Path], tmp_path: Path) -> None:
    policy, spec, _, _ = load_generative(runs["consistency"])
    video = tmp_path / "rollout.mp4"
    res = evaluate_chunks(TorchSampler(policy, 1), spec, [100, 101], episode_steps=5, video=video, video_camera="side")
    frames = np.stack(list(_frames(video)))
    assert frames.shape == (res.steps[0] + 1, 240, 320, 3)  # the initial state, then one frame per control step
    assert frames.std() > 10  # a rendered scene, not a blank image


def _frames(path: Path) -> Iterator[np.ndarray]:
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path), input_params=["-nostdin"])
    w, h = next(reader)["size"]
    for raw in reader:
        yield np.frombuffer(raw, np.uint8).reshape(h, w, 3)


def test_distillation_refuses_a_teacher_for_another_task(runs: dict[str, Path], tmp_path: Path) -> None:
    ds = load_dataset(runs["demos"])
    other = dataclasses.replace(ds.spec, task="panda-push-l")
    with DatasetWriter(
        tmp_path / "other", fps=ds.fps, robot_type=ds.robot_type, features=ds.vector_features, spec=other
    ) as w:
        ep = ds.episode(0)
        for k in range(len(ep["action"])):
            w.add_frame({key: ep[key][k] for key in ds.vector_features})
        w.save_episode("panda-push-l")
    with pytest.raises(SpecMismatchError, match="task"):
        distill_run(
            runs["diffusion"], "consistency", tmp_path / "other", tmp_path / "student", 2, None, 0, progress=False
        )


def test_distillation_refuses_an_execution_horizon_the_chunk_cannot_hold(runs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="execution_horizon 16"):
        distill_run(
            runs["diffusion"], "consistency", runs["demos"], tmp_path / "s", 2, None, 0, progress=False,
            execution_horizon=16,
        )  # fmt: skip


def test_dagger_rounds_label_the_states_the_student_visits(runs: dict[str, Path], tmp_path: Path) -> None:
    """Two rounds: each rolls the student out on new seeds, adds the teacher's samples at every re-plan of a
    running scene, and trains on; a run can go on from a student of the same method and teacher."""
    dagger = DaggerConfig(rounds=2, episodes=2, steps=3, draws_per_state=2)
    kw = {"progress": False, "teacher_sampling_steps": 3}
    ckpt = distill_run(runs["diffusion"], "consistency", runs["demos"], tmp_path / "c", 4, None, 0, dagger=dagger, **kw)
    assert ckpt.name == "model_10.pt" and (tmp_path / "c" / "model_7.pt").exists()  # 4 steps, then 3 per round
    _, spec, extra, _ = load_generative(ckpt)
    rounds = extra["dagger_rounds"]
    assert [r["seeds"] for r in rounds] == ["50000..50001", "50002..50003"]
    # What round 1 labelled: the student of step 4 on seeds 50000-1, re-planning every Ta = 2 steps while running.
    student, _, _, _ = load_generative(tmp_path / "c" / "model_4.pt")
    visits = visited_states(student, spec, [50000, 50001], noise_seed=50000)
    assert rounds[0]["visited_states"] == len(visits.states) > 0
    assert rounds[0]["rollout_success_rate"] == visits.success_rate
    assert rounds[0]["labels_after"] == 2 * len(visits.states)
    assert rounds[1]["labels_after"] == 2 * (len(visits.states) + rounds[1]["visited_states"])
    assert extra["train_config"]["dagger"]["rounds"] == 2
    # Going on: only the rounds run, counted (steps, rounds, seeds) from where the student stopped, on all labels.
    more = distill_run(
        runs["diffusion"], "consistency", runs["demos"], tmp_path / "c2", 0, None, 0,
        dagger=DaggerConfig(rounds=1, episodes=2, steps=3), init=tmp_path / "c", **kw,
    )  # fmt: skip
    more_extra = load_generative(more)[2]
    assert more.name == "model_13.pt" and more_extra["init"] == str(ckpt)
    assert [r["seeds"] for r in more_extra["dagger_rounds"]] == ["50000..50001", "50002..50003", "50004..50005"]
    third = more_extra["dagger_rounds"][2]
    # A round run from a saved checkpoint trains exactly as it did in the run that saved it.
    again = distill_run(
        runs["diffusion"], "consistency", runs["demos"], tmp_path / "c4", 0, None, 0,
        dagger=DaggerConfig(rounds=1, episodes=2, steps=3), init=tmp_path / "c" / "model_7.pt", **kw,
    )  # fmt: skip
    assert again.name == ckpt.name
    for use_ema in (True, False):
        want = GenerativePolicy.load(ckpt, use_ema=use_ema)[0].state_dict()
        got = GenerativePolicy.load(again, use_ema=use_ema)[0].state_dict()
        assert all(torch.equal(want[k], got[k]) for k in want), f"the rerun round's weights differ ({use_ema=})"
    assert third["labels_after"] == rounds[1]["labels_after"] + 2 * third["visited_states"]
    assert more_extra["teacher_samples"] == extra["teacher_samples"] + 2 * third["visited_states"]
    (tmp_path / "c" / "dagger_samples.pt").write_bytes(b"truncated")
    with pytest.raises(ValueError, match="DAgger labels of the 2 round"):
        distill_run(
            runs["diffusion"], "consistency", runs["demos"], tmp_path / "c3", 0, None, 0, dagger=dagger, init=ckpt, **kw
        )
    with pytest.raises(ValueError, match="not a meanflow student"):
        distill_run(
            runs["diffusion"], "meanflow", runs["demos"], tmp_path / "m", 0, None, 0, dagger=dagger, init=ckpt, **kw
        )
    with pytest.raises(ValueError, match="nothing to train"):
        distill_run(
            runs["diffusion"],
            "consistency",
            runs["demos"],
            tmp_path / "n",
            0,
            None,
            0,
            dagger=NO_DAGGER,
            init=ckpt,
            **kw,
        )


def test_cli_bc_names_the_corrupt_episode(runs: dict[str, Path], tmp_path: Path, capsys) -> None:
    import shutil

    from reflexlab.cli import main

    bad = tmp_path / "bad"
    shutil.copytree(runs["demos"], bad)
    data = next((bad / "data").rglob("*.parquet"))
    table = pq.read_table(data)
    ds = load_dataset(runs["demos"])
    row = ds.episode_meta(2)["dataset_from_index"] + 1
    actions = table.column("action").to_pylist()
    actions[row] = [float("nan"), 0.0]
    col = table.schema.get_field_index("action")
    table = table.set_column(
        col, table.schema.field("action"), pa.array(actions, type=table.schema.field("action").type)
    )
    pq.write_table(table, data)
    with pytest.raises(DatasetError, match="episode 2"):
        load_dataset(bad)
    with pytest.raises(SystemExit) as e:
        main(["bc", "--dataset", str(bad), "--run-dir", str(tmp_path / "run"), "--steps", "1"])
    assert e.value.code == 2
    assert "episode 2" in capsys.readouterr().err


def test_cli_play_scores_a_chunk_policy_as_the_bench_does(runs: dict[str, Path], tmp_path: Path, capsys) -> None:
    import json

    from reflexlab.cli import main

    report = tmp_path / "eval.json"
    args = ["play", "--run-dir", str(runs["consistency"]), "--episodes", "2", "--seed", "100", "--noise-seed", "3"]
    main([*args, "--episode-s", "1.6", "--execution-horizon", "4", "--report", str(report)])
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == json.loads(report.read_text())
    assert (printed["sampling_steps"], printed["execution_horizon"], printed["seeds"]) == (1, 4, "100..101")
    policy, spec, _, _ = load_generative(runs["consistency"])
    direct = evaluate_chunks(
        TorchSampler(policy, 1), dataclasses.replace(spec, execution_horizon=4), [100, 101], 3, episode_steps=16
    ).summary()
    assert printed["mean_max_coverage"] == direct["mean_max_coverage"] and printed["mean_steps"] == 16
    main(["play", "--run-dir", str(runs["diffusion"]), "--episodes", "1", "--episode-s", "0.4"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (out["sampling_steps"], out["execution_horizon"], out["role"]) == (10, 8, "teacher")
    assert list(runs["diffusion"].glob("eval_model_*.json")), "the default report lies beside the checkpoint"
    with pytest.raises(SystemExit) as e:
        main([*args, "--execution-horizon", "16"])
    assert e.value.code == 2 and "execution_horizon 16" in capsys.readouterr().err
