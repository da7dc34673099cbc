"""tf.distribute strategies for training: Detectron's data parallelism (NUM_GPUS replicas).

| TFDET.STRATEGY | strategy | replicas |
|---|---|---|
| default | TF's default strategy (one device) | 1 |
| mirrored | MirroredStrategy over NUM_GPUS GPUs, or over logical CPUs on a CPU-only host (`make_logical_cpus`) | NUM_GPUS |
| multi_worker | MultiWorkerMirroredStrategy; the cluster comes from the TF_CONFIG environment variable | workers x local devices |

NUM_GPUS is the number of replicas in sync (checked), TRAIN.IMS_PER_BATCH the images per replica, so a
step sees NUM_GPUS * IMS_PER_BATCH images, as in Detectron. Without the TFDET.STRATEGY key (or when it
is empty) the strategy is `mirrored` when NUM_GPUS > 1 and `default` otherwise.

Gradients: Detectron scales every loss by 1/NUM_GPUS (GetLossScale) and all-reduce-sums the gradients,
i.e. it applies the gradient of the mean of the per-GPU losses. `scale_replica_loss` does the same
inside `strategy.run`, and Keras' optimizer sums the replica gradients. When each replica's loss is a
mean over a fixed count of its own samples (Detectron's normalisation: per-image or per-RoI means
with the same count on every replica), that mean of means equals the loss of one device on the whole
global batch, so the update equals the single-device update.
"""

import os

import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker")


def make_logical_cpus(count):
    """Split the host CPU into `count` logical devices, for `mirrored` on a machine without GPUs.

    Must run before TensorFlow initialises its devices (before any op, model or strategy is created).
    """
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError as error:
        raise RuntimeError(
            f"make_logical_cpus({count}) must run before TensorFlow initialises its devices: {error}"
        ) from None


def strategy_name(cfg):
    """TFDET.STRATEGY, or (key absent or empty) `mirrored` when NUM_GPUS > 1 else `default`."""
    name = cfg.get("TFDET", {}).get("STRATEGY", "") or ("mirrored" if cfg.NUM_GPUS > 1 else "default")
    if name not in STRATEGIES:
        raise ValueError(f"Unknown TFDET.STRATEGY {name!r}; expected one of {', '.join(STRATEGIES)}")
    return name


def build_strategy(cfg):
    """The strategy of the config, checked to have NUM_GPUS replicas. Create it before any model or op."""
    name = strategy_name(cfg)
    if name == "default":
        strategy = tf.distribute.get_strategy()
    elif name == "mirrored":
        strategy = tf.distribute.MirroredStrategy(devices=_mirrored_devices(cfg))
    else:
        if not os.environ.get("TF_CONFIG"):
            raise ValueError("TFDET.STRATEGY multi_worker reads the cluster from TF_CONFIG, which is not set")
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if strategy.num_replicas_in_sync != cfg.NUM_GPUS:
        raise ValueError(
            f"NUM_GPUS is {cfg.NUM_GPUS} but the {name} strategy has {strategy.num_replicas_in_sync} replica(s); "
            "set NUM_GPUS to the replica count (and scale SOLVER.BASE_LR/MAX_ITER/STEPS by Detectron's linear rule)"
        )
    return strategy


def _mirrored_devices(cfg):
    """The first NUM_GPUS GPUs, or the first NUM_GPUS logical CPUs when there is no GPU."""
    count = cfg.NUM_GPUS
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        if len(gpus) < count:
            raise ValueError(
                f"NUM_GPUS is {count} but only {len(gpus)} GPU(s) are visible: to train on them, end the command "
                f"line with {_fewer_devices(cfg, len(gpus))}"
            )
        return [device.name for device in gpus[:count]]
    cpus = tf.config.list_logical_devices("CPU")
    if len(cpus) < count:
        raise ValueError(
            f"NUM_GPUS is {count} but this machine has no GPU: to train on its CPU, end the command line with "
            f"{_fewer_devices(cfg, 1)}"
        )
    return [device.name for device in cpus[:count]]


def _fewer_devices(cfg, count):
    """The overrides that train `cfg` on `count` devices by Detectron's linear rule (learning rate in proportion
    to the images per iteration, iterations in inverse proportion), and what they keep."""
    factor = cfg.NUM_GPUS / count
    steps = [round(step * factor) for step in cfg.SOLVER.STEPS]
    return (
        f"NUM_GPUS {count} SOLVER.BASE_LR {cfg.SOLVER.BASE_LR / factor:g} SOLVER.MAX_ITER "
        f"{round(cfg.SOLVER.MAX_ITER * factor)} SOLVER.STEPS \"{steps}\" (Detectron's linear rule: the same schedule "
        f"in images, {factor:g}x the iterations)"
    )


def global_batch_size(cfg, strategy):
    """Images per step over all replicas: replicas x TRAIN.IMS_PER_BATCH."""
    return strategy.num_replicas_in_sync * cfg.TRAIN.IMS_PER_BATCH


def scale_replica_loss(loss):
    """`loss` / replicas in sync (Detectron's GetLossScale); call inside `strategy.run` before taking gradients."""
    return loss / tf.distribute.get_strategy().num_replicas_in_sync


def replica_mean(strategy, per_replica_values):
    """{name: float} mean over replicas of per-replica (unscaled) values, e.g. loss terms for logging."""
    return {
        name: float(strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None))
        for name, value in per_replica_values.items()
    }


def is_chief(strategy):
    """Whether this process writes shared files (checkpoints, logs): always, except non-chief multi-workers."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief
