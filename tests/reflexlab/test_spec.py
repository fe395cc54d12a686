import dataclasses
import math

import pytest

from reflexlab.spec import ActionSpec, ImageInput, Spec, SpecMismatchError
from sim.registry import get_task


def quadruped_spec() -> Spec:
    return get_task("quadruped-walk").spec()


def test_json_round_trip_is_exact() -> None:
    spec = quadruped_spec()
    again = Spec.from_json(spec.to_json())
    assert again == spec
    spec.check_compatible(again)


def test_infinite_rate_survives_json() -> None:
    spec = quadruped_spec()
    a = ActionSpec("joint_torque", ("j",), 1.0, (0.0,), (-1.0,), (1.0,))
    s = Spec(spec.robot, spec.task, spec.observation_groups, "policy", a, 50.0, 500.0)
    assert math.isinf(Spec.from_json(s.to_json()).action.max_rate)
    assert "Infinity" not in s.to_json()


def test_mismatch_names_the_field() -> None:
    spec = quadruped_spec()
    d = spec.to_dict()
    d["control_rate_hz"] = 100.0
    with pytest.raises(SpecMismatchError) as e:
        spec.check_compatible(Spec.from_dict(d))
    assert e.value.field == "control_rate_hz"
    assert "control_rate_hz" in str(e.value)

    d = spec.to_dict()
    d["action"]["names"][3] = "FL_hip_joint_v2"
    with pytest.raises(SpecMismatchError) as e:
        spec.check_compatible(Spec.from_dict(d))
    assert e.value.field == "action.names"

    d = spec.to_dict()
    d["observation_groups"][0]["terms"][4]["scale"] = 0.1
    with pytest.raises(SpecMismatchError) as e:
        spec.check_compatible(Spec.from_dict(d))
    assert e.value.field == "observation_groups[0].terms[4].scale"


def test_extra_notes_do_not_count() -> None:
    spec = quadruped_spec()
    d = spec.to_dict()
    d["extra"] = {"note": "trained on Tuesday"}
    spec.check_compatible(Spec.from_dict(d))


def test_bad_action_spec_is_refused() -> None:
    with pytest.raises(ValueError, match="offset"):
        ActionSpec("joint_position", ("a", "b"), 1.0, (0.0,), (-1.0, -1.0), (1.0, 1.0))
    with pytest.raises(ValueError, match="unknown action kind"):
        ActionSpec("jetpack", ("a",), 1.0, (0.0,), (-1.0,), (1.0,))


def test_group_slices_cover_the_vector() -> None:
    g = quadruped_spec().policy_obs
    sl = g.slices()
    assert sl["base_ang_vel"] == slice(0, 3)
    assert sl["last_action"].stop == g.size == 47
    assert len(g.scales()) == g.size


def test_not_a_spec() -> None:
    with pytest.raises(ValueError, match="not a valid reflexlab Spec"):
        Spec.from_dict({"robot": "x"})


def test_console_script_runs_outside_the_checkout(tmp_path) -> None:
    """The installed `reflexlab` entry point must import its packages from anywhere, not via the cwd."""
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).parent / "reflexlab"
    out = subprocess.run([str(exe), "inspect", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    out = subprocess.run(
        [sys.executable, "-c", "import deploy.onnx_export, reflexlab; print(reflexlab.__version__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "0.1.0", out.stderr


def test_images_field_is_optional_and_compared() -> None:
    """Spec.images (cameras a generator reads): absent from a state-only Spec's JSON, so older Specs and files
    read and compare exactly as before; round-trips when present; a difference is named."""
    spec = get_task("panda-push-t").spec()
    assert "images" not in spec.to_dict() and spec.images == ()
    assert Spec.from_json(spec.to_json()) == spec
    cams = dataclasses.replace(spec, images=(ImageInput("side", 96, 96),))
    d = cams.to_dict()
    assert d["images"] == [{"name": "side", "height": 96, "width": 96}]
    assert Spec.from_dict(d) == cams and cams.images[0].shape == (3, 96, 96)
    with pytest.raises(SpecMismatchError) as err:
        spec.check_compatible(cams)
    assert err.value.field == "images"
    with pytest.raises(ValueError, match="twice"):
        dataclasses.replace(spec, images=(ImageInput("side", 8, 8), ImageInput("side", 8, 8)))
