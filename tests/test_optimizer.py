"""Detectron's SGD: a hand-computed 3-step run (warm-up, an LR step with momentum correction, a weight,
a bias, GroupNorm parameters and frozen variables), roles from Detectron blob names, config rules."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdet.config import Config, get_default_config, load_config
from tfdet.engine.optimizer import (
    ROLE_BIAS,
    ROLE_GN_SCALE,
    ROLE_WEIGHT,
    DetectronSGD,
    UpdateRule,
    build_optimizer,
    update_rules,
    variable_roles,
)
from tfdet.layers.affine_channel import AffineChannel

# LR: steps_with_decay 0.1 with a step at iteration 2, linear warm-up over 2 iterations from 0.9:
#   it 0: 0.1 * 0.9 = 0.09; it 1: 0.1 * (0.9 * 0.5 + 0.5) = 0.095 (ratio 1.056 < 1.1: no correction);
#   it 2: 0.01 (ratio 9.5 > 1.1: V is first multiplied by 0.01 / 0.095).
SOLVER = [
    "SOLVER.LR_POLICY", "steps_with_decay", "SOLVER.BASE_LR", "0.1", "SOLVER.GAMMA", "0.1",
    "SOLVER.STEPS", "[0, 2]", "SOLVER.MAX_ITER", "3",
    "SOLVER.WARM_UP_ITERS", "2", "SOLVER.WARM_UP_FACTOR", "0.9", "SOLVER.WARM_UP_METHOD", "linear",
    "SOLVER.MOMENTUM", "0.9", "SOLVER.WEIGHT_DECAY", "0.01", "SOLVER.WEIGHT_DECAY_GN", "0.001",
    "SOLVER.SCALE_MOMENTUM", "True", "SOLVER.SCALE_MOMENTUM_THRESHOLD", "1.1",
]

# Initial value and (constant) gradient of each variable, by path.
START = {
    "fc6/kernel": (1.0, 0.5),     # fc6_w: weight
    "fc6/bias": (0.2, 0.3),       # fc6_b: bias
    "fc6_gn/gamma": (1.0, 0.1),   # fc6_gn_s: GroupNorm scale
    "fc6_gn/beta": (0.0, 0.05),   # fc6_gn_b: a bias in Detectron (model.biases is checked first)
    "fc7_bn/scale": (1.0, 1.0),   # AffineChannel: not trainable
    "fc7_bn/bias": (0.0, 1.0),
    "fc7/kernel": (1.0, 1.0),     # frozen layer
    "fc7/bias": (0.0, 1.0),
}

# Hand computation, V := 0.9 * c * V + lr * g', w -= V:
# fc6/kernel, g' = 0.5 + 0.01 w:
#   it0: g' 0.51, V 0.0459, w 0.9541; it1: g' 0.509541, V 0.089716395, w 0.864383605
#   it2: g' 0.50864383605, V 0.9 * 0.089716395 / 9.5 + 0.0050864383605 = 0.0135858863079, w 0.8507977186921
# fc6/bias, g' = 2 * 0.3 = 0.6: V 0.054, 0.1056, 0.9 * 0.1056 / 9.5 + 0.006 = 0.0160042105263; w 0.0243957894737
# fc6_gn/gamma, g' = 0.1 + 0.001 w: V 0.00909, 0.01777513645, 0.0026936916439; w 0.9704411719061
# fc6_gn/beta, g' = 2 * 0.05 = 0.1: V 0.009, 0.0176, 0.0026673684211; w -0.0292673684211
EXPECTED = {
    "fc6/kernel": (0.8507977186921, 0.0135858863079),
    "fc6/bias": (0.0243957894737, 0.0160042105263),
    "fc6_gn/gamma": (0.9704411719061, 0.0026936916439),
    "fc6_gn/beta": (-0.0292673684211, 0.0026673684211),
}


def tiny_detectron_model():
    """Detectron-named layers with one value per variable: fc6 -> fc6_gn -> fc7_bn (frozen) -> fc7 (frozen)."""
    inputs = keras.Input((1,))
    x = keras.layers.Dense(1, name="fc6")(inputs)
    x = keras.layers.GroupNormalization(groups=1, name="fc6_gn")(x)
    x = AffineChannel(name="fc7_bn")(x)
    x = keras.layers.Dense(1, name="fc7", trainable=False)(x)
    model = keras.Model(inputs, x)
    for variable in model.weights:
        variable.assign(np.full(variable.shape, START[variable.path][0], np.float32))
    return model


def run_three_steps(overrides=()):
    cfg = load_config(overrides=SOLVER + list(overrides))
    model = tiny_detectron_model()
    optimizer = build_optimizer(cfg, model)
    variables = model.weights  # trainable and frozen alike: frozen ones must be skipped
    for _ in range(3):
        optimizer.apply([tf.fill(v.shape, START[v.path][1]) for v in variables], variables)
    values = {v.path: float(v.numpy().ravel()[0]) for v in variables}
    momenta = {v.path: float(optimizer.momentum_slot(v).numpy().ravel()[0]) for v in model.trainable_variables}
    return values, momenta, optimizer, model


def test_three_steps_match_hand_computed_detectron_update():
    values, momenta, optimizer, _ = run_three_steps()
    for path, (value, velocity) in EXPECTED.items():
        assert values[path] == pytest.approx(value, rel=2e-6), path
        assert momenta[path] == pytest.approx(velocity, rel=2e-6), path
    assert int(optimizer.iterations.numpy()) == 3


def test_frozen_variables_are_never_updated_and_get_no_slot():
    values, _, optimizer, model = run_three_steps()
    frozen = [v for v in model.weights if not v.trainable]
    assert sorted(v.path for v in frozen) == ["fc7/bias", "fc7/kernel", "fc7_bn/bias", "fc7_bn/scale"]
    for variable in frozen:
        assert values[variable.path] == START[variable.path][0], variable.path
        with pytest.raises(KeyError, match="has no momentum slot"):
            optimizer.momentum_slot(variable)


def test_without_scale_momentum_the_step_keeps_the_old_velocity():
    # it2 without correction: V = 0.9 * 0.089716395 + 0.01 * 0.50864383605 = 0.0858311938605
    values, momenta, _, _ = run_three_steps(["SOLVER.SCALE_MOMENTUM", "False"])
    assert momenta["fc6/kernel"] == pytest.approx(0.0858311938605, rel=2e-6)
    assert values["fc6/kernel"] == pytest.approx(0.7785524111395, rel=2e-6)


def test_roles_come_from_detectron_blob_names():
    roles = variable_roles(tiny_detectron_model())
    assert roles["fc6/kernel"] == ROLE_WEIGHT
    assert roles["fc6/bias"] == ROLE_BIAS
    assert roles["fc6_gn/gamma"] == ROLE_GN_SCALE
    assert roles["fc6_gn/beta"] == ROLE_BIAS
    assert roles["fc7_bn/scale"] == ROLE_WEIGHT and roles["fc7_bn/bias"] == ROLE_BIAS  # never updated: frozen


def test_rules_default_to_detectron_and_follow_maskrcnn_benchmark_keys_when_present():
    roles = {"w": ROLE_WEIGHT, "b": ROLE_BIAS, "g": ROLE_GN_SCALE}
    cfg = load_config(overrides=["SOLVER.WEIGHT_DECAY", "0.0001", "SOLVER.WEIGHT_DECAY_GN", "0.5"])
    rules = update_rules(cfg, roles)
    assert rules == {"w": UpdateRule(1.0, 0.0001), "b": UpdateRule(2.0, 0.0), "g": UpdateRule(1.0, 0.5)}

    tree = get_default_config().to_dict()
    tree["SOLVER"].update(BIAS_LR_FACTOR=1.0, WEIGHT_DECAY_BIAS=0.0001)
    rules = update_rules(Config(tree), roles)
    assert rules["b"] == UpdateRule(1.0, 0.0001)


def test_bias_decay_and_factor_apply_as_in_maskrcnn_benchmark():
    # g' = f * (g + d * w) with f = 3, d = 0.1, w = 2, g = 1, lr = 0.5: V = 0.5 * 3 * 1.2 = 1.8, w = 0.2
    variable = keras.Variable(np.array([2.0], np.float32), name="bias")
    optimizer = DetectronSGD(0.5, rules={variable.path: UpdateRule(3.0, 0.1)}, momentum=0.9)
    optimizer.apply([tf.constant([1.0])], [variable])
    assert float(variable.numpy()[0]) == pytest.approx(0.2, rel=1e-6)


def test_a_trainable_variable_without_rule_is_an_error():
    model = tiny_detectron_model()
    optimizer = DetectronSGD(0.1, rules={"fc6/kernel": UpdateRule(1.0, 0.0)})
    with pytest.raises(ValueError, match="No update rule for trainable variable.*fc6/bias"):
        optimizer.build(model.trainable_variables)


def test_momentum_out_of_range_is_an_error():
    """SOLVER.MOMENTUM in [0, 1): 0 (plain SGD) is accepted; 1 (a velocity that never decays) and beyond are not."""
    assert DetectronSGD(0.1, rules={}, momentum=0.0).momentum == 0.0
    for momentum in (1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="SOLVER.MOMENTUM"):
            DetectronSGD(0.1, rules={}, momentum=momentum)


def test_config_round_trip():
    _, _, optimizer, _ = run_three_steps()
    copy = DetectronSGD.from_config(optimizer.get_config())
    assert copy.rules == optimizer.rules and copy.momentum == 0.9 and copy.scale_momentum_threshold == 1.1
    assert float(copy.lr_schedule(1)) == pytest.approx(0.095)


class _DoublingSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """0.1 at iteration 0, then 0.2: a change by a factor of exactly 2."""

    def __call__(self, step):
        return tf.where(step >= 1, 0.2, 0.1)


@pytest.mark.parametrize("threshold, factor", [(2.0, 1.0), (1.9, 2.0)])
def test_momentum_is_corrected_only_for_a_change_above_the_threshold(threshold, factor):
    """Detectron's `ratio > SCALE_MOMENTUM_THRESHOLD`, strictly: an LR that doubles at iteration 1 corrects the
    velocity by 2 under a threshold of 1.9, not under 2.0; iteration 0 is never corrected."""
    optimizer = DetectronSGD(_DoublingSchedule(), rules={}, scale_momentum_threshold=threshold)
    assert float(optimizer.momentum_correction()) == 1.0
    optimizer.iterations.assign(1)
    assert float(optimizer.momentum_correction()) == factor
