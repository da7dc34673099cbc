"""Detectron's training statistics (utils/training_stats.py): `json_stats` lines, metrics.json, TensorBoard, tqdm.

Every LOG_PERIOD iterations (and at the last one) one record is written:

    iter, lr, time (mean seconds per iteration), eta, loss (window median of the summed loss terms),
    each loss term and metric (window medians), images_per_sec, mem (peak MB: GPU, or process RSS on CPU)

to stdout as Detectron prints it (`json_stats: {...}`, sorted keys, floats as "%.6f" strings), to
`<output_dir>/metrics.json` (one JSON object per line, plain numbers) and as TensorBoard scalars in
`<output_dir>/tensorboard`. Detectron's `mb_qsize` (its Python loader queue) has no tf.data counterpart
and is left out. The iteration timer restarts after the first LOG_PERIOD iterations to drop warm-up
outliers, as Detectron does; the run's first iteration (where the training step is traced and optimised,
often longer than a hundred later ones) never enters the mean, so the ETA is sane from the second
iteration on: the first record's `time` is that first iteration's and its `eta` is "unknown". The tqdm bar
starts after the first iteration for the same reason.
"""

import collections
import datetime
import json
import math
import os
import resource
import sys
import time

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2
from tqdm import tqdm

LOG_PERIOD = 20
WINDOW_SIZE = 20

# What TensorBoard's scalar summaries carry, written with TF's core tf.summary.write: TF no longer
# installs the tensorboard package that tf.summary.scalar needs.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
    data_class=summary_pb2.DATA_CLASS_SCALAR,
)


class SmoothedValue:
    """A series smoothed as Detectron logs it: the median of its last `window_size` values."""

    def __init__(self, window_size=WINDOW_SIZE):
        self.window = collections.deque(maxlen=window_size)

    def add(self, value):
        self.window.append(value)

    def median(self):
        return float(np.median(self.window))


class IterationTimer:
    """Mean wall time of the timed iterations since the last reset; the very first iteration timed (a run's
    warm-up: tracing, graph optimisation) is kept apart in `first` and never enters the mean."""

    def __init__(self):
        self.first = None
        self.reset()

    def reset(self):
        self.total = 0.0
        self.calls = 0
        self._start = None

    def tic(self):
        self._start = time.perf_counter()

    def toc(self):
        elapsed = time.perf_counter() - self._start
        if self.first is None:
            self.first = elapsed
            return
        self.total += elapsed
        self.calls += 1

    @property
    def average(self):
        return self.total / self.calls if self.calls else 0.0


def json_stats_line(stats):
    """Detectron's log_json_stats text: `json_stats: ` + sorted JSON with top-level floats as '%.6f' strings."""
    shown = {key: f"{value:.6f}" if isinstance(value, float) else value for key, value in stats.items()}
    return "json_stats: " + json.dumps(shown, sort_keys=True)


