"""Weights by Detectron URL and maskrcnn-benchmark catalog name (tfdet.weights.download), against a loopback mirror.

Detectron's `utils/io.py::cache_url` is the reference: the file is cached at its URL's path below the base, its
md5 must equal the text of `URL.md5sum`, and a cached file is checked again at every use (one request: the
md5sum). Beyond it: nothing half-written or unchecked stays in the cache (wrong md5, a connection closed early,
Ctrl-C), a cached file is checked offline against the md5sum stored with it, and no network is one line naming
the URL and where to put the file by hand. Every command line's weights argument goes through it.
"""

import hashlib
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from support.http_mirror import DetectronMirror, detectron_mirror, unused_loopback_url  # noqa: F401 (fixture)
from support.training_fixtures import TINY_CONFIG, tiny_cfg
from tfdet.weights.download import DownloadError, catalog_url, resolve_weights

R50 = "ImageNetPretrained/MSRA/R-50.pkl"
SHAPES_VAL = ["--annotations", "{tmp}/shapes/val.json", "--images", "{tmp}/shapes/val"]
PAYLOAD = bytes(range(256)) * 4000  # 1 MB: several chunks of the mirror's and the downloader's reads


def cache_files(cache):
    """Every file under the cache folder, as paths relative to it (temporary files included)."""
    return sorted(str(path.relative_to(cache)) for path in cache.rglob("*") if path.is_file())


def test_train_weights_url_downloads_once_then_only_rechecks_its_md5(detectron_mirror, tmp_path):
    """TRAIN.WEIGHTS as a Detectron URL: Trainer.initialize downloads it (md5sum, then the file), caches it in
    Detectron's layout with its md5sum, and loads it; a later use (TRAIN.COPY_WEIGHTS) asks for the md5sum only."""
    from porting.detectron_writer import model_to_blobs, write_detectron_pkl
    from tfdet.engine.trainer import Trainer
    from tfdet.engine.weights import copy_initial_weights
    from tfdet.modeling.detectron_names import detectron_inventory

    url = "https://dl.fbaipublicfiles.com/detectron/ImageNetPretrained/tiny/R-tiny.pkl"
    cfg = tiny_cfg("TRAIN.WEIGHTS", url)
    trainer = Trainer(cfg, tmp_path / "unused", roidb=[], progress=False)
    body = {name: shape for name, shape in detectron_inventory(trainer.model).items() if name.startswith("res2_")}
    rng = np.random.default_rng(0)
    blobs = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in body.items()}
    write_detectron_pkl(tmp_path / "R-tiny.pkl", blobs, None)
    detectron_mirror.add("ImageNetPretrained/tiny/R-tiny.pkl", (tmp_path / "R-tiny.pkl").read_bytes())

    trainer.initialize()

    loaded = model_to_blobs(trainer.model, cfg.MRCNN.ROI_MASK_HEAD)
    for name, value in blobs.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)
    assert detectron_mirror.paths() == ["ImageNetPretrained/tiny/R-tiny.pkl.md5sum", "ImageNetPretrained/tiny/R-tiny.pkl"]
    cached = detectron_mirror.cache / "detectron" / "ImageNetPretrained" / "tiny" / "R-tiny.pkl"
    assert cache_files(detectron_mirror.cache) == [
        "detectron/ImageNetPretrained/tiny/R-tiny.pkl", "detectron/ImageNetPretrained/tiny/R-tiny.pkl.md5sum"
    ]  # fmt: skip
    assert cached.read_bytes() == (tmp_path / "R-tiny.pkl").read_bytes()

    copy = copy_initial_weights(tiny_cfg("TRAIN.WEIGHTS", cfg.TRAIN.WEIGHTS, "TRAIN.COPY_WEIGHTS", "True"), tmp_path / "out")
    assert copy == str(tmp_path / "out" / "R-tiny.pkl")
    assert detectron_mirror.paths()[2:] == ["ImageNetPretrained/tiny/R-tiny.pkl.md5sum"]  # re-checked, not fetched


def test_a_cached_file_is_checked_offline_against_its_stored_md5sum(detectron_mirror, monkeypatch, capsys):
    detectron_mirror.add(R50, PAYLOAD)
    url = f"https://dl.fbaipublicfiles.com/detectron/{R50}"
    path = resolve_weights(url)
    capsys.readouterr()
    offline = unused_loopback_url()
    monkeypatch.setenv("TFDET_DETECTRON_URL", offline)  # now nothing answers
    assert resolve_weights(url) == path
    note = capsys.readouterr().err.strip()
    assert note == (
        f"note: {offline}/{R50}.md5sum is unreachable (Connection refused); checked {path} against {path}.md5sum"
    )
    os.remove(path + ".md5sum")
    with pytest.raises(DownloadError) as refused:
        resolve_weights(url)
    assert str(refused.value) == (
        f"cannot check the cached {path}: {offline}/{R50}.md5sum is unreachable (Connection refused); put its text "
        f"at {path}.md5sum to check the file offline"
    )
    assert os.path.isfile(path)  # unchecked, not wrong: kept


