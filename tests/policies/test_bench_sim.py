import json

from reflexlab.cli import main


def test_bench_sim_quick_prints_one_json_line(capsys, tmp_path) -> None:
    main(["bench", "sim", "--quick", "--out-dir", str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert "threads" in lines[1]  # the human table comes first
    metrics = json.loads(lines[-1])
    for t in ("1t", "2t"):
        assert metrics[f"physics_env_steps_per_s_{t}"] > 0
        assert metrics[f"vecenv_env_steps_per_s_{t}"] > 0
        assert 0 < metrics[f"ratio_env_to_physics_{t}"] < 1.5
    assert metrics["machine"]["cores"] >= 1 and metrics["config"]["quick"] is True
    assert (tmp_path / "bench_sim.json").exists()