def peak_memory_mb():
    """Peak memory in MB: the largest GPU peak when GPUs are visible, else this process's peak RSS."""
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        peak = max(tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"] for i in range(len(gpus)))
        return int(math.ceil(peak / 1024 / 1024))
    return int(math.ceil(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def lr_change_ratio(cur_lr, new_lr):
    """Detectron's `_get_lr_change_ratio`: the larger of new / cur and cur / new, each divisor at least 1e-10."""
    eps = 1e-10
    return max(new_lr / max(cur_lr, eps), cur_lr / max(new_lr, eps))


class LearningRateLog:
    """Detectron's `UpdateWorkspaceLr` log line, 'Changing learning rate a -> b at iter i', for the LR changes
    larger than SOLVER.LOG_LR_CHANGE_THRESHOLD (a ratio). Like Detectron's float32 `lr` blob it starts at 0
    in every run, so a run's first iteration is logged."""

    def __init__(self, threshold):
        self.threshold = threshold
        self.lr = 0.0

    def update(self, cur_iter, new_lr):
        """The log line for iteration `cur_iter` at `new_lr`, or None; remembers `new_lr` as float32."""
        message = None
        if new_lr != self.lr and lr_change_ratio(self.lr, new_lr) > self.threshold:
            message = f"Changing learning rate {self.lr:.6f} -> {new_lr:.6f} at iter {cur_iter:d}"
        self.lr = float(np.float32(new_lr))
        return message


class TrainingStats:
    """Tracks losses, LR and time of each iteration and logs a record every `log_period` iterations.

    Loop protocol (per iteration `cur_iter`): `iter_tic()`, run the step, `iter_toc()`,
    `update(losses, metrics)`, `log_iteration(cur_iter, lr)`; `close()` at the end.

    Args:
        max_iter: SOLVER.MAX_ITER (for eta and the last record).
        output_dir: where metrics.json and tensorboard/ go (None: stdout only).
        images_per_iter: the global batch size, for images_per_sec.
        start_iter: the first iteration of this run (after a resume).
        is_chief: only the chief writes files and prints.
        progress: a tqdm bar (True/False); None shows it when stdout is a terminal.
    """

    def __init__(self, max_iter, output_dir, images_per_iter, start_iter=0, log_period=LOG_PERIOD,
                 window_size=WINDOW_SIZE, is_chief=True, progress=None):
        self.max_iter = max_iter
        self.images_per_iter = images_per_iter
        self.start_iter = start_iter
        self.log_period = log_period
        self.window_size = window_size
        self.is_chief = is_chief
        self.timer = IterationTimer()
        self.smoothed = {}
        self.smoothed_total_loss = SmoothedValue(window_size)
        self.metrics_file = None
        self.writer = None
        if is_chief and output_dir:
            os.makedirs(output_dir, exist_ok=True)
            self.metrics_file = open(os.path.join(output_dir, "metrics.json"), "a", encoding="utf-8")
            self.writer = tf.summary.create_file_writer(os.path.join(output_dir, "tensorboard"))
        self.show_bar = is_chief and (sys.stdout.isatty() if progress is None else progress)
        self.bar = None  # started after the first iteration, whose tracing would skew its rate

    def iter_tic(self):
        self.timer.tic()

    def iter_toc(self):
        self.timer.toc()

    def update(self, losses, metrics=None):
        """Add one iteration's loss terms and metrics ({name: number}); the loss is the sum of the terms."""
        for name, value in losses.items():
            self._series(name).add(float(value))
        for name, value in (metrics or {}).items():
            self._series(name).add(float(value))
        self.smoothed_total_loss.add(float(sum(float(v) for v in losses.values())))

    def stats(self, cur_iter, lr):
        """The record Detectron logs at `cur_iter` (a dict of numbers and the eta string)."""
        steady = self.timer.calls > 0
        average_time = self.timer.average if steady else (self.timer.first or 0.0)
        record = {
            "iter": int(cur_iter),
            "lr": float(lr),
            "time": average_time,
            "eta": str(datetime.timedelta(seconds=int(average_time * (self.max_iter - cur_iter)))) if steady else "unknown",
            "loss": self.smoothed_total_loss.median(),
            "images_per_sec": self.images_per_iter / average_time if average_time else 0.0,
            "mem": peak_memory_mb(),
        }
        record.update({name: series.median() for name, series in self.smoothed.items()})
        return record

    def log_iteration(self, cur_iter, lr):
        """Advance the bar; every log_period iterations (and the last) write the record; returns it or None."""
        if self.bar is not None:
            self.bar.update(1)
        elif self.show_bar:
            self.bar = tqdm(total=self.max_iter, initial=cur_iter + 1, dynamic_ncols=True)
        record = None
        if self.is_chief and (cur_iter % self.log_period == 0 or cur_iter == self.max_iter - 1):
            record = self.stats(cur_iter, lr)
            self._write(record)
        if cur_iter == self.start_iter + self.log_period:
            self.timer.reset()
        return record

    def close(self):
        if self.bar is not None:
            self.bar.close()
        if self.metrics_file is not None:
            self.metrics_file.close()
        if self.writer is not None:
            self.writer.close()

    def _series(self, name):
        if name not in self.smoothed:
            self.smoothed[name] = SmoothedValue(self.window_size)
        return self.smoothed[name]

    def _write(self, record):
        line = json_stats_line(record)
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.6g}")
            self.bar.write(line)
        else:
            print(line, flush=True)
        if self.metrics_file is not None:
            self.metrics_file.write(json.dumps(record, sort_keys=True) + "\n")
            self.metrics_file.flush()
        if self.writer is not None:
            with self.writer.as_default(step=record["iter"]):
                for name in ("loss", "lr", "time", "images_per_sec", *sorted(self.smoothed)):
                    tf.summary.write(name, tf.constant(record[name], tf.float32), metadata=_SCALAR_METADATA)
            self.writer.flush()
