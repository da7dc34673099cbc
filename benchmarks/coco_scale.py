"""Loading a COCO train2017-sized json: tfdet's dataset check + training roidb against pycocotools' COCO().

Writes a synthetic json of COCO train2017's size (118,287 images, ~7.3 annotations per image, polygons of a few
dozen coordinates, ~1 % crowd objects as uncompressed RLE, COCO's 80 category ids 1..90 with gaps) and one tiny
real JPEG hard-linked under every file name, then times, each in a fresh process so that its peak memory is its
own, alternating the three in every round:
- pycocotools: `COCO(json)` (what Detectron's JsonDataset starts with);
- tfdet: `load_coco_roidb(json, dir)` as training calls it without masks (json checks, image files' existence
  and signatures, the records);
- tfdet masks: the same with `with_masks=True` (MODEL.MASK_ON): every polygon is rasterised once to COCO RLE
  at its image's size. Detectron does no such work at load time (it keeps the polygons and converts them per
  sampled RoI in every training iteration), so this column is tfdet's load plus work Detectron spreads over
  training; the difference to the masks-off column is that cost.
Times are the load call alone (imports excluded); memory is the child's peak RSS (VmHWM), imports included,
with its peak after the imports in brackets.

    python benchmarks/coco_scale.py [--images 118287] [--rounds 3] [--data-dir DIR] [--profile]

--data-dir keeps the written dataset (written once, reused when it exists); --profile prints where tfdet's
masks-off load spends its time (cProfile, top entries by cumulative and by own time) instead of timing.
"""

import argparse
import cProfile
import json
import os
import pathlib
import pstats
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

COCO_IMAGES = 118_287
ANNOTATIONS_PER_IMAGE = 7.27  # 860,001 / 118,287
CROWD_FRACTION = 0.011  # ~9.4k crowd objects in train2017
# COCO's 80 category ids: 1..90 less 10 unused.
CATEGORY_IDS = [i for i in range(1, 91) if i not in {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}]
SIDES = [(480, 640), (640, 480), (427, 640), (640, 427), (375, 500), (612, 612)]
KINDS = ("pycocotools", "tfdet", "tfdet masks")
LINKS_PER_FILE = 50_000


def write_dataset(folder, num_images, seed=0):
    """annotations.json and images/ (an 8x8 JPEG hard-linked to every name) in `folder`; returns the json path."""
    import cv2

    folder = pathlib.Path(folder)
    image_dir = folder / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    tiny = cv2.imencode(".jpg", np.full((8, 8, 3), 128, np.uint8))[1].tobytes()
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    for image_id in range(1, num_images + 1):
        height, width = SIDES[image_id % len(SIDES)]
        image = {"id": image_id, "file_name": f"{image_id:012d}.jpg", "height": height, "width": width}
        images.append(image)
        if image_id % LINKS_PER_FILE == 1:  # a file system allows ~65k links to one file
            source = folder / f"tiny_{image_id // LINKS_PER_FILE}.jpg"
            source.write_bytes(tiny)
        os.link(source, image_dir / image["file_name"])
        for _ in range(rng.poisson(ANNOTATIONS_PER_IMAGE)):
            annotations.append(_annotation(rng, len(annotations) + 1, image))
    categories = [{"id": i, "name": f"category {i}", "supercategory": "thing"} for i in CATEGORY_IDS]
    path = folder / "annotations.json"
    dataset = {"images": images, "annotations": annotations, "categories": categories}
    with open(path, "w") as stream:
        json.dump(dataset, stream, separators=(",", ":"))  # compact, as COCO's own jsons
    return path


def _annotation(rng, ann_id, image):
    """A COCO-like object: an ellipse polygon (or two) of 6..40 points, or ~1 % of the time a crowd RLE."""
    height, width = image["height"], image["width"]
    w, h = rng.uniform(4, width / 2), rng.uniform(4, height / 2)
    x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
    annotation = {"id": ann_id, "image_id": image["id"], "category_id": int(rng.choice(CATEGORY_IDS)),
                  "bbox": [round(x, 2), round(y, 2), round(w, 2), round(h, 2)], "area": float(w * h * 0.7),
                  "iscrowd": 0}  # fmt: skip
    if rng.random() < CROWD_FRACTION:
        annotation["iscrowd"] = 1
        annotation["segmentation"] = {"counts": _box_rle_counts(x, y, w, h, height, width), "size": [height, width]}
    else:
        parts = 1 + (rng.random() < 0.1)
        annotation["segmentation"] = [_ellipse(rng, x, y, w / parts, h) for _ in range(parts)]
    return annotation


def _ellipse(rng, x, y, w, h):
    angles = np.sort(rng.uniform(0, 2 * np.pi, rng.integers(6, 41)))
    xs, ys = x + w / 2 * (1 + np.cos(angles)), y + h / 2 * (1 + np.sin(angles))
    return np.round(np.stack([xs, ys], 1).ravel(), 2).tolist()


