"""Seeded weights that give a RetinaNet many well-separated detections (shared by the RetinaNet tests)."""

import keras
import numpy as np


def spread_weights(model, seed, logit_mean=-1.5, logit_std=1.5, delta_std=0.3):
    """Seeded weights for a detector with many detections: random body and towers, then the two
    prediction convs rescaled so that class logits (measured on `calibration` inputs) have the given
    mean and spread and box deltas a moderate spread. Probabilities then cover (0, 1) without ties."""
    rng = np.random.default_rng(seed)
    values = []
    for variable in model.weights:
        shape = tuple(variable.shape)
        if variable.path.endswith("kernel"):
            value = rng.normal(0.0, 1.0 / np.sqrt(np.prod(shape[:-1])), shape)
        elif "_bn/scale" in variable.path:
            value = np.ones(shape)
        else:
            value = rng.normal(0.0, 0.1, shape)
        values.append(value.astype(np.float32))
    model.set_weights(values)


def calibrate_predictions(model, inputs, levels, logit_mean=-1.5, logit_std=1.5, delta_std=0.3):
    """Rescale the shared prediction convs (outputs are linear in kernel and bias) so that on `inputs`
    the class logits have mean `logit_mean` and spread `logit_std`, the box deltas spread `delta_std`."""
    heads = keras.Model(
        model.inputs,
        [model.get_layer(f"retnet_cls_prob_fpn{level}").input for level in levels]
        + model.get_layer("detections").input[len(levels) : 2 * len(levels)],
    )
    outputs = [np.asarray(t) for t in heads(inputs)]
    logits = np.concatenate([t.ravel() for t in outputs[: len(levels)]])
    deltas = np.concatenate([t.ravel() for t in outputs[len(levels) :]])
    logit_scale = logit_std / logits.std()
    for name, scale, shift in (
        (f"retnet_cls_pred_fpn{levels[0]}", logit_scale, logit_mean - logit_scale * logits.mean()),
        (f"retnet_bbox_pred_fpn{levels[0]}", delta_std / deltas.std(), 0.0),
    ):
        layer = model.get_layer(name)
        kernel, bias = (np.asarray(w) for w in layer.get_weights())
        layer.set_weights([kernel * scale, bias * scale + shift])
