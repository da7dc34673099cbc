"""The training loop: Detectron's `tools/train_net.py` + `utils/train.py` on a tf.distribute strategy.

    trainer = Trainer(cfg)          # strategy, training model, optimizer, checkpointer (refuses an
                                    # AffineChannel body without initial weights: it would diverge)
    trainer.initialize()            # resume from OUTPUT_DIR, else TRAIN.WEIGHTS, else the builders' init
    trainer.train()                 # iterations up to SOLVER.MAX_ITER, checkpoints, json_stats, final weights

Initial weights are drawn from RNG_SEED (Detectron seeds its RNGs with it). Each iteration runs
`strategy.run` of one step per replica: the training model's loss terms on the replica's
TRAIN.IMS_PER_BATCH images, their sum scaled by 1 / replicas (Detectron's GetLossScale; Keras'
optimizer sums the replica gradients) and Detectron's SGD at the LR of the iteration
(`optimizer.iterations`). Sampling seeds are per image, (RNG_SEED, iteration * global batch + the
image's index in the global batch), so the draws do not depend on how the batch is split.

State: a checkpoint holds the weights, the momentum and the iteration; the input pipeline is a pure
function of RNG_SEED and the iteration (`tfdet.data.pipeline`, `start_step`), so the iteration is
also the data position: a resumed run sees the batches the interrupted one would have seen. The
loss terms are checked (NaN/inf stop the run) before any checkpoint of their iteration. At the end
the weights go into an inference model by Detectron blob name and are saved as
`model_final.weights.h5` (with `config.yaml`), which `tfdet.inference.Predictor` loads.
"""

import dataclasses
import logging
import os

import keras
import tensorflow as tf

from tfdet.config.errors import ConfigError
from tfdet.config.support import check_supported
from tfdet.data.domain_pipeline import distributed_domain_dataset_fn
from tfdet.data.domain_pipeline import target_roidb as configured_target_roidb
from tfdet.data.model_labels import roidb_categories
from tfdet.data.pipeline import distributed_dataset_fn, unreadable_image_error
from tfdet.data.roidb import training_roidb
from tfdet.engine.checkpoint import (
    FINAL_WEIGHTS,
    TrainingCheckpointer,
    check_finite_losses,
    is_snapshot_iteration,
)
from tfdet.engine.lr_schedule import lr_at_iter
from tfdet.engine.metrics_log import LearningRateLog, TrainingStats
from tfdet.engine.optimizer import build_optimizer
from tfdet.engine.strategy import build_strategy, global_batch_size, is_chief, scale_replica_loss
from tfdet.engine.weights import copy_initial_weights, export_final_weights, load_initial_weights
from tfdet.graph_options import cpu_graph_options
from tfdet.modeling import build_model
from tfdet.modeling.mixed_precision import needs_loss_scaling
from tfdet.modeling.rematerialization import training_forward
from tfdet.modeling.training_graph import loss_terms
from tfdet.op_tracebacks import user_frames_only

logger = logging.getLogger(__name__)

@dataclasses.dataclass
class TrainingResult:
    """What a `Trainer.train` call did: the iteration it started at and ended at, the final weights file."""

    start_iter: int
    end_iter: int
    final_weights: str
    resumed_from: str | None = None


def image_seeds(rng_seed, iteration, global_batch, batch_size):
    """(B, 2) int64 sampling seeds of this replica's B images (call inside `strategy.run`).

    Seed of an image: (RNG_SEED, iteration * global batch + its index in the global batch), the index
    being replica id * B + position, so one device on the whole batch draws what the replicas draw.
    """
    replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.int64)
    batch_size = tf.cast(batch_size, tf.int64)
    index = tf.cast(iteration, tf.int64) * global_batch + replica * batch_size + tf.range(batch_size)
    return tf.stack([tf.fill(tf.shape(index), tf.constant(rng_seed, tf.int64)), index], axis=1)


# RESNETS.TRANS_FUNC of Detectron's ResNet blocks whose norm is AffineChannel (frozen BN: a fixed per-channel
# x * scale + bias meant to hold ImageNet statistics); the GroupNorm blocks are bottleneck_gn_transformation.
AFFINE_CHANNEL_BLOCKS = "bottleneck_transformation"