CAPTIVE_PORTAL = b"<!DOCTYPE html>\n<html><head><title>Sign in to Airport Wi-Fi</title></head><body></body></html>\n"


@pytest.mark.parametrize(
    "status, body, answered",
    [
        (503, b"", "HTTP 503 Service Unavailable"),
        (403, b"<html>blocked by policy</html>", "HTTP 403 Forbidden"),
        (407, b"", "HTTP 407 Proxy Authentication Required"),
        (200, CAPTIVE_PORTAL, "HTTP 200 with no md5 hash in its text ('<!DOCTYPE html>\\n<html><head><title>Sign ')"),
    ],
    ids=["503", "proxy-403", "proxy-407", "captive-portal-html"],
)
def test_an_md5sum_without_an_md5_falls_back_to_the_stored_one(detectron_mirror, capsys, status, body, answered):
    """A cached, verified file stays usable when URL.md5sum answers an HTTP error or a page without an md5: checked
    against the stored md5sum, in one note line naming the failure; a wrong file is still refused against it.
    Nothing cached: one line saying what to fetch and where to put it."""
    url = detectron_mirror.add(R50, PAYLOAD)
    path = resolve_weights(url)
    capsys.readouterr()
    detectron_mirror.answer(f"{R50}.md5sum", status, body)
    assert resolve_weights(url) == path
    assert capsys.readouterr().err == f"note: {url}.md5sum answered {answered}; checked {path} against {path}.md5sum\n"

    with open(path, "r+b") as file:  # the stored md5 still decides: one byte changed is refused
        file.write(b"X")
    with pytest.raises(DownloadError) as refused:
        resolve_weights(url)
    actual = hashlib.md5(b"X" + PAYLOAD[1:]).hexdigest()
    expected = hashlib.md5(PAYLOAD).hexdigest()
    assert str(refused.value) == (
        f"the cached {path} has md5 {actual}, not {expected} ({path}.md5sum): removed it from the cache; run again to "
        "download it anew"
    )
    assert cache_files(detectron_mirror.cache) == []

    with pytest.raises(DownloadError) as refused:  # nothing cached now
        resolve_weights(url)
    assert str(refused.value) == (
        f"cannot download {url} ({url}.md5sum answered {answered}); put the file at {path} and the text of "
        f"{url}.md5sum at {path}.md5sum"
    )
    assert cache_files(detectron_mirror.cache) == []


def test_a_cached_file_without_its_stored_md5sum_is_not_used_when_the_md5sum_answers_an_error(detectron_mirror):
    url = detectron_mirror.add(R50, PAYLOAD)
    path = resolve_weights(url)
    os.remove(path + ".md5sum")
    detectron_mirror.answer(f"{R50}.md5sum", 503)
    with pytest.raises(DownloadError) as refused:
        resolve_weights(url)
    assert str(refused.value) == (
        f"cannot check the cached {path}: {url}.md5sum answered HTTP 503 Service Unavailable; put its text at "
        f"{path}.md5sum to check the file offline"
    )
    assert os.path.isfile(path)  # unchecked, not wrong: kept


def test_an_http_error_on_the_file_itself_says_what_to_fetch_and_where(detectron_mirror):
    url = detectron_mirror.add(R50, PAYLOAD)
    detectron_mirror.answer(R50, 403, b"<html>forbidden</html>")
    with pytest.raises(DownloadError) as refused:
        resolve_weights(url)
    path = detectron_mirror.cache / "detectron" / R50
    assert str(refused.value) == (
        f"cannot download {url} ({url} answered HTTP 403 Forbidden); put the file at {path} and the text of "
        f"{url}.md5sum at {path}.md5sum"
    )
    assert [name for name in cache_files(detectron_mirror.cache) if not name.endswith(".md5sum")] == []


def test_a_wrong_md5_is_refused_and_nothing_is_cached(detectron_mirror):
    url = detectron_mirror.add(R50, PAYLOAD, md5="0123456789abcdef0123456789abcdef")
    with pytest.raises(DownloadError) as refused:
        resolve_weights(url)
    actual = hashlib.md5(PAYLOAD).hexdigest()
    assert str(refused.value) == (
        f"{url}: the downloaded file has md5 {actual}, not 0123456789abcdef0123456789abcdef ({url}.md5sum); "
        "nothing was cached"
    )
    assert cache_files(detectron_mirror.cache) == []


