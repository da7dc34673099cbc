"""TFDET.RECOMPUTE_BODY_STAGES: a training model's view whose trainable ResNet body stages are recomputed in the
backward pass (`tfdet.layers.RecomputedSegment`) instead of keeping their activations from the forward pass.

The view shares the model's layers and weights and computes the same numbers; only the training step calls it
(the model itself, its layers and saved weights are unchanged). Stages are found by their Detectron layer names:
stage k of the body runs from `pool1` (k = 2) or `res<k-1>_<last>_sum` to `res<k>_<last>_sum`. A C4 model's
res5 box head starts at its RoI features (`pool5`), so it is not a body stage. Frozen stages (TRAIN.FREEZE_AT)
keep nothing for the backward pass and are left alone, as are stages that TFDET.DEVICE_MAP moves to another
device (their gradient ops follow their forward ops only when no recomputation stands between them).
"""

import re

import keras

from tfdet.layers.recomputed_segment import RecomputedSegment

_BLOCK_SUM = re.compile(r"res([2-5])_(\d+)_sum")


def body_stage_segments(model, excluded_stages=()):
    """[(input layer name, output layer name)] of the trainable body stages of functional `model`, in order;
    stages named in `excluded_stages` ("res4") are left out."""
    last_block = {}
    for layer in model.layers:
        match = _BLOCK_SUM.fullmatch(layer.name)
        if match:
            stage, block = int(match.group(1)), int(match.group(2))
            last_block[stage] = max(block, last_block.get(stage, 0))
    segments, stage_input = [], "pool1"
    for stage in sorted(last_block):
        stage_output = f"res{stage}_{last_block[stage]}_sum"
        first_conv = model.get_layer(f"res{stage}_0_branch2a")
        if not _reads(model, first_conv, stage_input):
            break  # not a body stage (a C4 box head's res5 reads its RoI features)
        if first_conv.trainable and f"res{stage}" not in excluded_stages:
            segments.append((stage_input, stage_output))
        stage_input = stage_output
    return segments


def _reads(model, layer, source_name):
    """Whether `layer` (called once in `model`) takes the output of layer `source_name` as its input."""
    try:
        return layer.input is model.get_layer(source_name).output
    except ValueError:  # no such layer
        return False


def recomputing_view(model, segments):
    """Functional `model` with each (input layer, output layer) of `segments` run as one RecomputedSegment: a
    keras.Model on the same layers and inputs, giving the same outputs."""
    if not segments:
        return model
    replaced = {
        output: (source, keras.Model(model.get_layer(source).output, model.get_layer(output).output,
                                     name=f"{output}_segment"))
        for source, output in segments
    }
    produced = {}

    def call(layer, *args, **kwargs):
        if layer.name in replaced:
            source, segment = replaced[layer.name]
            outputs = RecomputedSegment(segment, name=f"{layer.name}_recomputed")(produced[source])
        else:
            outputs = layer(*args, **kwargs)
        produced[layer.name] = outputs
        return outputs

    return keras.models.clone_model(model, clone_function=lambda layer: layer, call_function=call)


def training_forward(cfg, model):
    """What a training step calls for `model`'s outputs: its recomputing view (TFDET.RECOMPUTE_BODY_STAGES),
    or the model itself."""
    if not cfg.TFDET.RECOMPUTE_BODY_STAGES:
        return model
    return recomputing_view(model, body_stage_segments(model, excluded_stages=tuple(cfg.TFDET.DEVICE_MAP)))
