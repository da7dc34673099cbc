"""Training checkpoints (model, momentum slots, iteration, data position), auto-resume, final weights, NaN guard.

Layout of a training directory:

    checkpoint                        TF's index of the kept checkpoints (the latest one first read)
    model_iter-<N>.index / .data-*    state after N completed iterations (N = optimizer.iterations)
    model_final.weights.h5            Keras weights at the end of training (Detectron's model_final.pkl)

Writes cannot leave the index pointing at a half-written checkpoint: TF writes a checkpoint into
`<prefix>_temp/` and moves it into place, and `tf.train.CheckpointManager` rewrites `checkpoint` (temp
file + rename) only after that. `restore_latest` still falls back to the newest readable checkpoint
when the latest one is damaged, and removes `_temp` folders left by a save that was killed.

Under MultiWorkerMirroredStrategy every worker calls `save`; the chief writes into the directory and
the others into a scratch folder they delete (TF's multi-worker checkpointing pattern).
"""

import glob
import math
import os
import shutil
import tempfile

import tensorflow as tf

from tfdet.engine.strategy import is_chief

CHECKPOINT_NAME = "model_iter"
FINAL_WEIGHTS = "model_final.weights.h5"


class NonFiniteLossError(FloatingPointError):
    """A loss term (or a weight about to be saved) is NaN or infinite: training stops, nothing is saved."""


def check_finite_losses(losses, iteration):
    """Raise NonFiniteLossError naming `iteration` and every NaN/inf term of `losses` ({name: number}).

    Call it after each step and before any checkpoint of that step, so a diverged step never reaches disk.
    """
    bad = {name: float(value) for name, value in losses.items() if not math.isfinite(float(value))}
    if bad:
        terms = ", ".join(f"{name}={value}" for name, value in sorted(bad.items()))
        raise NonFiniteLossError(f"Loss is not finite at iteration {iteration}: {terms}; no checkpoint written for it")


def snapshot_period(cfg):
    """Detectron's checkpoint period: TRAIN.SNAPSHOT_ITERS / NUM_GPUS iterations (at least 1)."""
    return max(1, int(cfg.TRAIN.SNAPSHOT_ITERS / cfg.NUM_GPUS))


def is_snapshot_iteration(cfg, cur_iter, start_iter):
    """Whether Detectron snapshots after iteration `cur_iter` (0-based) of a run that began at `start_iter`."""
    return (cur_iter + 1) % snapshot_period(cfg) == 0 and cur_iter > start_iter


class TrainingCheckpointer:
    """Saves and restores {model, optimizer (momentum, iterations), data state} in `directory`.

    Args:
        directory: the training output directory.
        model, optimizer: the Keras model and its optimizer (created under the training strategy).
        data_state: {name: trackable} for the input pipeline's position, restored with the rest:
            a tf.Variable the loop maintains (e.g. images or batches consumed) and/or a tf.data
            iterator (`iter(dataset)`, checkpointable when the pipeline supports it).
        max_to_keep: checkpoints kept (older ones are deleted).
        strategy: the training strategy (decides who writes under multi-worker training).
    """

    def __init__(self, directory, model, optimizer, data_state=None, max_to_keep=5, strategy=None):
        self.directory = os.fspath(directory)
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy or tf.distribute.get_strategy()
        data_state = dict(data_state or {})
        if {"model", "optimizer"} & set(data_state):
            raise ValueError("data_state names must differ from 'model' and 'optimizer'")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **data_state)
        self._chief = is_chief(self.strategy)
        write_dir = self.directory if self._chief else tempfile.mkdtemp(prefix="tfdet_worker_checkpoint_")
        os.makedirs(write_dir, exist_ok=True)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, write_dir, max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_NAME
        )

    @property
    def iteration(self):
        """Completed iterations: the optimizer's counter, saved and restored with it."""
        return int(self.optimizer.iterations.numpy())

    @property
    def final_weights_path(self):
        return os.path.join(self.directory, FINAL_WEIGHTS)

    def has_final_weights(self):
        """Whether training already finished here (Detectron skips training when model_final exists)."""
        return os.path.exists(self.final_weights_path)

    def save(self):
        """Write a checkpoint numbered by the completed iterations; returns its path in `directory`.

        Refuses (NonFiniteLossError) when a weight is NaN/inf, so a diverged model never replaces a good one.
        """
        self._check_finite_weights()
        path = self.manager.save(checkpoint_number=self.iteration)
        if not self._chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
            os.makedirs(self.manager.directory, exist_ok=True)
        return os.path.join(self.directory, os.path.basename(path))

    def restore_latest(self):
        """Restore the newest readable checkpoint of `directory`; returns its path, or None when there is none.

        Builds the optimizer first so its momentum slots exist to receive their values. A damaged latest
        checkpoint (missing or truncated files) falls back to the previous one.
        """
        self._remove_interrupted_saves()
        if not self.optimizer.built:
            self.optimizer.build(self.model.trainable_variables)
        candidates = self._checkpoints_newest_first()
        errors = []
        for path in candidates:
            try:
                self.checkpoint.restore(path).assert_existing_objects_matched()
            except Exception as error:  # noqa: BLE001 -- any failure to read means: try the previous checkpoint
                errors.append(f"{os.path.basename(path)}: {type(error).__name__}: {str(error).splitlines()[0]}")
                continue
            if errors:
                tf.get_logger().warning("Skipped damaged checkpoint(s): %s", "; ".join(errors))
            return path
        if candidates:
            raise RuntimeError(f"No readable checkpoint in {self.directory}: {'; '.join(errors)}")
        return None

    def _checkpoints_newest_first(self):
        state = tf.train.get_checkpoint_state(self.directory)
        if state is None:
            return []
        # get_checkpoint_state has joined relative paths to the directory already (joining again doubled a
        # relative OUTPUT_DIR: outputs/x/outputs/x/model_iter-N, and the run could not resume)
        paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
        return sorted(set(paths), key=_checkpoint_number, reverse=True)

    def _remove_interrupted_saves(self):
        if self._chief:
            for leftover in glob.glob(os.path.join(self.directory, f"{CHECKPOINT_NAME}-*_temp")):
                shutil.rmtree(leftover, ignore_errors=True)

    def _check_finite_weights(self):
        floats = [v for v in self.model.weights if tf.as_dtype(v.dtype).is_floating]
        bad = [v.path for v in floats if not bool(tf.reduce_all(tf.math.is_finite(v)))]
        if bad:
            raise NonFiniteLossError(
                f"Not saving at iteration {self.iteration}: non-finite values in {', '.join(bad[:5])}"
                + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            )


def _checkpoint_number(path):
    """N of `.../model_iter-N` (-1 when the name has no number)."""
    suffix = path.rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1
