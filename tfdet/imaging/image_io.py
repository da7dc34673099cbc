"""Finding and reading images and videos for inference, and writing pictures (PNG, JPEG, one-page PDF).

Images are decoded as Detectron's tools do (`cv2.imread` with IMREAD_COLOR): 8-bit BGR, alpha
dropped, 16-bit samples scaled to 8 bit, grayscale stacked to 3 channels, EXIF orientation
applied. Unlike a bare `cv2.imread`, an unreadable or truncated file raises `UnreadableImage`
with its name instead of giving None or a half-grey picture.
"""

import glob
import pathlib

import cv2
import numpy as np

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".jp2"})
VIDEO_EXTENSIONS = frozenset({".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv"})
PICTURE_FORMATS = ("png", "jpg", "jpeg", "pdf")

_JPEG_START, _JPEG_SCAN, _JPEG_END = b"\xff\xd8", b"\xff\xda", b"\xff\xd9"


class UnreadableImage(ValueError):
    """An input file that is not a decodable image."""


def is_video(path):
    return pathlib.Path(path).suffix.lower() in VIDEO_EXTENSIONS


def list_inputs(spec, image_ext=None):
    """Sorted files named by `spec`: the file itself, a folder's images and videos (only its `image_ext`
    files when given, Detectron's --image-ext), or a glob pattern's matches. FileNotFoundError if none."""
    path = pathlib.Path(spec)
    if path.is_dir():
        wanted = {"." + image_ext.lower().lstrip(".")} if image_ext else IMAGE_EXTENSIONS | VIDEO_EXTENSIONS
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in wanted)
        if not files:
            kind = f"*.{image_ext.lstrip('.')}" if image_ext else "image or video"
            raise FileNotFoundError(f"{spec}: no {kind} files in this folder")
        return files
    if path.exists():
        return [path]
    if any(c in spec for c in "*?["):
        files = sorted(p for p in map(pathlib.Path, glob.glob(spec)) if p.is_file())
        if not files:
            raise FileNotFoundError(f"{spec}: the pattern matches no file")
        return files
    raise FileNotFoundError(f"{spec}: no such file or folder")


def read_image(path):
    """H x W x 3 uint8 BGR image of the file at `path`; raises UnreadableImage when it cannot be decoded."""
    try:
        data = np.fromfile(str(path), np.uint8)  # np.fromfile + imdecode also reads non-ASCII paths
    except OSError as error:
        raise UnreadableImage(f"{path}: {error.strerror or error}") from None
    if data.size == 0:
        raise UnreadableImage(f"{path}: empty file")
    if _is_truncated_jpeg(data.tobytes()):
        raise UnreadableImage(f"{path}: truncated JPEG (no end-of-image marker after its last scan)")
    image = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if image is None:
        raise UnreadableImage(f"{path}: not an image OpenCV can decode")
    return image


def _is_truncated_jpeg(data):
    """True for JPEG data whose last scan has no end-of-image marker (libjpeg would grey-fill the rest).

    Inside entropy-coded data every 0xFF byte is stuffed or a restart marker, so an FFD9 after the
    last start-of-scan is the real end marker; bytes appended after it (camera trailers) are fine.
    """
    if not data.startswith(_JPEG_START):
        return False
    last_scan = data.rfind(_JPEG_SCAN)
    return last_scan >= 0 and data.find(_JPEG_END, last_scan) < 0


class VideoFrames:
    """Iterates a video's frames as BGR uint8 arrays with OpenCV; `fps` and `frame_count` as the container says."""

    def __init__(self, path):
        self.path = str(path)
        self._capture = cv2.VideoCapture(self.path)
        if not self._capture.isOpened():
            raise UnreadableImage(f"{path}: not a video OpenCV can open")
        fps = self._capture.get(cv2.CAP_PROP_FPS)
        self.fps = fps if fps and np.isfinite(fps) and fps > 0 else 25.0
        self.frame_count = max(int(self._capture.get(cv2.CAP_PROP_FRAME_COUNT)), 0)

    def __iter__(self):
        try:
            while True:
                ok, frame = self._capture.read()
                if not ok or frame is None:
                    return
                yield frame
        finally:
            self._capture.release()


def write_picture(path, image_bgr):
    """Write a BGR uint8 image as PNG, JPEG or PDF, chosen by the file extension of `path`."""
    path = pathlib.Path(path)
    extension = path.suffix.lower().lstrip(".")
    if extension == "pdf":
        path.write_bytes(pdf_page_with_image(image_bgr))
        return
    if extension not in PICTURE_FORMATS:
        raise ValueError(f"{path}: pictures are written as {', '.join(PICTURE_FORMATS)}, not {extension!r}")
    if not cv2.imwrite(str(path), image_bgr):
        raise OSError(f"{path}: OpenCV could not write the picture")


def pdf_page_with_image(image_bgr, dpi=200, jpeg_quality=95):
    """A one-page PDF (bytes) showing `image_bgr` at `dpi` (Detectron's vis_one_image saves PDFs at 200 dpi).

    The picture is embedded as a JPEG stream (DCTDecode), so the PDF is a raster, not vector art.
    """
    ok, jpeg = cv2.imencode(".jpg", image_bgr, [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
    if not ok:
        raise ValueError(f"cannot encode an image of shape {np.shape(image_bgr)} as JPEG")
    height, width = image_bgr.shape[:2]
    page_w, page_h = width * 72.0 / dpi, height * 72.0 / dpi
    drawing = f"q {page_w:.3f} 0 0 {page_h:.3f} 0 0 cm /Im0 Do Q".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {page_w:.3f} {page_h:.3f}] "
        f"/Resources << /XObject << /Im0 4 0 R >> >> /Contents 5 0 R >>".encode(),
        f"<< /Type /XObject /Subtype /Image /Width {width} /Height {height} /ColorSpace /DeviceRGB "
        f"/BitsPerComponent 8 /Filter /DCTDecode /Length {len(jpeg)} >>\nstream\n".encode()
        + jpeg.tobytes()
        + b"\nendstream",
        f"<< /Length {len(drawing)} >>\nstream\n".encode() + drawing + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)
