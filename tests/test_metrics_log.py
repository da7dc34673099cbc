"""Training statistics as Detectron logs them: window medians, json_stats lines, metrics.json, TensorBoard."""

import json
import time

import tensorflow as tf

from tfdet.engine.metrics_log import SmoothedValue, TrainingStats, json_stats_line

MAX_ITER = 45


def run_loop(output_dir, **kwargs):
    """45 iterations with loss terms loss_a = it, loss_b = 1 and a metric (not summed into the loss)."""
    stats = TrainingStats(MAX_ITER, output_dir, images_per_iter=4, progress=False, **kwargs)
    records, timer_calls = [], {}
    for it in range(MAX_ITER):
        stats.iter_tic()
        stats.iter_toc()
        stats.update({"loss_a": it, "loss_b": 1.0}, metrics={"accuracy_cls": 0.5})
        record = stats.log_iteration(it, lr=0.01)
        if record is not None:
            records.append(record)
        timer_calls[it] = stats.timer.calls
    stats.close()
    return records, timer_calls


def test_window_median():
    series = SmoothedValue(window_size=20)
    for value in range(1, 26):
        series.add(value)
    assert series.median() == 15.5  # median of 6..25


def test_records_every_log_period_and_at_the_last_iteration(tmp_path, capsys):
    records, timer_calls = run_loop(tmp_path)
    assert [r["iter"] for r in records] == [0, 20, 40, 44]
    at_20 = records[1]
    assert at_20["loss_a"] == 10.5          # median of 1..20
    assert at_20["loss"] == 11.5            # median of (it + 1) over the same window: metrics are not summed
    assert at_20["accuracy_cls"] == 0.5 and at_20["lr"] == 0.01
    assert at_20["images_per_sec"] > 0 and at_20["mem"] > 0 and at_20["time"] > 0
    assert at_20["eta"].count(":") == 2     # H:MM:SS
    # the run's first iteration never enters the mean; the timer restarts after the first 20 iterations
    # (Detectron drops the warm-up outliers)
    assert timer_calls[0] == 0 and timer_calls[19] == 19 and timer_calls[20] == 0 and timer_calls[40] == 20

    lines = [json.loads(line) for line in (tmp_path / "metrics.json").read_text().splitlines()]
    assert [line["iter"] for line in lines] == [0, 20, 40, 44] and lines[1]["loss"] == 11.5

    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("json_stats: ")]
    assert len(printed) == 4
    shown = json.loads(printed[1][len("json_stats: "):])
    assert list(shown) == sorted(shown)
    assert shown["lr"] == "0.010000" and shown["loss"] == "11.500000" and shown["iter"] == 20


def test_a_slow_first_iteration_gives_no_eta_and_stays_out_of_later_ones(tmp_path):
    """The first iteration traces the training step: its time must not make the ETA hours long."""
    stats = TrainingStats(1000, None, images_per_iter=2, progress=False)
    records = []
    for it in range(21):
        stats.iter_tic()
        if it == 0:
            time.sleep(0.3)
        stats.iter_toc()
        stats.update({"loss_a": 1.0})
        records.append(stats.log_iteration(it, lr=0.01))
    stats.close()
    first, at_20 = records[0], records[20]
    assert first["eta"] == "unknown" and first["time"] >= 0.3
    assert at_20["time"] < 0.01 and at_20["eta"] == "0:00:00"  # with the first in the mean: 0.015 s * 980 = 0:00:14


def test_tensorboard_scalars(tmp_path):
    run_loop(tmp_path)
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    tags, losses = {}, {}
    for event in tf.compat.v1.train.summary_iterator(str(events[0])):
        for value in event.summary.value:
            tags.setdefault(value.tag, []).append(event.step)
            assert value.metadata.plugin_data.plugin_name == "scalars"  # what TensorBoard plots as a scalar
            if value.tag == "loss":
                losses[event.step] = float(tf.make_ndarray(value.tensor))
    assert tags["loss"] == [0, 20, 40, 44] and losses[20] == 11.5
    assert {"lr", "time", "images_per_sec", "loss_a", "loss_b", "accuracy_cls"} <= set(tags)


def test_non_chief_writes_and_prints_nothing(tmp_path, capsys):
    records, _ = run_loop(tmp_path / "out", is_chief=False)
    assert records == [] and not (tmp_path / "out").exists()
    assert "json_stats" not in capsys.readouterr().out


def test_json_stats_line_is_detectrons_format():
    line = json_stats_line({"iter": 3, "lr": 0.02, "eta": "0:01:02", "loss": 1.25})
    assert line == 'json_stats: {"eta": "0:01:02", "iter": 3, "loss": "1.250000", "lr": "0.020000"}'


def test_progress_bar_keeps_the_records_on_stdout(tmp_path, capsys):
    stats = TrainingStats(3, tmp_path, images_per_iter=2, progress=True)
    for it in range(3):
        stats.iter_tic()
        stats.iter_toc()
        stats.update({"loss_a": 1.0})
        stats.log_iteration(it, lr=0.1)
    stats.close()
    captured = capsys.readouterr()
    assert [line.split()[0] for line in captured.out.splitlines() if line.strip()] == ["json_stats:"] * 2
    assert "3/3" in captured.err
