"""Detectron's learning-rate policies with warm-up (utils/lr_policy.py): a Python function and a TF schedule.

`lr_at_iter(cfg, it)` is Detectron's `get_lr_at_iter` (float32 result); `DetectronLRSchedule` computes the
same value from a step tensor inside a tf.function and is what the optimizer reads each iteration.

| SOLVER.LR_POLICY | LR before warm-up |
|---|---|
| step | BASE_LR * GAMMA ** (it // STEP_SIZE) |
| steps_with_decay | BASE_LR * GAMMA ** i, i = the step of SOLVER.STEPS (starting at 0) that `it` is in |
| steps_with_lrs | LRS[i] |
| cosine_decay | BASE_LR * 0.5 * (cos(pi * it / MAX_ITER) + 1) |
| exp_decay | BASE_LR * exp(it / MAX_ITER * log(GAMMA)) (GAMMA is the final/initial ratio) |

Warm-up (it < WARM_UP_ITERS) multiplies by WARM_UP_FACTOR (constant) or by
WARM_UP_FACTOR * (1 - a) + a with a = it / WARM_UP_ITERS (linear).
"""

import math
import types

import keras
import numpy as np
import tensorflow as tf

POLICIES = ("step", "steps_with_decay", "steps_with_lrs", "cosine_decay", "exp_decay")
WARM_UP_METHODS = ("constant", "linear")


def validate_solver(solver):
    """Raise ValueError (one line, naming the key) when cfg.SOLVER cannot define a schedule."""
    policy = solver.LR_POLICY
    if policy not in POLICIES:
        raise ValueError(f"Unknown SOLVER.LR_POLICY {policy!r}; expected one of {', '.join(POLICIES)}")
    if solver.WARM_UP_METHOD not in WARM_UP_METHODS:
        raise ValueError(
            f"Unknown SOLVER.WARM_UP_METHOD {solver.WARM_UP_METHOD!r}; expected one of {', '.join(WARM_UP_METHODS)}"
        )
    if policy in ("steps_with_decay", "steps_with_lrs"):
        steps = list(solver.STEPS)
        if not steps or steps[0] != 0:
            raise ValueError(
                f"SOLVER.STEPS must start with 0 for LR_POLICY {policy!r} (Detectron's convention), got {steps}"
            )
        if policy == "steps_with_lrs" and len(solver.LRS) != len(steps):
            raise ValueError(
                f"SOLVER.LRS needs one LR per entry of SOLVER.STEPS: {len(solver.LRS)} LRS for {len(steps)} STEPS"
            )
    if policy == "step" and solver.STEP_SIZE <= 0:
        raise ValueError(f"SOLVER.STEP_SIZE must be positive for LR_POLICY 'step', got {solver.STEP_SIZE}")
    if policy in ("cosine_decay", "exp_decay") and solver.MAX_ITER <= 0:
        raise ValueError(f"SOLVER.MAX_ITER must be positive for LR_POLICY {policy!r}, got {solver.MAX_ITER}")
    if policy == "exp_decay" and solver.GAMMA <= 0:
        raise ValueError(f"SOLVER.GAMMA must be positive for LR_POLICY 'exp_decay', got {solver.GAMMA}")


def _step_index(solver, it):
    """Detectron's get_step_index: the first bound of STEPS + [MAX_ITER] above `it`, minus one."""
    bounds = list(solver.STEPS) + [solver.MAX_ITER]
    for index, bound in enumerate(bounds):
        if it < bound:
            return index - 1
    return len(bounds) - 2


