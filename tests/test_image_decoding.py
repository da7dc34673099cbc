"""One image decoder: training sees the pixels inference sees, for every format OpenCV reads.

Files are written by Pillow, an encoder independent of OpenCV and TensorFlow: JPEGs with each EXIF
orientation 1-8 (as phones and cameras store photos), grey, 16-bit, alpha, palette and CMYK images, TIFF,
WebP and BMP. The training pipeline's pixels must equal `cv2.imread`'s (read through `cv2.imdecode`) (what `tfdet.infer`, evaluation and
the Predictor read); Pillow's own `exif_transpose` is the independent reference for what the orientations
mean. The SavedModel's graph decoder (`decode_bgr`, TF ops only) must give the same pixels for the formats
TensorFlow decodes, and refuse the others in its error.
"""

import io
import struct

import cv2
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

from tfdet.config import load_config
from tfdet.data import pipeline
from tfdet.data.roidb import ImageRecord, Roidb
from tfdet.data.transforms import decode_bgr
from tfdet.imaging.image_io import UnreadableImage, read_image

ORIENTATION = 0x0112
STORED = (60, 100)  # height, width as stored: orientations 5-8 display it 100 high, 60 wide


def _photo(seed=0, size=STORED):
    """A smooth RGB picture (JPEG keeps it nearly unchanged) with a bright square in one corner, so any turn shows."""
    rgb = cv2.GaussianBlur(np.random.default_rng(seed).integers(0, 200, (*size, 3)).astype(np.uint8), (7, 7), 0)
    rgb[5:20, 5:25] = 255
    return rgb


def _encoded(image, fmt, orientation=None, **options):
    """Bytes of a Pillow `image` saved as `fmt`, with an EXIF Orientation tag when one is given."""
    if orientation is not None:
        exif = Image.Exif()
        exif[ORIENTATION] = orientation
        options["exif"] = exif
    stream = io.BytesIO()
    image.save(stream, fmt, **options)
    return stream.getvalue()


def _sixteen_bit_png(rgb):
    """A 16-bit RGB PNG (cv2 writes 16-bit colour PNGs; Pillow only 16-bit grey)."""
    wide = rgb.astype(np.uint16) * 257 + np.arange(rgb.size, dtype=np.uint16).reshape(rgb.shape) % 200
    return cv2.imencode(".png", np.ascontiguousarray(wide[..., ::-1]))[1].tobytes()


def _files():
    """{name: (bytes, suffix)} of the matrix."""
    rgb = _photo()
    image = Image.fromarray(rgb)
    files = {f"jpeg_orientation_{o}": (_encoded(image, "JPEG", o, quality=95), ".jpg") for o in range(1, 9)}
    files.update(
        jpeg_no_exif=(_encoded(image, "JPEG", quality=90), ".jpg"),
        jpeg_progressive=(_encoded(image, "JPEG", progressive=True), ".jpg"),
        jpeg_grey=(_encoded(Image.fromarray(rgb[..., 0]), "JPEG"), ".jpg"),
        jpeg_cmyk=(_encoded(image.convert("CMYK"), "JPEG", quality=95), ".jpg"),
        png_orientation_6=(_encoded(image, "PNG", 6), ".png"),
        png_grey=(_encoded(Image.fromarray(rgb[..., 1]), "PNG"), ".png"),
        png_16_bit=(_sixteen_bit_png(rgb), ".png"),
        png_16_bit_grey=(_encoded(Image.fromarray(rgb[..., 2].astype(np.uint16) * 257), "PNG"), ".png"),
        png_alpha=(_encoded(Image.fromarray(np.dstack([rgb, rgb[..., 0]]), "RGBA"), "PNG"), ".png"),
        png_palette=(_encoded(image.convert("P"), "PNG"), ".png"),
        tiff=(_encoded(image, "TIFF"), ".tif"),
        tiff_orientation_8=(_encoded(image, "TIFF", 8), ".tiff"),
        webp_lossless_orientation_6=(_encoded(image, "WEBP", 6, lossless=True), ".webp"),
        webp_lossy=(_encoded(image, "WEBP", quality=80), ".webp"),
        bmp=(_encoded(image, "BMP"), ".bmp"),
    )
    return files


