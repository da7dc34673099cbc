"""The CPU's float32 convolution ceiling in TensorFlow: GFLOP/s of single large convolutions at the
sizes Mask R-CNN R-50-FPN runs at 800x1216 (FPN/RPN 3x3 on P2, res4 3x3, a 1x1), graph mode.
Whole-model GFLOP/s (bench_inference.py) cannot exceed these figures."""

import time

import tensorflow as tf

CASES = [((200, 304), 256, 256, 3), ((100, 152), 512, 512, 3), ((200, 304), 256, 64, 1)]


def main():
    for (height, width), cin, cout, kernel in CASES:
        x = tf.random.normal([1, height, width, cin])
        w = tf.random.normal([kernel, kernel, cin, cout])
        conv = tf.function(lambda x, w=w: tf.nn.conv2d(x, w, 1, "SAME"))
        conv(x)
        start = time.perf_counter()
        for _ in range(5):
            conv(x).numpy()
        seconds = (time.perf_counter() - start) / 5
        gflop = 2 * height * width * cin * cout * kernel * kernel / 1e9
        print(f"{height}x{width} {cin}->{cout} {kernel}x{kernel}: {seconds * 1e3:.1f} ms, {gflop / seconds:.0f} GFLOP/s")


if __name__ == "__main__":
    main()