def _policy_lr(solver, it):
    """The LR of SOLVER.LR_POLICY at iteration `it`, before warm-up (float64)."""
    policy = solver.LR_POLICY
    if policy == "step":
        return solver.BASE_LR * solver.GAMMA ** (it // solver.STEP_SIZE)
    if policy == "steps_with_decay":
        return solver.BASE_LR * solver.GAMMA ** _step_index(solver, it)
    if policy == "steps_with_lrs":
        return solver.LRS[_step_index(solver, it)]
    if policy == "cosine_decay":
        return solver.BASE_LR * (0.5 * (math.cos(math.pi * (it / solver.MAX_ITER)) + 1.0))
    return solver.BASE_LR * math.exp(it / solver.MAX_ITER * math.log(solver.GAMMA))


def lr_at_iter(cfg, it):
    """Detectron's learning rate at iteration `it` (0-based) for cfg.SOLVER, as np.float32."""
    solver = cfg.SOLVER
    validate_solver(solver)
    lr = _policy_lr(solver, it)
    if it < solver.WARM_UP_ITERS:
        if solver.WARM_UP_METHOD == "constant":
            factor = solver.WARM_UP_FACTOR
        else:
            alpha = it / solver.WARM_UP_ITERS
            factor = solver.WARM_UP_FACTOR * (1.0 - alpha) + alpha
        lr *= factor
    return np.float32(lr)


SCHEDULE_KEYS = ("LR_POLICY", "BASE_LR", "GAMMA", "STEP_SIZE", "STEPS", "LRS", "MAX_ITER", "WARM_UP_ITERS",
                 "WARM_UP_FACTOR", "WARM_UP_METHOD")


@keras.saving.register_keras_serializable(package="tfdet")
class DetectronLRSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`lr_at_iter` as TF ops of the step (optimizer.iterations), usable inside a tf.function.

    Built from the cfg.SOLVER keys it needs (`from_cfg`). Computed in float64 with the operations of
    `lr_at_iter` (step-indexed LRs are looked up in a table made by the Python formula), then cast to float32.
    Steps are iterations >= 0.
    """

    def __init__(self, **solver_keys):
        super().__init__()
        missing = [key for key in SCHEDULE_KEYS if key not in solver_keys]
        if missing:
            raise ValueError(f"DetectronLRSchedule needs the SOLVER keys {', '.join(missing)}")
        self.solver = types.SimpleNamespace(**{key: _frozen(solver_keys[key]) for key in SCHEDULE_KEYS})
        validate_solver(self.solver)

    @classmethod
    def from_cfg(cls, cfg):
        """The schedule of cfg.SOLVER."""
        return cls(**{key: cfg.SOLVER[key] for key in SCHEDULE_KEYS})

    def _step_index(self, it):
        bounds = list(self.solver.STEPS) + [self.solver.MAX_ITER]
        below = tf.cast(it < tf.constant(bounds, tf.float64), tf.int32)
        first_above = tf.where(tf.reduce_any(below > 0), tf.argmax(below, output_type=tf.int32), len(bounds) - 1)
        return first_above - 1

    def _policy_lr(self, it):
        s = self.solver
        if s.LR_POLICY == "step":
            return s.BASE_LR * tf.pow(tf.constant(s.GAMMA, tf.float64), tf.math.floordiv(it, s.STEP_SIZE))
        if s.LR_POLICY == "steps_with_decay":
            table = [s.BASE_LR * s.GAMMA**index for index in range(len(s.STEPS))]
            return tf.gather(tf.constant(table, tf.float64), self._step_index(it))
        if s.LR_POLICY == "steps_with_lrs":
            return tf.gather(tf.constant(list(s.LRS), tf.float64), self._step_index(it))
        if s.LR_POLICY == "cosine_decay":
            return s.BASE_LR * (0.5 * (tf.cos(math.pi * (it / s.MAX_ITER)) + 1.0))
        return s.BASE_LR * tf.exp(it / s.MAX_ITER * math.log(s.GAMMA))

    def __call__(self, step):
        s = self.solver
        it = tf.cast(tf.convert_to_tensor(step), tf.float64)
        lr = self._policy_lr(it)
        if s.WARM_UP_ITERS > 0:
            if s.WARM_UP_METHOD == "constant":
                factor = tf.constant(s.WARM_UP_FACTOR, tf.float64)
            else:
                alpha = it / s.WARM_UP_ITERS
                factor = s.WARM_UP_FACTOR * (1.0 - alpha) + alpha
            lr = tf.where(it < s.WARM_UP_ITERS, lr * factor, lr)
        return tf.cast(lr, tf.float32)

    def get_config(self):
        return {key: _listed(getattr(self.solver, key)) for key in SCHEDULE_KEYS}


def _frozen(value):
    """A config value the schedule keeps: lists become tuples, so later config edits cannot reach it."""
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _listed(value):
    """A kept value back as the config writes it (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value
