"""The MJCF and constants.py must agree: a silent mismatch here would train one robot and deploy another."""

import mujoco
import numpy as np

from reflexlab.tasks.quadruped import constants as C
from sim.tasks.quadruped import SCENE_XML


def load() -> tuple[mujoco.MjModel, mujoco.MjData]:
    m = mujoco.MjModel.from_xml_path(str(SCENE_XML))
    return m, mujoco.MjData(m)


def test_constants_match_the_model() -> None:
    m, _ = load()
    assert m.opt.timestep == C.PHYSICS_DT
    assert m.nu == len(C.JOINT_NAMES) == 12
    for i, name in enumerate(C.JOINT_NAMES):
        j = m.joint(name)
        assert m.actuator_trnid[i, 0] == j.id, "actuators must follow JOINT_NAMES order"
        np.testing.assert_allclose(j.range, [C.JOINT_LOWER[i], C.JOINT_UPPER[i]])
        np.testing.assert_allclose(m.actuator_forcerange[i], [-C.TORQUE_LIMIT[i], C.TORQUE_LIMIT[i]])
        assert m.actuator_gainprm[i, 0] == C.KP and m.actuator_biasprm[i, 2] == -C.KD
    np.testing.assert_allclose(m.key_ctrl[0], C.DEFAULT_JOINT_POS)
    for s in (*C.FOOT_TOUCH_SENSORS, *C.FOOT_VEL_SENSORS, *C.FALL_TOUCH_SENSORS):
        m.sensor(s)


def test_default_pose_stands_on_four_feet() -> None:
    m, d = load()
    mujoco.mj_resetDataKeyframe(m, d, 0)
    for _ in range(1000):  # 2 s
        mujoco.mj_step(m, d)
    assert abs(d.qpos[2] - C.NOMINAL_BASE_HEIGHT) < 0.02
    touch = np.array([d.sensor(s).data[0] for s in C.FOOT_TOUCH_SENSORS])
    assert (touch > 5.0).all(), touch
    np.testing.assert_allclose(touch.sum(), mujoco.mj_getTotalmass(m) * 9.81, rtol=0.05)
    assert d.sensor("torso_touch").data[0] == 0.0
