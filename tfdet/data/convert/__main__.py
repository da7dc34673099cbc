"""python -m tfdet.data.convert: the DA fork's datasets as COCO json, where tfdet's catalog looks for them.

    python -m tfdet.data.convert cityscapes --gtfine gtFine [--images leftImg8bit] [--data-root DIR]
    python -m tfdet.data.convert foggy-cityscapes --gtfine gtFine [--images leftImg8bit_foggy] [--data-root DIR]
    python -m tfdet.data.convert sim10k --sim10k DIR [--data-root DIR]
    python -m tfdet.data.convert kitti --kitti DIR [--data-root DIR]

cityscapes writes `cityscapes/annotations/instancesonly_filtered_gtFine_{val,train,test}.json` (8 classes)
and `caronly_filtered_gtFine_{val,train}.json` (car); foggy-cityscapes
`foggy_cityscapes/annotations/foggy_instancesonly_filtered_gtFine_{val,train}.json` (its catalog has no test); sim10k
`sim10k/car_instances.json`; kitti `kitti/annotations/caronly_training.json`; all under the data root
($TFDET_DATA_DIR unless --data-root). `--gtfine` is the folder holding gtFine's val/train/test folders;
with `--images` (the leftImg8bit or leftImg8bit_foggy folder) every image is linked into the dataset's one
image folder, as the fork's catalog expects; sim10k and kitti link their image folder. Exit status 2 and one
error line naming the file when an input is malformed; nothing is written then.
"""

import argparse
import pathlib
import sys

from tfdet.data import catalog
from tfdet.data.convert import cityscapes, kitti, sim10k
from tfdet.data.convert.output import ConversionError, write_outputs
from tfdet.data.data_root import DATA_DIR_ENV


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tfdet.data.convert", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, images in (("cityscapes", "leftImg8bit"), ("foggy-cityscapes", "leftImg8bit_foggy")):
        command = commands.add_parser(name, help=f"Cityscapes gtFine annotations with the {images} images")
        command.add_argument("--gtfine", required=True, help="the gtFine folder (holding val, train, test)")
        command.add_argument("--images", help=f"the {images} folder: link its images into the catalog's folder")
    commands.add_parser("sim10k", help="Sim10k's VOC layout").add_argument(
        "--sim10k", required=True, help="the folder holding Annotations and JPEGImages"
    )
    commands.add_parser("kitti", help="KITTI object detection's training split").add_argument(
        "--kitti", required=True, help="the folder holding training/image_2 and training/label_2"
    )
    for command in commands.choices.values():
        command.add_argument("--data-root", help=f"where the datasets go (default: ${DATA_DIR_ENV})")
    return parser.parse_args(argv)


def _cityscapes(args, foggy):
    """{json path: dataset} and {link: image} of the cityscapes or foggy-cityscapes command."""
    images, skipped = cityscapes.read_gtfine(args.gtfine)
    if skipped:
        print(f"skipped {skipped} objects without a usable contour, as the converter does", file=sys.stderr)
    train_val = {split: images[split] for split in ("val", "train") if split in images}
    if foggy:  # the fork's catalog has no foggy test split
        variants = [("foggy_cityscapes_fine_instanceonly_seg_{}_cocostyle", cityscapes.CLASSES, train_val)]
    else:
        variants = [("cityscapes_fine_instanceonly_seg_{}_cocostyle", cityscapes.CLASSES, images),
                    ("cityscapes_car_{}_cocostyle", cityscapes.CAR_CLASSES, train_val)]  # fmt: skip
    image_name = cityscapes.FOGGY_IMAGE if foggy else cityscapes.CITYSCAPES_IMAGE
    jsons, links = {}, {}
    for pattern, classes, split_images in variants:
        for split, dataset in cityscapes.coco_datasets(split_images, classes, image_name).items():
            spec = catalog.dataset_paths(pattern.format(split), args.data_root)
            jsons[spec.annotation_file] = dataset
            if args.images:
                links.update(cityscapes.image_links({split: dataset}, args.images, spec.image_dir))
    return jsons, links


def _single(name, dataset, source_images, root):
    """{json path: dataset} and {the catalog's image folder: `source_images`} of a one-file dataset."""
    spec = catalog.dataset_paths(name, root)
    return {spec.annotation_file: dataset}, {spec.image_dir: pathlib.Path(source_images)}


def _linked_folder(link):
    """The catalog image folder a link makes (a linked folder) or lies in (a linked image)."""
    return link if link.suffix.lower() not in (".png", ".jpg", ".jpeg") else link.parent


def main(argv=None):
    args = _parse(argv)
    try:
        if args.command in ("cityscapes", "foggy-cityscapes"):
            jsons, links = _cityscapes(args, foggy=args.command == "foggy-cityscapes")
        elif args.command == "sim10k":
            images = pathlib.Path(args.sim10k) / "JPEGImages"
            jsons, links = _single("sim10k_cocostyle", sim10k.convert_sim10k(args.sim10k), images, args.data_root)
        else:
            training = pathlib.Path(args.kitti) / "training"
            dataset = kitti.convert_kitti(training)
            jsons, links = _single("kitti_cocostyle", dataset, training / "image_2", args.data_root)
        write_outputs(jsons, links)
    except ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path, dataset in jsons.items():
        print(f"wrote {path}: {len(dataset['images'])} images, {len(dataset['annotations'])} annotations")
    if links:
        print(f"{len(links)} image link(s) in place: {', '.join(sorted({str(_linked_folder(l)) for l in links}))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
