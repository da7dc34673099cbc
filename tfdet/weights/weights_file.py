"""Weights files: what a weights argument names, decided in one place, and loading one into an inference model.

Every command and API that takes weights (Predictor, tfdet.infer/evaluate, savedmodel.export, TRAIN.WEIGHTS)
asks `weights_file` what the argument is: a Detectron `.pkl` (ported on the fly by `porting`), our
`.weights.h5`, or (TRAIN.WEIGHTS only) a tfdet training checkpoint. A URL or `catalog://` name is downloaded
and checked first (`tfdet.weights.download`). A missing or unknown file is one line naming the argument and the path.
"""

import dataclasses
import os

from tfdet.weights.download import resolve_weights

DETECTRON_PICKLE = "Detectron .pkl"
KERAS_WEIGHTS = "tfdet .weights.h5"
TRAINING_CHECKPOINT = "tfdet training checkpoint"


@dataclasses.dataclass(frozen=True)
class WeightsFile:
    """A local weights file (`path`; a checkpoint's prefix) and its `kind` (one of the three above)."""

    path: str
    kind: str


def weights_file(value, download_cache=None, role="weights", checkpoints=False) -> WeightsFile:
    """The local file `value` names and its kind. `role` names the argument in errors (`TRAIN.WEIGHTS`);
    `checkpoints`: a training checkpoint (a prefix or its folder) is accepted too.

    Raises FileNotFoundError in one line: `<role> file not found: <path>`, or what `value` is not.
    """
    path = resolve_weights(value, download_cache)  # a URL or catalog:// name: the checked download
    if path.endswith((".pkl", ".h5")):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{role} file not found: {path}")
        return WeightsFile(path, DETECTRON_PICKLE if path.endswith(".pkl") else KERAS_WEIGHTS)
    if checkpoints:
        checkpoint = _checkpoint_prefix(path)
        if checkpoint is not None:
            return WeightsFile(checkpoint, TRAINING_CHECKPOINT)
        raise FileNotFoundError(
            f"{role} {path!r} is neither a Detectron .pkl, a .weights.h5 file nor a tfdet training checkpoint"
        )
    raise FileNotFoundError(
        f"{role} {path!r} is neither a Detectron .pkl nor a .weights.h5 file (a training run's weights are its "
        "model_final.weights.h5)"
    )


def _checkpoint_prefix(path):
    """The checkpoint prefix `path` names (a prefix, or a folder: its newest checkpoint), None if it names none."""
    import tensorflow as tf  # only a checkpoint needs TensorFlow here; the commands check their files before it

    checkpoint = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if checkpoint is None or not tf.io.gfile.exists(checkpoint + ".index"):
        return None
    return checkpoint


def load_detectron_pickle(model, cfg, path, **options):
    """`porting.load_detectron_weights(model, cfg, path, **options)`: porting builds on tfdet, so it is imported
    only when a `.pkl` is loaded. Returns its report."""
    from porting import load_detectron_weights

    return load_detectron_weights(model, cfg, path, **options)


def load_weights(model, cfg, weights):
    """Load `weights` into the inference `model` of `cfg`: a WeightsFile already resolved (checked nothing
    again), or any `weights_file` argument but a checkpoint (resolved here)."""
    source = weights if isinstance(weights, WeightsFile) else weights_file(weights, cfg.DOWNLOAD_CACHE)
    if source.kind == DETECTRON_PICKLE:
        load_detectron_pickle(model, cfg, source.path)
    else:
        model.load_weights(source.path)
