"""An image's width and height without decoding it when possible (PNG header), else with cv2."""

import struct

import cv2

from tfdet.data.convert.output import ConversionError

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def image_size(path):
    """(width, height) of the image at `path`; ConversionError naming it when it cannot be read."""
    try:
        with open(path, "rb") as stream:
            header = stream.read(24)
    except OSError as error:
        raise ConversionError(f"{path}: cannot be read ({error.strerror})") from None
    if header[:8] == _PNG_SIGNATURE and header[12:16] == b"IHDR":
        return struct.unpack(">II", header[16:24])
    image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if image is None:
        raise ConversionError(f"{path}: not an image cv2 can read")
    return image.shape[1], image.shape[0]