def test_a_cached_file_whose_md5_no_longer_matches_is_removed(detectron_mirror):
    url = detectron_mirror.add(R50, PAYLOAD)
    path = resolve_weights(url)
    with open(path, "r+b") as file:  # one byte changed on disk
        file.write(b"X")
    with pytest.raises(DownloadError, match=r"the cached .* has md5 .* removed it from the cache; run again"):
        resolve_weights(url)
    assert cache_files(detectron_mirror.cache) == []
    assert resolve_weights(url) == path and open(path, "rb").read() == PAYLOAD  # downloaded anew


def test_a_connection_closed_mid_body_leaves_nothing(detectron_mirror):
    url = detectron_mirror.add(R50, PAYLOAD)
    detectron_mirror.cut_short(R50)
    with pytest.raises(DownloadError) as refused:
        resolve_weights(url)
    assert str(refused.value) == (
        f"{url}: the connection closed after {len(PAYLOAD) // 2} of {len(PAYLOAD)} bytes; nothing was cached, run again"
    )
    assert cache_files(detectron_mirror.cache) == []


def test_ctrl_c_mid_download_leaves_nothing(tmp_path):
    """A download interrupted by SIGINT (Ctrl-C) in another process: no file, partial or whole, stays."""
    with DetectronMirror(tmp_path / "mirror", max_requests=2) as mirror:
        url = mirror.add(R50, PAYLOAD)
        mirror.stall(R50)
        cache = tmp_path / "cache"
        env = {**os.environ, "TFDET_CACHE": str(cache), "TFDET_DETECTRON_URL": mirror.url}
        # A terminal's process takes Ctrl-C with Python's default handler; a test worker may have left SIGINT ignored.
        code = (
            "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            f"from tfdet.weights.download import resolve_weights; resolve_weights({url!r})"
        )
        child = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not (cache.exists() and any(name.endswith(".part") for name in cache_files(cache))):
                assert time.monotonic() < deadline and child.poll() is None, "the download never started"
                time.sleep(0.05)
            child.send_signal(signal.SIGINT)
            _, stderr = child.communicate(timeout=30)
        finally:
            child.kill()
        assert "KeyboardInterrupt" in stderr
        assert cache_files(cache) == []


def test_no_network_is_one_line_naming_the_url_and_where_to_put_the_file(tmp_path, monkeypatch, capsys):
    from porting.__main__ import main as porting_main

    offline = unused_loopback_url()
    monkeypatch.setenv("TFDET_DETECTRON_URL", offline)
    monkeypatch.setenv("TFDET_CACHE", str(tmp_path / "cache"))
    assert porting_main(["detectron", "--weights", f"https://dl.fbaipublicfiles.com/detectron/{R50}", "--out", "x"]) == 1
    local = tmp_path / "cache" / "detectron" / "ImageNetPretrained" / "MSRA" / "R-50.pkl"
    assert capsys.readouterr().err == (
        f"error: cannot download {offline}/{R50} (Connection refused); without network, put the file at {local} "
        f"and the text of {offline}/{R50}.md5sum at {local}.md5sum\n"
    )
    assert not (tmp_path / "cache").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["tfdet.infer", "--cfg", str(TINY_CONFIG), "--weights", "{url}", "--input", "{tmp}/shapes/val"],
        ["tfdet.evaluate", "--cfg", str(TINY_CONFIG), "--weights", "{url}", *SHAPES_VAL],
        ["tfdet.evaluate", "--cfg", str(TINY_CONFIG), *SHAPES_VAL, "TEST.WEIGHTS", "{url}"],
        ["savedmodel.export", "--cfg", str(TINY_CONFIG), "--weights", "{url}", "--out", "{tmp}/served/1"],
        ["porting", "maskrcnn-benchmark", "--cfg", str(TINY_CONFIG), "--weights", "{url}", "--out", "{tmp}/p"],
    ],
    ids=["infer", "evaluate", "evaluate-test-weights", "export", "porting-maskrcnn-benchmark"],
)
def test_every_weights_argument_downloads_detectron_urls(command, tmp_path, monkeypatch, capsys):
    """Each command line hands its weights URL to tfdet.weights.download (here no server answers: its one line)."""
    import importlib

    offline = unused_loopback_url()
    monkeypatch.setenv("TFDET_DETECTRON_URL", offline)
    monkeypatch.setenv("TFDET_CACHE", str(tmp_path / "cache"))
    module = importlib.import_module(command[0] if command[0] != "porting" else "porting.__main__")
    argv = [word.format(url=f"https://dl.fbaipublicfiles.com/detectron/{R50}", tmp=tmp_path) for word in command[1:]]
    if command[0] in ("tfdet.evaluate", "tfdet.infer"):  # what they read before the weights: no error of theirs
        from tfdet.data import shapes

        shapes.generate(tmp_path / "shapes", 2, 0, split_name="val")
    status = module.main(argv)
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert status in (1, 2) and error.startswith(f"error: cannot download {offline}/{R50} (Connection refused)")


