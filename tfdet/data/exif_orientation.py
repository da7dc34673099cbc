"""The EXIF Orientation tag of encoded image bytes, read and applied with TensorFlow ops.

`cv2.imread` / `cv2.imdecode` (IMREAD_COLOR) turn an image by the Orientation tag (0x0112) of its EXIF
block: a JPEG's APP1 "Exif" segment, a PNG's eXIf chunk, a WebP's EXIF chunk. TensorFlow's decoders
ignore it. These functions let a graph that receives encoded bytes (the SavedModel's serving signature)
give OpenCV's pixels: the tag is read from the first EXIF block of the file's format (1, no turn, when
there is none or it is not 1..8) and applied as OpenCV's `ApplyExifOrientation` does.
"""

import tensorflow as tf

_TAG_ORIENTATION = 0x0112
_IFD_ENTRY_BYTES = 12
_MAX_IFD_ENTRIES = 256  # IFD0 of a camera file holds a few dozen entries; the count field is read, not trusted
_ANY = None  # a byte the pattern does not fix

# Where a TIFF header ("II*\0" little-endian, "MM\0*" big-endian) starts, after the format's EXIF marker.
_JPEG_EXIF = (0xFF, 0xE1, _ANY, _ANY, *b"Exif\0\0")  # APP1 marker, 2 length bytes, the Exif identifier
_PNG_EXIF = tuple(b"eXIf")  # chunk type; the TIFF header follows at once
_WEBP_EXIF = (*b"EXIF", _ANY, _ANY, _ANY, _ANY)  # chunk type and size; some writers add "Exif\0\0" first
_TIFF_HEADERS = (tuple(b"II*\0"), tuple(b"MM\0*"))


def exif_orientation(encoded):
    """The Orientation (int32, 1..8) of encoded JPEG, PNG or WebP bytes as OpenCV reads it; 1 otherwise."""
    data = tf.cast(tf.io.decode_raw(encoded, tf.uint8), tf.int32)
    is_jpeg = _starts_with(data, b"\xff\xd8")
    is_png = _starts_with(data, b"\x89PNG")
    is_webp = _starts_with(data, b"RIFF") & _has_at(data, 8, b"WEBP")
    tiff = tf.case(
        [
            (is_jpeg, lambda: _tiff_after(data, [_JPEG_EXIF])),
            (is_png, lambda: _tiff_after(data, [_PNG_EXIF])),
            (is_webp, lambda: _tiff_after(data, [_WEBP_EXIF + tuple(b"Exif\0\0"), _WEBP_EXIF])),
        ],
        default=lambda: tf.constant(-1),
    )
    orientation = tf.cond(tiff >= 0, lambda: _ifd0_orientation(data, tiff), lambda: tf.constant(1))
    return tf.where((orientation >= 1) & (orientation <= 8), orientation, 1)


def apply_orientation(image, orientation):
    """`image` (H, W, C) turned as OpenCV's ApplyExifOrientation turns it for `orientation` 1..8."""
    transposed = tf.transpose(image, [1, 0, 2])
    branches = [
        lambda: image,  # 1: top-left, as stored
        lambda: tf.reverse(image, [1]),  # 2: mirrored left-right
        lambda: tf.reverse(image, [0, 1]),  # 3: turned 180 degrees
        lambda: tf.reverse(image, [0]),  # 4: mirrored top-bottom
        lambda: transposed,  # 5: transposed
        lambda: tf.reverse(transposed, [1]),  # 6: turned 90 degrees clockwise
        lambda: tf.reverse(transposed, [0, 1]),  # 7: transverse
        lambda: tf.reverse(transposed, [0]),  # 8: turned 90 degrees counter-clockwise
    ]
    return tf.switch_case(tf.clip_by_value(orientation, 1, 8) - 1, branches)


def _starts_with(data, prefix):
    return _has_at(data, 0, prefix)


def _has_at(data, offset, expected):
    """Whether `data` holds the bytes `expected` at `offset` (False when it is too short)."""
    end = offset + len(expected)
    return tf.cond(
        tf.size(data) >= end,
        lambda: tf.reduce_all(tf.equal(data[offset:end], list(expected))),
        lambda: tf.constant(False),
    )


def _tiff_after(data, patterns):
    """Offset of the TIFF header that follows the first match of one of `patterns` (tried in order), or -1."""
    found = tf.constant(-1)
    for pattern in reversed(patterns):  # the first pattern wins where several match
        for header in _TIFF_HEADERS:
            position = _first_match(data, pattern + header)
            found = tf.where(position >= 0, position + len(pattern), found)
    return found


def _first_match(data, pattern):
    """Index of the first occurrence of `pattern` (bytes, `_ANY` for any byte) in `data`, or -1."""
    starts = tf.size(data) - len(pattern) + 1

    def search():
        match = tf.ones([starts], tf.bool)
        for i, byte in enumerate(pattern):
            if byte is not _ANY:
                match &= tf.equal(data[i : i + starts], byte)
        return tf.cond(tf.reduce_any(match), lambda: tf.cast(tf.argmax(match), tf.int32), lambda: tf.constant(-1))

    return tf.cond(starts > 0, search, lambda: tf.constant(-1))


def _ifd0_orientation(data, tiff):
    """The Orientation value of the first IFD of the TIFF block at `tiff`, or 1 when the tag is absent."""
    little = tf.equal(data[tiff], ord("I"))
    size = tf.size(data)

    def number(offset, width):
        """The unsigned integers of `width` bytes at each `offset`, in the block's byte order; -1 past the end."""
        offset = tf.convert_to_tensor(offset)
        values = tf.gather(data, tf.clip_by_value(offset[..., None] + tf.range(width), 0, size - 1))
        weights = tf.where(little, 256 ** tf.range(width), 256 ** tf.range(width - 1, -1, -1))
        inside = (offset >= 0) & (offset + width <= size)
        return tf.where(inside, tf.reduce_sum(values * weights, axis=-1), -1)

    ifd = tiff + number(tiff + 4, 4)
    count = tf.minimum(number(ifd, 2), _MAX_IFD_ENTRIES)
    entries = ifd + 2 + _IFD_ENTRY_BYTES * tf.range(_MAX_IFD_ENTRIES)
    is_orientation = (tf.range(_MAX_IFD_ENTRIES) < count) & tf.equal(number(entries, 2), _TAG_ORIENTATION)
    entry = tf.gather(entries, tf.cast(tf.argmax(is_orientation), tf.int32))
    value = number(entry + 8, 2)  # a SHORT, left-justified in the 4-byte value field
    return tf.where(tf.reduce_any(is_orientation) & (ifd > tiff), value, 1)