FILES = _files()
LOSSLESS = ("png", "tiff", "webp_lossless", "bmp")
TENSORFLOW_FORMATS = (".jpg", ".png", ".webp", ".bmp")  # what tf.io.decode_image reads (not TIFF)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """{name: path} of the matrix written to files."""
    folder = tmp_path_factory.mktemp("decoding")
    paths = {}
    for name, (data, suffix) in FILES.items():
        paths[name] = folder / f"{name}{suffix}"
        paths[name].write_bytes(data)
    return paths


def _cfg():
    """Images as they are: scale 1 (TRAIN.SCALES = the shorter side), no flip, no means, no padding."""
    return load_config(None, {
        "TRAIN.SCALES": (min(STORED),), "TRAIN.MAX_SIZE": 1000, "TRAIN.IMS_PER_BATCH": 1,
        "TRAIN.ASPECT_GROUPING": False, "TRAIN.USE_FLIPPED": False, "PIXEL_MEANS": (((0.0, 0.0, 0.0),),),
        "MODEL.MASK_ON": False, "MODEL.KEYPOINTS_ON": False, "FPN.FPN_ON": False,
    })  # fmt: skip


def _opencv(path):
    """`cv2.imread`'s pixels, read through `cv2.imdecode` (OpenCV 5.1's imread fails on a TIFF with
    Orientation 8, "original_ptr == real_mat.data"; imdecode, which tfdet uses, reads it)."""
    return cv2.imdecode(np.fromfile(str(path), np.uint8), cv2.IMREAD_COLOR)


def _roidb(paths, boxes=None):
    """A roidb of `paths` at the sizes cv2.imread gives, one object each (`boxes`, default a corner box)."""
    records = []
    for image_id, path in enumerate(paths):
        height, width = _opencv(path).shape[:2]
        box = np.array([boxes[image_id] if boxes else (0, 0, 9, 9)], np.float32)
        records.append(
            ImageRecord(image_id, str(path), height, width, box, np.array([1], np.int32), np.array([False]), None, None)
        )
    return Roidb(records, (1,), ("__background__", "thing"), None, (), 0)


def _training_images(roidb):
    """{image_id: (H, W, 3) float32} of one epoch of the pipeline, cut to each image's size."""
    batches = pipeline.build_train_dataset(_cfg(), roidb).take(len(roidb.records))
    images = {}
    for batch in batches:
        height, width, _ = batch["image_info"][0].numpy().astype(int)
        images[int(batch["image_id"][0])] = (batch["images"][0, :height, :width].numpy(), batch["gt_boxes"][0, 0].numpy())
    return images


def test_training_pixels_are_cv2_imread_pixels_for_every_format(written):
    names = sorted(written)
    images = _training_images(_roidb([written[n] for n in names]))
    for image_id, name in enumerate(names):
        expected = _opencv(written[name])
        assert expected is not None, name
        np.testing.assert_array_equal(images[image_id][0], expected.astype(np.float32), err_msg=name)


@pytest.mark.parametrize("name", sorted(FILES))
def test_orientation_and_pixels_agree_with_pillow(written, name):
    """What OpenCV (so training and inference) shows is what Pillow's exif_transpose shows: the same turn for
    each orientation, and the same pixels where the format is lossless and 8-bit."""
    ours = read_image(written[name])
    pillow = np.asarray(ImageOps.exif_transpose(Image.open(written[name])).convert("RGB"))[..., ::-1]
    assert ours.shape == pillow.shape
    orientation = int(name.rsplit("_", 1)[1]) if "orientation" in name else 1
    assert ours.shape[:2] == (STORED if orientation <= 4 else STORED[::-1])
    if name.startswith(LOSSLESS) and "16_bit" not in name and "alpha" not in name and "palette" not in name:
        np.testing.assert_array_equal(ours, pillow)
    elif not name.startswith(("jpeg_cmyk", "png_16_bit")):  # Pillow rounds CMYK otherwise, clips 16-bit grey
        assert np.abs(ours.astype(int) - pillow).mean() < 2.0, name


