"""Shared parts of the one-step strategy-equivalence tests (tests/test_trainer.py, the domain-adaptation one):
the same global batch stepped under `default` (one device) and `mirrored` (the batch split over the replicas,
image order kept), and the comparison of the two steps' records (support/training_fixtures.zeroed_rpn_step:
dicts, or the .npz files worker processes write)."""

import numpy as np
import tensorflow as tf


def default_and_mirrored(batch, replicas=2):
    """(strategy name, its TRAIN.IMS_PER_BATCH / NUM_GPUS overrides, its dataset) for `default` (the whole
    `batch` on one device) and `mirrored` (`replicas` devices, replica k taking the k-th equal slice of `batch`)."""
    images = int(batch["images"].shape[0])
    per_replica = images // replicas
    whole = tf.data.Dataset.from_tensors(batch)
    yield "default", ("TRAIN.IMS_PER_BATCH", str(images)), whole
    split = ("TRAIN.IMS_PER_BATCH", str(per_replica), "NUM_GPUS", str(replicas))
    yield "mirrored", split, whole.unbatch().batch(per_replica)


def assert_same_step(single, mirrored, expected_outputs, per_weight_tolerance, all_weights_tolerance):
    """Check that the mirrored step is the one-device step: 1 and 2 replicas, the same initial weights, the
    `expected_outputs` among the outputs and all outputs equal, and weight updates that agree within the
    tolerances (relative L2 norms, per weight tensor and of all weights together) after a step that really
    trained. Returns {blob: (one-device update, mirrored update)}."""
    assert [int(single["replicas"]), int(mirrored["replicas"])] == [1, 2]
    names = [n for n in single if n.startswith("initial/")]
    for name in names:
        np.testing.assert_array_equal(mirrored[name], single[name], err_msg=name)  # the same seeded start

    outputs = sorted(n for n in single if n.startswith("output/"))
    assert set(expected_outputs) <= set(outputs)
    np.testing.assert_allclose([mirrored[n] for n in outputs], [single[n] for n in outputs], rtol=1e-5, atol=1e-7)

    updates = {}
    for name in names:
        blob = name.split("/", 1)[1]
        updates[blob] = (single[f"updated/{blob}"] - single[name], mirrored[f"updated/{blob}"] - mirrored[name])
    assert max(np.abs(one).max() for one, _ in updates.values()) > 1e-3  # the step really trained
    errors = {blob: np.linalg.norm(two - one) / max(np.linalg.norm(one), 1e-12) for blob, (one, two) in updates.items()}
    assert max(errors.values()) < per_weight_tolerance, sorted(errors.items(), key=lambda e: -e[1])[:5]
    total_error = sum(np.sum((two - one) ** 2) for one, two in updates.values())
    assert np.sqrt(total_error / sum(np.sum(one**2) for one, _ in updates.values())) < all_weights_tolerance
    return updates
