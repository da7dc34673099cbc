"""Detectron's LR policies and warm-up: hand-computed values, and the TF schedule equal to the Python one."""

import numpy as np
import pytest
import tensorflow as tf

from tfdet.config import load_config
from tfdet.engine.lr_schedule import DetectronLRSchedule, lr_at_iter


def solver_cfg(**solver):
    """The default config with SOLVER keys overridden (no warm-up unless given)."""
    values = {"WARM_UP_ITERS": 0, **solver}
    overrides = []
    for key, value in values.items():
        overrides += [f"SOLVER.{key}", str(value)]
    return load_config(overrides=overrides)


STEPS_WITH_DECAY = dict(LR_POLICY="steps_with_decay", BASE_LR=0.02, GAMMA=0.1, STEPS=[0, 60, 80], MAX_ITER=90)
STEPS_WITH_LRS = dict(LR_POLICY="steps_with_lrs", STEPS=[0, 60, 80], LRS=[0.02, 0.005, 0.001], MAX_ITER=90)
STEP = dict(LR_POLICY="step", BASE_LR=0.1, GAMMA=0.1, STEP_SIZE=30, MAX_ITER=90)
COSINE = dict(LR_POLICY="cosine_decay", BASE_LR=0.1, MAX_ITER=100)
EXP = dict(LR_POLICY="exp_decay", BASE_LR=0.1, GAMMA=0.01, MAX_ITER=100)

# (solver keys, {iteration: hand-computed LR})
HAND_VALUES = [
    # Detectron's docstring example: [0, 59] 0.02, [60, 79] 0.002, [80, inf) 0.0002
    (STEPS_WITH_DECAY, {0: 0.02, 59: 0.02, 60: 0.002, 79: 0.002, 80: 0.0002, 89: 0.0002, 95: 0.0002}),
    (STEPS_WITH_LRS, {0: 0.02, 59: 0.02, 60: 0.005, 79: 0.005, 80: 0.001, 120: 0.001}),
    # 0.1 * 0.1 ** (it // 30)
    (STEP, {0: 0.1, 29: 0.1, 30: 0.01, 59: 0.01, 65: 0.001}),
    # 0.1 * 0.5 * (cos(pi * it / 100) + 1): cos(pi/4) = 0.70710678
    (COSINE, {0: 0.1, 25: 0.0853553390593, 50: 0.05, 75: 0.0146446609407, 100: 0.0}),
    # 0.1 * 0.01 ** (it / 100)
    (EXP, {0: 0.1, 50: 0.01, 100: 0.001}),
    # linear warm-up from 1/3 over 500 iterations: factor = 1/3 * (1 - a) + a, a = it / 500
    (dict(STEPS_WITH_DECAY, STEPS=[0, 6000], MAX_ITER=9000, WARM_UP_ITERS=500, WARM_UP_FACTOR=1 / 3.0),
     {0: 0.02 / 3, 250: 0.02 * 2 / 3, 499: 0.02 * (1 / 3 * (1 / 500) + 499 / 500), 500: 0.02, 6000: 0.002}),
    # constant warm-up: 1/3 of the LR until iteration 500
    (dict(STEPS_WITH_DECAY, STEPS=[0, 6000], MAX_ITER=9000, WARM_UP_ITERS=500, WARM_UP_FACTOR=1 / 3.0,
          WARM_UP_METHOD="constant"), {0: 0.02 / 3, 499: 0.02 / 3, 500: 0.02}),
    # warm-up still running after a step: 0.002 * (0.5 * 0.25 + 0.75)
    (dict(STEPS_WITH_DECAY, STEPS=[0, 50], MAX_ITER=200, WARM_UP_ITERS=100, WARM_UP_FACTOR=0.5), {75: 0.00175}),
]

CASE_IDS = [f"{solver['LR_POLICY']}-{i}" for i, (solver, _) in enumerate(HAND_VALUES)]


@pytest.mark.parametrize("solver, expected", HAND_VALUES, ids=CASE_IDS)
def test_python_lr_matches_hand_values(solver, expected):
    cfg = solver_cfg(**solver)
    for it, lr in expected.items():
        assert lr_at_iter(cfg, it) == pytest.approx(lr, rel=1e-6, abs=1e-12), f"iteration {it}"
        assert lr_at_iter(cfg, it).dtype == np.float32


@pytest.mark.parametrize("solver, expected", HAND_VALUES, ids=CASE_IDS)
def test_tf_schedule_equals_python_inside_tf_function(solver, expected):
    cfg = solver_cfg(**solver)
    python_schedule = DetectronLRSchedule.from_cfg(cfg)

    @tf.function
    def schedule(step):
        assert not tf.executing_eagerly()
        return python_schedule(step)

    stride = max(7, cfg.SOLVER.MAX_ITER // 150)
    iterations = sorted(set(range(0, cfg.SOLVER.MAX_ITER + 11, stride)) | set(expected))
    got = np.array([schedule(tf.constant(it, tf.int64)).numpy() for it in iterations])
    want = np.array([lr_at_iter(cfg, it) for it in iterations])
    if solver["LR_POLICY"] in ("cosine_decay", "exp_decay"):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)  # libm cos/exp vs TF's may differ by an ulp
    else:
        np.testing.assert_array_equal(got, want)


def test_schedule_reads_keras_iteration_variable():
    import keras

    cfg = solver_cfg(**STEP)
    iterations = keras.Variable(30, dtype="int64", trainable=False)
    assert float(DetectronLRSchedule.from_cfg(cfg)(iterations)) == pytest.approx(0.01)


def test_schedule_config_round_trip():
    cfg = solver_cfg(**STEPS_WITH_DECAY)
    schedule = DetectronLRSchedule.from_cfg(cfg)
    copy = DetectronLRSchedule.from_config(schedule.get_config())
    assert float(copy(61)) == pytest.approx(0.002)
    assert schedule.get_config()["STEPS"] == [0, 60, 80]


@pytest.mark.parametrize(
    "solver, message",
    [
        (dict(LR_POLICY="poly"), "Unknown SOLVER.LR_POLICY 'poly'"),
        (dict(LR_POLICY="steps_with_decay", STEPS=[60, 80]), "SOLVER.STEPS must start with 0"),
        (dict(LR_POLICY="steps_with_decay", STEPS=[]), "SOLVER.STEPS must start with 0"),
        (dict(LR_POLICY="steps_with_lrs", STEPS=[0, 60], LRS=[0.1]), "one LR per entry of SOLVER.STEPS"),
        (dict(WARM_UP_METHOD="exponential"), "Unknown SOLVER.WARM_UP_METHOD 'exponential'"),
        (dict(LR_POLICY="step", STEP_SIZE=0), "SOLVER.STEP_SIZE must be positive"),
        (dict(LR_POLICY="cosine_decay", MAX_ITER=0), "SOLVER.MAX_ITER must be positive for LR_POLICY 'cosine_decay'"),
        (dict(LR_POLICY="exp_decay", MAX_ITER=0), "SOLVER.MAX_ITER must be positive for LR_POLICY 'exp_decay'"),
        (dict(LR_POLICY="exp_decay", MAX_ITER=100, GAMMA=0.0), "SOLVER.GAMMA must be positive"),
    ],
)
def test_bad_solver_settings_give_one_line_errors(solver, message):
    cfg = solver_cfg(**solver)
    with pytest.raises(ValueError, match=message):
        lr_at_iter(cfg, 0)
    with pytest.raises(ValueError, match=message):
        DetectronLRSchedule.from_cfg(cfg)