def refuse_affine_body_from_scratch(cfg, output_dir):
    """Raise ConfigError when this run would train AffineChannel ResNet blocks from random weights: no
    TRAIN.WEIGHTS and nothing in `output_dir` that TRAIN.AUTO_RESUME would resume (or finish) from.

    Nothing normalises such blocks, so their activations grow block by block and the losses reach NaN
    within a few iterations. Detectron trains them regardless; we stop before building anything.
    TFDET.ALLOW_AFFINE_FROM_SCRATCH lets the run go on (tests of a single step do).
    """
    if cfg.RESNETS.TRANS_FUNC != AFFINE_CHANNEL_BLOCKS or cfg.TRAIN.WEIGHTS or cfg.TFDET.ALLOW_AFFINE_FROM_SCRATCH:
        return
    if cfg.TRAIN.AUTO_RESUME and (
        tf.train.get_checkpoint_state(output_dir) is not None or os.path.exists(os.path.join(output_dir, FINAL_WEIGHTS))
    ):
        return
    raise ConfigError(
        f"MODEL.CONV_BODY {cfg.MODEL.CONV_BODY} with RESNETS.TRANS_FUNC {AFFINE_CHANNEL_BLOCKS} (AffineChannel, "
        f"a frozen BN that keeps pretrained statistics) would start from random weights (TRAIN.WEIGHTS '' and no "
        f"checkpoint to resume in {output_dir}): unnormalised, its activations explode and the losses are NaN "
        "within a few iterations, a guaranteed failure that Detectron does not check. Fix: set TRAIN.WEIGHTS to "
        "pretrained weights (e.g. an ImageNet R-50.pkl), or train from scratch with GroupNorm (RESNETS.STEM_FUNC "
        "basic_gn_stem, RESNETS.TRANS_FUNC bottleneck_gn_transformation, RESNETS.SHORTCUT_FUNC basic_gn_shortcut, "
        "FPN.USE_GN True, TRAIN.FREEZE_AT 0, as configs/shapes_*.yaml do), or set TFDET.ALLOW_AFFINE_FROM_SCRATCH "
        "True to train anyway"
    )


