"""ChunkExecutor and ObservationHistory against hand-computed values (one action dimension, easy numbers)."""

import math

import numpy as np
import pytest

from reflexlab.chunking import ChunkConfig, ChunkExecutor, ObservationHistory


def column(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=float)[:, None]


def receding(interpolation: str) -> ChunkExecutor:
    # To = 2, Ta = 3, H = 5 at 10 Hz: a chunk stamped s executes its indices 1, 2, 3 at s, s + 0.1, s + 0.2.
    return ChunkExecutor(2, 3, 5, 10.0, ChunkConfig("receding", interpolation=interpolation))


def test_receding_horizon_executes_from_index_to_minus_one_and_switches_to_the_new_chunk() -> None:
    ex = receding("hold")
    assert ex(0.0) is None  # nothing to execute yet: the safety filter holds
    ex.add(column(0, 1, 2, 3, 4), stamp=1.0)
    assert [ex(t)[0] for t in (1.0, 1.05, 1.1, 1.19, 1.2, 1.29)] == [1, 1, 2, 2, 3, 3]
    ex.add(column(10, 11, 12, 13, 14), stamp=1.1)  # a re-plan one period later replaces the plan
    assert [ex(t)[0] for t in (1.1, 1.15, 1.2, 1.3)] == [11, 11, 12, 13]
    assert ex.replans == 2 and ex.exhaustions == 0


def test_linear_interpolation_between_policy_steps() -> None:
    ex = receding("linear")
    ex.add(column(0, 10, 20, 40, 80), stamp=0.0)
    got = [ex(t)[0] for t in (0.0, 0.025, 0.05, 0.1, 0.175, 0.2, 0.25)]
    # 10 → 20 over the first period, 20 → 40 over the second; the horizon's last action (40) has no
    # successor inside the horizon, so it holds rather than heading for 80.
    np.testing.assert_allclose(got, [10, 12.5, 15, 20, 35, 40, 40])


def test_horizon_exhaustion_holds_the_last_action_and_is_counted_once_per_chunk() -> None:
    ex = receding("linear")
    ex.add(column(0, 1, 2, 3, 4), stamp=0.0)
    assert ex(0.29)[0] == 3 and not ex.exhausted
    assert ex(0.3)[0] == 3 and ex.exhausted  # Ta = 3 periods without a new chunk
    assert ex(5.0)[0] == 3 and ex.exhaustions == 1
    ex.add(column(5, 6, 7, 8, 9), stamp=5.0)
    assert ex(5.0)[0] == 6 and not ex.exhausted
    ex(5.3)
    assert ex.exhaustions == 2


def test_temporal_ensembling_weights_chunks_by_age() -> None:
    # To = 1, Ta = H = 3 at 1 Hz, m = ln 2: ages 0, 1, 2 weigh 1, 1/2, 1/4.
    ex = ChunkExecutor(1, 3, 3, 1.0, ChunkConfig("ensemble", ensemble_decay=math.log(2), interpolation="hold"))
    ex.add(column(0, 10, 20), stamp=0.0)
    ex.add(column(100, 110, 120), stamp=1.0)
    assert ex(1.0)[0] == pytest.approx((100 + 0.5 * 10) / 1.5)
    ex.add(column(200, 210, 220), stamp=2.0)
    step0 = (200 + 0.5 * 110 + 0.25 * 20) / 1.75  # every chunk covers step 2
    step1 = (210 + 0.5 * 120) / 1.5  # the oldest chunk's horizon ends before step 3
    np.testing.assert_allclose([ex(t)[0] for t in (2.0, 3.0, 4.0)], [step0, step1, 220])
    linear = ChunkExecutor(1, 3, 3, 1.0, ChunkConfig("ensemble", ensemble_decay=math.log(2)))
    for k in range(3):
        linear.add(column(*(100 * k + 10 * j for j in range(3))), stamp=float(k))
    assert linear(2.5)[0] == pytest.approx((step0 + step1) / 2)


def test_ensembling_with_zero_decay_is_the_plain_mean_and_skips_chunks_beyond_their_horizon() -> None:
    ex = ChunkExecutor(1, 2, 2, 10.0, ChunkConfig("ensemble", ensemble_decay=0.0, interpolation="hold"))
    ex.add(column(0, 2), stamp=0.0)
    ex.add(column(4, 6), stamp=0.1004)  # jitter: still one policy step old
    assert ex(0.1004)[0] == pytest.approx(3.0)
    ex.add(column(8, 10), stamp=0.5)  # after a gap: the older chunks cover none of its steps
    assert ex(0.5)[0] == 8


def test_chunks_are_checked() -> None:
    ex = receding("linear")
    with pytest.raises(ValueError, match=r"shape \(4, 1\), expected \(5, action size\)"):
        ex.add(np.zeros((4, 1)), 0.0)
    with pytest.raises(ValueError, match="non-finite"):
        ex.add(column(0, 1, np.nan, 3, 4), 0.0)
    ex.add(np.zeros((5, 2)), 1.0)
    with pytest.raises(ValueError, match=r"expected \(5, 2\)"):
        ex.add(np.zeros((5, 3)), 2.0)
    with pytest.raises(ValueError, match="not after"):
        ex.add(np.zeros((5, 2)), 1.0)
    with pytest.raises(ValueError, match="does not fit"):
        ChunkExecutor(3, 4, 5, 10.0)
    with pytest.raises(ValueError, match="chunk_execution"):
        ChunkConfig("ensembling")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interpolation"):
        ChunkConfig(interpolation="cubic")  # type: ignore[arg-type]


def test_observation_history_pads_with_the_first_observation_then_shifts() -> None:
    h = ObservationHistory(3, 2)
    np.testing.assert_array_equal(h.push(np.array([1, -1])), [[1, -1]] * 3)
    np.testing.assert_array_equal(h.push(np.array([2, -2])), [[1, -1], [1, -1], [2, -2]])
    np.testing.assert_array_equal(h.push(np.array([3, -3])), [[1, -1], [2, -2], [3, -3]])
    out = h.push(np.array([4, -4]))
    np.testing.assert_array_equal(out, [[2, -2], [3, -3], [4, -4]])
    out[:] = 0  # a copy: the caller cannot corrupt the history
    h.reset()
    np.testing.assert_array_equal(h.push(np.array([9, -9])), [[9, -9]] * 3)
