"""Grouped 3x3 convolution (ResNeXt, 32 groups) on this machine: TF's grouped kernel vs one conv
per group vs XLA, at the sizes of X-101 res2..res4 for an 800x1344 input. Prints ms per call."""

import time

import numpy as np
import tensorflow as tf

from tfdet.layers import CaffeConv2D

SIZES = [(200, 336, 256), (100, 168, 512), (50, 84, 1024)]
GROUPS = 32


def time_call(fn, x, repeats=3):
    fn(x)
    start = time.perf_counter()
    for _ in range(repeats):
        fn(x).numpy()
    return (time.perf_counter() - start) / repeats * 1000.0


def main():
    for height, width, channels in SIZES:
        x = tf.random.normal([1, height, width, channels])
        native = CaffeConv2D(channels, 3, padding=1, groups=GROUPS, use_bias=False, split_groups=False)
        split = CaffeConv2D(channels, 3, padding=1, groups=GROUPS, use_bias=False, split_groups=True)
        native(x)
        split(x)
        split.set_weights(native.get_weights())
        variants = {
            "tf-grouped": tf.function(native.__call__),
            "per-group": tf.function(split.__call__),
            "tf-grouped-xla": tf.function(native.__call__, jit_compile=True),
        }
        times = {name: time_call(fn, x) for name, fn in variants.items()}
        error = float(np.abs(variants["per-group"](x).numpy() - variants["tf-grouped"](x).numpy()).max())
        print(
            f"{height}x{width}x{channels} g={GROUPS}: "
            + ", ".join(f"{name} {ms:.1f} ms" for name, ms in times.items())
            + f"  (max |diff| {error:.2e})"
        )


if __name__ == "__main__":
    main()
