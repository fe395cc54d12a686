import pytest

from reflexlab.cli import main
from sim.registry import UnknownTaskError, get_task, task_names


def test_unknown_task_lists_known_ones() -> None:
    with pytest.raises(UnknownTaskError) as e:
        get_task("quadruped-run")
    assert "quadruped-walk" in str(e.value)
    assert "quadruped-walk" in task_names()


def test_cli_unknown_task_is_a_clear_error(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["train", "--task", "humanoid-dance", "--run-dir", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown task 'humanoid-dance'" in err and "quadruped-walk" in err


def test_unknown_profile() -> None:
    with pytest.raises(ValueError, match="profiles: fast, full"):
        get_task("quadruped-walk").config("turbo")