class Trainer:
    """Detectron's training of `cfg` on a tf.distribute strategy (see the module docstring).

    Args:
        cfg: the config (SOLVER, TRAIN, model keys).
        output_dir: checkpoints, metrics.json, tensorboard/, final weights (default: cfg.OUTPUT_DIR).
        strategy: the strategy to train on (default: `build_strategy(cfg)`, TFDET.STRATEGY / NUM_GPUS).
        roidb: the training Roidb (default: cfg.TRAIN.DATASETS through the catalog).
        target_roidb: MODEL.DOMAIN_ADAPTATION_ON: the target-domain Roidb (default: cfg.TRAIN.TARGET_DATASETS).
        progress: the tqdm bar (None: on a terminal).
    """

    def __init__(self, cfg, output_dir=None, strategy=None, roidb=None, progress=None, target_roidb=None):
        check_supported(cfg, "training")  # before anything is built: keys tfdet does not implement
        self.cfg = cfg
        self.output_dir = os.fspath(output_dir or cfg.OUTPUT_DIR)
        refuse_affine_body_from_scratch(cfg, self.output_dir)
        self.strategy = strategy or build_strategy(cfg)
        # the datasets are read (and checked) before any model is built: bad input stops the run at once
        self.roidb = roidb if roidb is not None else training_roidb(cfg)
        self.target_roidb = target_roidb
        if cfg.MODEL.DOMAIN_ADAPTATION_ON and target_roidb is None:
            self.target_roidb = configured_target_roidb(cfg)
        self.progress = progress
        self.global_batch = global_batch_size(cfg, self.strategy)
        keras.utils.set_random_seed(cfg.RNG_SEED)  # the same initial weights on every run of this config
        with self.strategy.scope():
            self.model = build_model(cfg, training=True)
            self.optimizer = build_optimizer(cfg, self.model)
            if needs_loss_scaling(cfg):  # mixed_float16: dynamic loss scaling around Detectron's SGD
                self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
                self.optimizer.build(self.model.trainable_variables)
            self.forward = training_forward(cfg, self.model)
        self.input_names = [name for name in self.model.input if name != "seeds"]
        self.checkpointer = TrainingCheckpointer(self.output_dir, self.model, self.optimizer, strategy=self.strategy)
        self.resumed_from = None
        self._step = tf.function(self._distributed_step, reduce_retracing=True, autograph=False)

    @property
    def iteration(self):
        """Completed iterations (the optimizer's counter)."""
        return self.checkpointer.iteration

    def initialize(self):
        """Resume from the newest checkpoint in the output folder (TRAIN.AUTO_RESUME), else load
        TRAIN.WEIGHTS when set (TRAIN.COPY_WEIGHTS: a copy of it goes to the output folder first); returns the
        iteration training starts at."""
        if self.cfg.TRAIN.AUTO_RESUME:
            if is_chief(self.strategy):
                copy_initial_weights(self.cfg, self.output_dir)
            self.resumed_from = self.checkpointer.restore_latest()
        if self.resumed_from:
            logger.info("Resumed from %s at iteration %d", self.resumed_from, self.iteration)
        elif self.cfg.TRAIN.WEIGHTS:
            class_names = getattr(self.roidb, "class_names", None)  # a Roidb's; tests may pass plain lists
            load_initial_weights(self.model, self.cfg, self.cfg.TRAIN.WEIGHTS, class_names)
        return self.iteration

    def distributed_dataset(self, start_step):
        """The training batches from iteration `start_step` on, one TRAIN.IMS_PER_BATCH batch per replica
        (MODEL.DOMAIN_ADAPTATION_ON: half source, half target images, `tfdet.data.domain_pipeline`)."""
        if self.cfg.MODEL.DOMAIN_ADAPTATION_ON:
            dataset_fn = distributed_domain_dataset_fn(self.cfg, self.roidb, self.target_roidb, start_step=start_step)
        else:
            dataset_fn = distributed_dataset_fn(self.cfg, self.roidb, start_step=start_step)
        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def train_step(self, distributed_batch):
        """One iteration on a distributed batch: {name: float} loss terms and metrics, means over replicas."""
        with cpu_graph_options(), user_frames_only():
            outputs = self._step(distributed_batch)
        return {name: float(value) for name, value in outputs.items()}

    def _distributed_step(self, batch):
        outputs = self.strategy.run(self._replica_step, args=(batch,))
        return {name: self.strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
                for name, value in outputs.items()}

    def _replica_step(self, batch):
        inputs = {name: batch[name] for name in self.input_names}
        inputs["seeds"] = image_seeds(
            self.cfg.RNG_SEED, self.optimizer.iterations, self.global_batch, tf.shape(inputs["images"])[0]
        )
        with tf.GradientTape() as tape:
            outputs = self.forward(inputs, training=True)
            total = tf.add_n(list(loss_terms(outputs).values()))
            scaled = scale_replica_loss(total)
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
                scaled = self.optimizer.scale_loss(scaled)
        variables = self.model.trainable_variables
        if self.cfg.TFDET.DEVICE_MAP:
            # A tape leaves gradient ops unplaced; tf.gradients colocates each with its forward op, so the
            # backward pass of a part TFDET.DEVICE_MAP moves runs on that part's device too.
            gradients = tf.gradients(scaled, variables)
        else:
            gradients = tape.gradient(scaled, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return outputs

    def _next_batch(self, iterator, saved_at):
        """The next batch; an image the input pipeline cannot read (or of another size than its json says)
        stops the run as one UnreadableImage line naming it, after a checkpoint of the iterations done."""
        try:
            return next(iterator)
        except tf.errors.OpError as error:
            image_error = unreadable_image_error(error)
            if image_error is None:
                raise
            if self.iteration != saved_at:
                self.checkpointer.save()
            raise image_error from None

    def train(self):
        """Train from the current iteration to SOLVER.MAX_ITER; returns a TrainingResult.

        Detectron's rule: when the output folder already holds the final weights (and
        TRAIN.AUTO_RESUME is on), training is skipped.
        """
        cfg = self.cfg
        start_iter = self.iteration
        if cfg.TRAIN.AUTO_RESUME and self.checkpointer.has_final_weights():
            logger.info("%s exists: training already finished", self.checkpointer.final_weights_path)
            return TrainingResult(start_iter, start_iter, self.checkpointer.final_weights_path, self.resumed_from)
        chief = is_chief(self.strategy)
        stats = TrainingStats(cfg.SOLVER.MAX_ITER, self.output_dir, self.global_batch, start_iter=start_iter,
                              is_chief=chief, progress=self.progress)
        saved_at = start_iter
        lr_log = LearningRateLog(cfg.SOLVER.LOG_LR_CHANGE_THRESHOLD)
        try:
            iterator = iter(self.distributed_dataset(start_iter))
            if chief and start_iter < cfg.SOLVER.MAX_ITER:
                logger.info("iteration %d: tracing and optimising the training step (once per run)", start_iter)
            for cur_iter in range(start_iter, cfg.SOLVER.MAX_ITER):
                lr = lr_at_iter(cfg, cur_iter)
                lr_change = lr_log.update(cur_iter, lr)
                if chief and lr_change:
                    logger.info(lr_change)
                stats.iter_tic()
                outputs = self.train_step(self._next_batch(iterator, saved_at))
                stats.iter_toc()
                losses = loss_terms(outputs)
                check_finite_losses(losses, cur_iter)
                stats.update(losses, {k: v for k, v in outputs.items() if k not in losses})
                stats.log_iteration(cur_iter, lr)
                if is_snapshot_iteration(cfg, cur_iter, start_iter):
                    self.checkpointer.save()
                    saved_at = self.iteration
        finally:
            stats.close()
        if self.iteration != saved_at:
            self.checkpointer.save()
        final = self.checkpointer.final_weights_path
        if chief:
            final = export_final_weights(cfg, self.model, self.output_dir, roidb_categories(self.roidb))
        return TrainingResult(start_iter, self.iteration, final, self.resumed_from)
