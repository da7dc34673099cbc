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
    fine-tuning from a model of other classes, named `source_names`), blobs that differ only in their class
    or keypoint count are re-initialised as it says instead. Returns the number of variables copied.
    """
    values = {name: (variable, to_caffe2) for name, variable, to_caffe2, _ in model_blobs(source, mask_head)}
    pairs, missing, mismatched = [], [], {}
    for name, variable, to_caffe2, to_keras in model_blobs(target, mask_head):
        if name not in values:
            if not (keep_missing and keep_missing(name)):
                missing.append(name)
        elif tuple(values[name][0].shape) != tuple(variable.shape):
            mismatched[name] = (variable, to_caffe2, to_keras)
        else:
            pairs.append((variable, values[name][0]))
    if class_transfer is not None and mismatched:
        resolved, _ = class_transfer.resolve(
            {
                name: (values[name][1](values[name][0].numpy()), to_caffe2(variable.numpy()))
                for name, (variable, to_caffe2, _) in mismatched.items()
            },
            source_names,
        )
        for name, value in resolved.items():
            variable, _, to_keras = mismatched.pop(name)
            pairs.append((variable, to_keras(value).astype(variable.dtype)))
    if missing or mismatched:
        problems = []
        if missing:
            problems.append(f"missing: {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
        if mismatched:
            shapes = [
                f"{name} {tuple(values[name][0].shape)} vs {tuple(variable.shape)}"
                for name, (variable, _, _) in mismatched.items()
            ]
            problems.append(f"shape mismatch: {', '.join(shapes[:5])}")
        raise ValueError(f"Cannot copy weights by Detectron blob name ({'; '.join(problems)})")
    for variable, value in pairs:
        variable.assign(value)
    return len(pairs)