def test_predictor_weights_download_detectron_urls(tmp_path, monkeypatch):
    """Predictor(cfg, weights=URL) and savedmodel.export load through tfdet.weights.weights_file.load_weights,
    which hands a URL to tfdet.weights.download before it touches the model (here nothing answers: the one-line
    DownloadError)."""
    from tfdet.weights.weights_file import load_weights

    offline = unused_loopback_url()
    monkeypatch.setenv("TFDET_DETECTRON_URL", offline)
    monkeypatch.setenv("TFDET_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DownloadError, match=f"^cannot download {offline}/{R50} \\(Connection refused\\)"):
        load_weights(None, tiny_cfg(), "catalog://ImageNetPretrained/MSRA/R-50")


def test_catalog_names_resolve_as_maskrcnn_benchmark_paths_catalog(detectron_mirror):
    """maskrcnn-benchmark's config/paths_catalog.py ModelCatalog.get, written out by hand for three names."""
    base = "https://dl.fbaipublicfiles.com/detectron"
    assert catalog_url("catalog://ImageNetPretrained/MSRA/R-50") == f"{base}/ImageNetPretrained/MSRA/R-50.pkl"
    assert catalog_url("catalog://ImageNetPretrained/MSRA/R-101-GN") == f"{base}/ImageNetPretrained/47592356/R-101-GN.pkl"
    assert catalog_url("catalog://Caffe2Detectron/COCO/37697547/e2e_keypoint_rcnn_R-50-FPN_1x") == (
        f"{base}/37697547/12_2017_baselines/e2e_keypoint_rcnn_R-50-FPN_1x.yaml.08_42_54.kdzV35ao/output/train/"
        "keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl"
    )
    with pytest.raises(DownloadError, match=r"^catalog://ImageNetPretrained/MSRA/R-52: not in maskrcnn-benchmark's"):
        resolve_weights("catalog://ImageNetPretrained/MSRA/R-52")
    detectron_mirror.add(R50, PAYLOAD)
    path = resolve_weights("catalog://ImageNetPretrained/MSRA/R-50")
    assert path == str(detectron_mirror.cache / "detectron" / "ImageNetPretrained" / "MSRA" / "R-50.pkl")
    assert open(path, "rb").read() == PAYLOAD


def test_detectron_bases_old_and_new_name_the_same_file_and_other_urls_are_refused(detectron_mirror):
    detectron_mirror.add(R50, PAYLOAD)
    paths = {resolve_weights(f"{base}/{R50}") for base in (
        "https://dl.fbaipublicfiles.com/detectron", "https://s3-us-west-2.amazonaws.com/detectron", detectron_mirror.url,
    )}  # fmt: skip
    assert len(paths) == 1
    assert detectron_mirror.paths() == [f"{R50}.md5sum", R50, f"{R50}.md5sum", f"{R50}.md5sum"]
    for url, message in [
        ("https://example.com/R-50.pkl", "only Detectron's files"),
        ("https://dl.fbaipublicfiles.com/detectron/../etc/passwd", "not a file path below"),
        ("s3://bucket/R-50.pkl", r"only http\(s\) URLs of Detectron's files and catalog:// names"),
    ]:
        with pytest.raises(DownloadError, match=message):
            resolve_weights(url)
    assert resolve_weights("weights/R-50.pkl") == "weights/R-50.pkl"  # a local path, unchanged


def test_download_cache_key_moves_the_cache(detectron_mirror, tmp_path):
    """DOWNLOAD_CACHE, as Detectron's core/config.py cache_cfg_urls: a config's URLs are cached below it; its
    default, Detectron's /tmp/detectron-download-cache, means tfdet's cache ($TFDET_CACHE/detectron)."""
    from tfdet.engine.weights import copy_initial_weights

    url = detectron_mirror.add(R50, PAYLOAD)
    moved = tiny_cfg("TRAIN.WEIGHTS", url, "TRAIN.COPY_WEIGHTS", "True", "DOWNLOAD_CACHE", str(tmp_path / "dc"))
    copy_initial_weights(moved, tmp_path / "out1")
    assert cache_files(tmp_path / "dc") == [R50, f"{R50}.md5sum"]
    assert not detectron_mirror.cache.exists()
    default = tiny_cfg("TRAIN.WEIGHTS", url, "TRAIN.COPY_WEIGHTS", "True")
    assert default.DOWNLOAD_CACHE == "/tmp/detectron-download-cache"
    copy_initial_weights(default, tmp_path / "out2")
    assert cache_files(detectron_mirror.cache) == [f"detectron/{R50}", f"detectron/{R50}.md5sum"]