def test_a_turned_photo_puts_its_annotated_box_on_the_object(tmp_path):
    """A phone photo stored sideways (Orientation 6) and annotated as displayed, as tools that apply the tag
    write its json: training finds the bright object under its ground-truth box, and inference
    (`read_image`) sees the same pixels."""
    displayed = np.zeros((100, 60, 3), np.uint8)
    displayed[70:90, 10:30] = 255  # the object, rows 70-89, columns 10-29 as displayed
    stored = cv2.rotate(displayed, cv2.ROTATE_90_COUNTERCLOCKWISE)  # what orientation 6 turns clockwise back
    path = tmp_path / "phone.jpg"
    path.write_bytes(_encoded(Image.fromarray(stored[..., ::-1]), "JPEG", 6, quality=95))
    image, box = _training_images(_roidb([path], boxes=[(10, 70, 29, 89)]))[0]
    x1, y1, x2, y2 = box.astype(int)
    assert image.shape[:2] == (100, 60) and image[y1 : y2 + 1, x1 : x2 + 1].mean() > 240
    assert image.mean() < 0.1 * 255
    np.testing.assert_array_equal(read_image(path), image.astype(np.uint8))


def test_an_image_of_another_size_than_its_json_is_one_line(written):
    """A json giving the stored size of a turned photo: one UnreadableImage line naming the file and both sizes."""
    path = written["jpeg_orientation_6"]
    roidb = _roidb([path])
    roidb.records[0].height, roidb.records[0].width = STORED
    with pytest.raises(tf.errors.OpError) as caught:
        next(iter(pipeline.build_train_dataset(_cfg(), roidb)))
    error = pipeline.unreadable_image_error(caught.value)
    assert isinstance(error, UnreadableImage) and "\n" not in str(error)
    assert str(error) == (
        f"{path}: the image is 60x100 (width x height, as OpenCV shows it) but its annotations say 100x60 "
        "(the json gives the size before the EXIF orientation is applied)"
    )


def test_an_unreadable_image_in_training_is_one_line(written, tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(FILES["jpeg_no_exif"][0][:-100])  # cut inside its scan
    roidb = _roidb([written["bmp"]])
    roidb.records[0].file_path = str(broken)
    with pytest.raises(tf.errors.OpError) as caught:
        next(iter(pipeline.build_train_dataset(_cfg(), roidb)))
    assert str(pipeline.unreadable_image_error(caught.value)) == (
        f"{broken}: truncated JPEG (no end-of-image marker after its last scan)"
    )
    assert pipeline.unreadable_image_error(tf.errors.InvalidArgumentError(None, None, "another failure")) is None


@pytest.mark.parametrize("name", sorted(n for n in FILES if FILES[n][1] in TENSORFLOW_FORMATS))
def test_the_savedmodel_decoder_gives_opencv_pixels(name):
    data = FILES[name][0]
    expected = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    got = decode_bgr(tf.constant(data)).numpy()
    assert got.shape == expected.shape
    if name == "jpeg_cmyk":  # TensorFlow's CMYK -> RGB rounds differently from OpenCV's
        assert np.abs(got.astype(int) - expected).max() <= 1
    else:
        np.testing.assert_array_equal(got, expected)


def _big_endian_exif_jpeg(orientation, extra_entries=3):
    """A cv2-encoded JPEG given an APP1 Exif segment in Motorola byte order ("MM", as many cameras write),
    whose IFD0 lists other tags before Orientation."""
    jpeg = cv2.imencode(".jpg", _photo(seed=1)[..., ::-1])[1].tobytes()
    entries = [struct.pack(">HHII", 0x0100 + i, 4, 1, 7) for i in range(extra_entries)]
    entries.append(struct.pack(">HHIHH", ORIENTATION, 3, 1, orientation, 0))
    tiff = b"MM\0*" + struct.pack(">I", 8) + struct.pack(">H", len(entries)) + b"".join(entries) + b"\0\0\0\0"
    payload = b"Exif\0\0" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


@pytest.mark.parametrize("orientation", [3, 6, 7, 8])
def test_big_endian_exif_is_read_as_opencv_reads_it(orientation):
    data = _big_endian_exif_jpeg(orientation)
    expected = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert expected.shape[:2] == (STORED if orientation <= 4 else STORED[::-1])
    np.testing.assert_array_equal(decode_bgr(tf.constant(data)).numpy(), expected)


def test_the_savedmodel_decoder_refuses_what_tensorflow_cannot_decode():
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unknown image file format"):
        decode_bgr(tf.constant(FILES["tiff"][0]))
