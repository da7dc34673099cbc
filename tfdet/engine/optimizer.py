"""Detectron's SGD (modeling/optimizer.py + MomentumSGDUpdate) as a Keras 3 optimizer.

For each trainable variable w with gradient g, at learning rate lr:

    g' = f * (g + d * w)        f, d: the variable's gradient factor and weight decay (its `UpdateRule`)
    V := mu * V + lr * g'       the momentum buffer holds the LR, like Caffe2's MomentumSGDUpdate
    w := w - V

Rules by Detectron role (the variable's blob name, `tfdet.modeling.detectron_names.model_blobs`):

| blob | role | f | d |
|---|---|---|---|
| `*_b` (conv/fc biases, GroupNorm beta `_gn_b`) | bias | SOLVER.BIAS_LR_FACTOR (2) | SOLVER.WEIGHT_DECAY_BIAS (0) |
| `*_gn_s` (GroupNorm gamma) | GroupNorm scale | 1 | SOLVER.WEIGHT_DECAY_GN |
| anything else (`_w`) | weight | 1 | SOLVER.WEIGHT_DECAY |

Detectron doubles bias gradients and skips their decay (`param in model.biases`, checked before
`model.gn_params`, so GroupNorm's beta is a bias there too); maskrcnn-benchmark's BIAS_LR_FACTOR and
WEIGHT_DECAY_BIAS give the same rule and are read when the config has them.

Momentum correction (Detectron's `_CorrectMomentum`): when SOLVER.SCALE_MOMENTUM is on and the LR of
this iteration differs from the previous iteration's by a ratio above SCALE_MOMENTUM_THRESHOLD, V is
multiplied by new_lr / old_lr before the update. The previous LR is the schedule's value at
`iterations - 1`, so a resumed run corrects exactly as an uninterrupted one.

Why a Keras optimizer subclass: Keras' TF backend already all-reduces (sums) replica gradients and
applies the update per mirrored variable under `tf.distribute`, tracks the momentum slots and the
iteration counter for `tf.train.Checkpoint`, and only `update_step` changes. Variables that are not
trainable (AffineChannel, frozen stages) are dropped before any update.
"""

import dataclasses

import keras
import tensorflow as tf

from tfdet.engine.lr_schedule import DetectronLRSchedule
from tfdet.modeling.detectron_names import model_blobs

ROLE_WEIGHT = "weight"
ROLE_BIAS = "bias"
ROLE_GN_SCALE = "gn_scale"

# Detectron hard-codes these two (2x LR, no decay on biases); maskrcnn-benchmark names them.
DEFAULT_BIAS_LR_FACTOR = 2.0
DEFAULT_WEIGHT_DECAY_BIAS = 0.0

# Detectron only rescales the momentum when the previous LR is above this (UpdateWorkspaceLr).
_MIN_LR_FOR_MOMENTUM_CORRECTION = 1e-7
_LR_RATIO_EPS = 1e-10


@dataclasses.dataclass(frozen=True)
class UpdateRule:
    """How one variable's gradient is transformed: g' = grad_factor * (g + weight_decay * w)."""

    grad_factor: float
    weight_decay: float


def detectron_role(blob_name):
    """The update role of a Detectron blob: bias (`_b`), GroupNorm scale (`_gn_s`) or weight."""
    if blob_name.endswith("_b"):
        return ROLE_BIAS
    if blob_name.endswith("_gn_s"):
        return ROLE_GN_SCALE
    return ROLE_WEIGHT


def variable_roles(model):
    """{variable path: role} for every variable of `model`, from its Detectron blob names."""
    roles = {}
    for blob_name, variable, _, _ in model_blobs(model):
        if variable.path in roles:
            raise ValueError(f"Two variables share the path {variable.path!r}; update rules are keyed by path")
        roles[variable.path] = detectron_role(blob_name)
    return roles


def update_rules(cfg, roles):
    """{variable path: UpdateRule} from cfg.SOLVER for the roles of `variable_roles`.

    SOLVER.BIAS_LR_FACTOR and SOLVER.WEIGHT_DECAY_BIAS (maskrcnn-benchmark's names) default to
    Detectron's hard-coded 2 and 0 when the config does not have them.
    """
    solver = cfg.SOLVER
    by_role = {
        ROLE_WEIGHT: UpdateRule(1.0, float(solver.WEIGHT_DECAY)),
        ROLE_BIAS: UpdateRule(
            float(solver.get("BIAS_LR_FACTOR", DEFAULT_BIAS_LR_FACTOR)),
            float(solver.get("WEIGHT_DECAY_BIAS", DEFAULT_WEIGHT_DECAY_BIAS)),
        ),
        ROLE_GN_SCALE: UpdateRule(1.0, float(solver.WEIGHT_DECAY_GN)),
    }
    return {path: by_role[role] for path, role in roles.items()}


