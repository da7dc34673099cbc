"""Weights moved between two models by Detectron blob name: a training model and the inference model of one
config (the trainer's final weights, test-time augmentation's scaled copies), or our `.weights.h5` of another
config into a training model (TRAIN.WEIGHTS, with class transfer)."""

from tfdet.modeling.detectron_names import model_blobs


def copy_weights_by_blob_name(source, target, mask_head="", keep_missing=None, class_transfer=None, source_names=None):
    """Assign every Detectron-named variable of `target` the value of the same blob in `source`.

    Training and inference models of one config share their blob names (same builders), so this moves
    weights between them. Raises ValueError naming the blobs `source` lacks or whose shapes differ,
    before changing anything; blobs for which `keep_missing(name)` is true may be absent from `source`
    and keep their values. With `class_transfer` (a `tfdet.modeling.class_transfer.ClassTransfer`:
    fine-tuning from a model of other classes, named `source_names`), the blobs that follow the class or
    keypoint count take the values it gives (rows by class name, or the model's initialisation), equal shapes
    included. Returns the number of variables assigned.
    """
    values = {name: (variable, to_caffe2) for name, variable, to_caffe2, _ in model_blobs(source, mask_head)}
    targets = {name: entry for name, *entry in model_blobs(target, mask_head)}  # (variable, to_caffe2, to_keras)
    transferred = {} if class_transfer is None else _class_transfer(values, targets, class_transfer, source_names)
    pairs, missing, mismatched = [], [], []
    for name, (variable, _, _) in targets.items():
        if name in transferred:
            pairs.append((variable, transferred[name]))
        elif name not in values:
            if not (keep_missing and keep_missing(name)):
                missing.append(name)
        elif tuple(values[name][0].shape) != tuple(variable.shape):
            mismatched.append(f"{name} {tuple(values[name][0].shape)} vs {tuple(variable.shape)}")
        else:
            pairs.append((variable, values[name][0]))
    if missing or mismatched:
        problems = []
        if missing:
            problems.append(f"missing: {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
        if mismatched:
            problems.append(f"shape mismatch: {', '.join(mismatched[:5])}")
        raise ValueError(f"Cannot copy weights by Detectron blob name ({'; '.join(problems)})")
    for variable, value in pairs:
        variable.assign(value)
    return len(pairs)


def _class_transfer(values, targets, class_transfer, source_names):
    """{blob name: Keras value} of the count blobs both models hold that `class_transfer` gives new values."""
    blobs = {
        name: (values[name][1](values[name][0].numpy()), targets[name][1](targets[name][0].numpy()))
        for name in class_transfer.layouts
        if name in values and name in targets
    }
    resolved, _ = class_transfer.resolve(blobs, source_names)
    return {name: targets[name][2](value).astype(targets[name][0].dtype) for name, value in resolved.items()}