def _box_rle_counts(x, y, w, h, height, width):
    """Uncompressed (column-major) RLE counts of the box's pixels, as COCO's crowd annotations store them."""
    mask = np.zeros((height, width), bool)
    mask[int(y) : int(y + h), int(x) : int(x + w)] = True
    flat = mask.ravel(order="F")
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    return np.diff(np.concatenate([[0], changes, [flat.size]])).tolist()  # starts with the zeros' run


def describe(json_path):
    """Print the dataset's size: images, annotations, polygons and their mean length, crowd objects, MB."""
    data = json.loads(json_path.read_text())
    polygons = [p for a in data["annotations"] if isinstance(a["segmentation"], list) for p in a["segmentation"]]
    crowd = sum(a["iscrowd"] for a in data["annotations"])
    print(f"{len(data['images'])} images, {len(data['annotations'])} annotations, {len(polygons)} polygons of "
          f"{np.mean([len(p) for p in polygons]):.1f} coordinates on average, {crowd} crowd; "
          f"{json_path.stat().st_size / 1e6:.0f} MB")  # fmt: skip


def load(kind, json_path, image_dir):
    """Run one load of `kind` and return what it built (kept alive until the caller measures memory)."""
    if kind == "pycocotools":
        import contextlib
        import io

        from pycocotools.coco import COCO

        with contextlib.redirect_stdout(io.StringIO()):
            return COCO(str(json_path))
    from tfdet.data.roidb import load_coco_roidb

    return load_coco_roidb(json_path, image_dir, with_masks=kind == "tfdet masks")


def child(kind, json_path, image_dir):
    """Time one load in this (fresh) process and print {seconds, peak_mb, imports_mb} as json."""
    if kind != "pycocotools":
        import tfdet.data.roidb  # noqa: F401  imports are not the load's time
    from pycocotools.coco import COCO  # noqa: F401

    imports_mb = peak_rss_mb()
    start = time.perf_counter()
    result = load(kind, json_path, image_dir)
    seconds = time.perf_counter() - start
    peak_mb = peak_rss_mb()
    del result
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "imports_mb": imports_mb}))


def peak_rss_mb():
    """This process's peak RSS in MB: VmHWM, its own even after exec. (Linux's ru_maxrss keeps the parent's peak
    across fork + exec, and the parent has held the whole dataset.)"""
    status = pathlib.Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def run_child(kind, json_path, image_dir):
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--json", str(json_path), "--image-dir", str(image_dir)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def profile(json_path, image_dir, top):
    """Print cProfile's top entries of tfdet's masks-off load."""
    import tfdet.data.roidb  # noqa: F401

    profiler = cProfile.Profile()
    profiler.runcall(load, "tfdet", json_path, image_dir)
    stats = pstats.Stats(profiler).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def compare(json_path, image_dir, rounds):
    """Alternate the three loads for `rounds` rounds; print each run, then medians, mins, peaks and ratios."""
    results = {kind: [] for kind in KINDS}
    for round_index in range(rounds):
        for kind in KINDS:
            result = run_child(kind, json_path, image_dir)
            results[kind].append(result)
            print(f"round {round_index + 1} {kind:12s} {result['seconds']:6.2f} s  peak {result['peak_mb']:6.0f} MB")
    header = ("median s", "min s", "peak MB", "(imports)", "time ratio", "mem ratio")
    print(f"\n{'':12s} " + " ".join(f"{h:>10s}" for h in header))
    base = results["pycocotools"]
    base_time = statistics.median(r["seconds"] for r in base)
    base_peak = max(r["peak_mb"] for r in base)
    for kind in KINDS:
        runs = results[kind]
        median = statistics.median(r["seconds"] for r in runs)
        peak = max(r["peak_mb"] for r in runs)
        imports = max(r["imports_mb"] for r in runs)
        fastest = min(r["seconds"] for r in runs)
        print(f"{kind:12s} {median:10.2f} {fastest:10.2f} {peak:10.0f} {imports:10.0f} {median / base_time:10.2f} "
              f"{peak / base_peak:10.2f}")  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=COCO_IMAGES, help="images in the json (COCO train2017: 118287)")
    parser.add_argument("--rounds", type=int, default=3, choices=range(1, 100), metavar="N")
    parser.add_argument("--data-dir", help="keep the dataset here (written when absent, else reused)")
    parser.add_argument("--profile", action="store_true", help="print where tfdet's load spends its time")
    parser.add_argument("--top", type=int, default=25, help="profile entries to print")
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    parser.add_argument("--image-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.json, args.image_dir)
    with tempfile.TemporaryDirectory() as scratch:
        folder = pathlib.Path(args.data_dir or scratch)
        json_path = folder / "annotations.json"
        if not json_path.exists():
            start = time.perf_counter()
            write_dataset(folder, args.images)
            print(f"wrote {json_path} in {time.perf_counter() - start:.0f} s")
        describe(json_path)
        if args.profile:
            profile(json_path, folder / "images", args.top)
        else:
            compare(json_path, folder / "images", args.rounds)


if __name__ == "__main__":
    main()