@keras.saving.register_keras_serializable(package="tfdet")
class DetectronSGD(keras.optimizers.Optimizer):
    """Momentum SGD with Detectron's update (see the module docstring); momentum slots are Detectron's V.

    Args:
        learning_rate: a `DetectronLRSchedule` (or any schedule of the iteration); a float disables
            momentum correction, which only matters when the LR changes.
        rules: {variable path: UpdateRule}; every trainable variable the optimizer updates must have one.
        momentum: SOLVER.MOMENTUM.
        scale_momentum, scale_momentum_threshold: SOLVER.SCALE_MOMENTUM(_THRESHOLD).
    """

    def __init__(self, learning_rate, rules, momentum=0.9, scale_momentum=True, scale_momentum_threshold=1.1,
                 name="detectron_sgd", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"SOLVER.MOMENTUM must be in [0, 1), got {momentum}")
        self.momentum = float(momentum)
        schedules = keras.optimizers.schedules.LearningRateSchedule
        self.lr_schedule = learning_rate if isinstance(learning_rate, schedules) else None
        self.rules = {path: rule if isinstance(rule, UpdateRule) else UpdateRule(*rule) for path, rule in rules.items()}
        self.scale_momentum = bool(scale_momentum)
        self.scale_momentum_threshold = float(scale_momentum_threshold)

    def build(self, variables):
        if self.built:
            return
        variables = [v for v in variables if v.trainable]
        missing = [v.path for v in variables if v.path not in self.rules]
        if missing:
            raise ValueError(
                f"No update rule for trainable variable(s) {', '.join(missing)}; "
                "rules come from the variables' Detectron blob names (variable_roles)"
            )
        super().build(variables)
        self._variable_rules = tuple(
            (self.rules[v.path].grad_factor, self.rules[v.path].weight_decay) for v in variables
        )
        self.momentums = self.add_optimizer_variables(variables, "momentum")

    def apply(self, grads, trainable_variables=None):
        """Keras' apply, after dropping (gradient, variable) pairs whose variable is not trainable."""
        if trainable_variables is not None:
            pairs = [(g, v) for g, v in zip(grads, trainable_variables) if v.trainable]
            grads, trainable_variables = [g for g, _ in pairs], [v for _, v in pairs]
            if not self.built:
                self.build(trainable_variables)
        return super().apply(grads, trainable_variables)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        """Keras' per-variable updates, handed this step's values that `update_step` needs, computed once
        per step rather than once per variable (each op costs graph-building time): {gradient factor:
        learning rate times it} and the momentum after correction."""
        factors = sorted({factor for factor, _ in self._variable_rules})
        step_values = {
            "scaled_lr": {str(factor): tf.cast(learning_rate, tf.float32) * factor for factor in factors},
            "momentum": self.momentum * self.momentum_correction(),
            "one": tf.constant(1.0, tf.float32),
        }
        super()._backend_update_step(grads, trainable_variables, step_values)

    def momentum_slot(self, variable):
        """The momentum buffer V of `variable` (Detectron's `<blob>_momentum`)."""
        try:
            return self.momentums[self._get_variable_index(variable)]
        except KeyError:
            raise KeyError(f"{variable.path} has no momentum slot: the optimizer does not update it") from None

    def momentum_correction(self):
        """V's factor this iteration: new_lr / old_lr after a large LR change, else 1 (float32 scalar)."""
        schedule = self.lr_schedule
        if not (self.scale_momentum and schedule is not None):
            return tf.constant(1.0, tf.float32)
        iteration = tf.convert_to_tensor(self.iterations)
        new_lr = schedule(iteration)
        old_lr = schedule(tf.maximum(iteration - 1, 0))
        ratio = tf.maximum(new_lr / tf.maximum(old_lr, _LR_RATIO_EPS), old_lr / tf.maximum(new_lr, _LR_RATIO_EPS))
        correct = (iteration > 0) & (old_lr > _MIN_LR_FOR_MOMENTUM_CORRECTION) & (ratio > self.scale_momentum_threshold)
        return tf.where(correct, new_lr / tf.maximum(old_lr, _LR_RATIO_EPS), 1.0)

    def update_step(self, gradient, variable, step_values):
        """V := momentum * V + lr * g'; w := w - V, as TF's fused ResourceApplyMomentum with its learning
        rate 1 and its gradient lr * g' (its accumulator is then exactly Detectron's V)."""
        index = self._get_variable_index(variable)
        grad_factor, weight_decay = self._variable_rules[index]
        gradient = tf.cast(gradient, tf.float32)
        if weight_decay:
            # Computed once the gradient exists: the decay terms of every variable, computed as soon as the
            # step starts, would otherwise sit in memory (the size of the model) through the whole backward pass.
            with tf.control_dependencies([gradient]):
                gradient = gradient + weight_decay * variable
        tf.raw_ops.ResourceApplyMomentum(
            var=variable.handle,
            accum=self.momentums[index].handle,
            lr=step_values["one"],
            grad=step_values["scaled_lr"][str(grad_factor)] * gradient,
            momentum=step_values["momentum"],
            use_locking=False,
            use_nesterov=False,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            momentum=self.momentum,
            rules={path: dataclasses.astuple(rule) for path, rule in self.rules.items()},
            scale_momentum=self.scale_momentum,
            scale_momentum_threshold=self.scale_momentum_threshold,
        )
        return config


def build_optimizer(cfg, model):
    """Detectron's SGD for `model` with cfg.SOLVER's schedule, momentum, decays and momentum correction.

    Call it under the training strategy's scope (`with strategy.scope():`). The optimizer comes built
    (its momentum slots exist), so no variable is created inside the tf.function of the train step,
    which tf.distribute strategies refuse, and a checkpoint can be restored into it right away.
    """
    solver = cfg.SOLVER
    optimizer = DetectronSGD(
        learning_rate=DetectronLRSchedule.from_cfg(cfg),
        rules=update_rules(cfg, variable_roles(model)),
        momentum=solver.MOMENTUM,
        scale_momentum=solver.SCALE_MOMENTUM,
        scale_momentum_threshold=solver.SCALE_MOMENTUM_THRESHOLD,
    )
    optimizer.build(model.trainable_variables)
    return optimizer
