"""Weights named by Detectron URL or maskrcnn-benchmark `catalog://` name: downloaded once, md5-checked.

Detectron's `utils/io.py::cache_url`: a URL under Detectron's download base is cached at the URL's path below
the base, inside the cache folder; its reference md5 is the text of `URL + '.md5sum'`, and a cached file is
checked against it again on every use. Only URLs under that base are downloaded (Detectron asserts the same):
they are the ones that publish an md5.

Where tfdet goes further, so that nothing half-written or unchecked is ever used:
* the download goes to a temporary file in the same folder, renamed only once its md5 matches; a connection
  closed early, a stalled one (TIMEOUT_S without a byte), Ctrl-C or a wrong md5 leave nothing behind;
* the md5sum text is kept beside the file (`FILE.md5sum`, the URL's layout again): when `URL.md5sum` gives no md5
  later (no answer, an HTTP error such as a proxy's 403/407 or a 503, a page without an md5 such as a captive
  portal's), the cached file is checked against that copy instead (said in one `note:` line on stderr);
* a cached file whose md5 differs from the reference is removed (Detectron only asserts).

Where files go: `$TFDET_CACHE/detectron/<path below the base>` (TFDET_CACHE defaults to ~/.cache/tfdet); a config
whose DOWNLOAD_CACHE is not Detectron's default (/tmp/detectron-download-cache) caches its URLs there instead, as
Detectron's `url.replace(base, DOWNLOAD_CACHE)` does. `TFDET_DETECTRON_URL` replaces the base the files come from
(a site's mirror): URLs written with Detectron's base, its older S3 base or the mirror's all name the same file.
"""

import hashlib
import http.client
import os
import pathlib
import re
import sys
import urllib.error
import urllib.request
import uuid

from tqdm import tqdm

DETECTRON_BASE_URL = "https://dl.fbaipublicfiles.com/detectron"
OLD_DETECTRON_BASE_URL = "https://s3-us-west-2.amazonaws.com/detectron"  # Detectron's base until late 2018
DETECTRON_DOWNLOAD_CACHE = "/tmp/detectron-download-cache"  # Detectron's DOWNLOAD_CACHE default: tfdet's cache
CACHE_ENV = "TFDET_CACHE"
BASE_URL_ENV = "TFDET_DETECTRON_URL"
MD5SUM_SUFFIX = ".md5sum"
CATALOG_PREFIX = "catalog://"
TIMEOUT_S = 30  # per connection attempt and per read: a dead or stalled server fails within it
CHUNK_BYTES = 1 << 20
MAX_MD5SUM_BYTES = 4096

# maskrcnn-benchmark's config/paths_catalog.py ModelCatalog: ImageNetPretrained/<name> -> path below the base.
IMAGENET_CATALOG = {
    "MSRA/R-50": "ImageNetPretrained/MSRA/R-50.pkl",
    "MSRA/R-50-GN": "ImageNetPretrained/47261647/R-50-GN.pkl",
    "MSRA/R-101": "ImageNetPretrained/MSRA/R-101.pkl",
    "MSRA/R-101-GN": "ImageNetPretrained/47592356/R-101-GN.pkl",
    "FAIR/20171220/X-101-32x8d": "ImageNetPretrained/20171220/X-101-32x8d.pkl",
}
# ...and Caffe2Detectron/COCO/<model id>/<config name> -> the training run's signature in its URL.
C2_DETECTRON_CATALOG = {
    "35857197/e2e_faster_rcnn_R-50-C4_1x": "01_33_49.iAX0mXvW",
    "35857345/e2e_faster_rcnn_R-50-FPN_1x": "01_36_30.cUF7QR7I",
    "35857890/e2e_faster_rcnn_R-101-FPN_1x": "01_38_50.sNxI7sX7",
    "36761737/e2e_faster_rcnn_X-101-32x8d-FPN_1x": "06_31_39.5MIHi1fZ",
    "35858791/e2e_mask_rcnn_R-50-C4_1x": "01_45_57.ZgkA7hPB",
    "35858933/e2e_mask_rcnn_R-50-FPN_1x": "01_48_14.DzEQe4wC",
    "35861795/e2e_mask_rcnn_R-101-FPN_1x": "02_31_37.KqyEK4tT",
    "36761843/e2e_mask_rcnn_X-101-32x8d-FPN_1x": "06_35_59.RZotkLKI",
    "37129812/e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x": "09_35_36.8pzTQKYK",
    "37697547/e2e_keypoint_rcnn_R-50-FPN_1x": "08_42_54.kdzV35ao",
}
_C2_DETECTRON_SUFFIX = "output/train/{0}coco_2014_train%3A{0}coco_2014_valminusminival/generalized_rcnn/model_final.pkl"


class DownloadError(ValueError):
    """A weights value that gives no usable local file (unreachable, refused, wrong md5); one line."""


def cache_folder() -> pathlib.Path:
    """tfdet's cache: $TFDET_CACHE, else ~/.cache/tfdet."""
    return pathlib.Path(os.environ.get(CACHE_ENV) or pathlib.Path.home() / ".cache" / "tfdet")


def download_root(download_cache=None) -> pathlib.Path:
    """The folder that mirrors Detectron's base: a config's DOWNLOAD_CACHE unless it is Detectron's default."""
    if download_cache and os.fspath(download_cache) != DETECTRON_DOWNLOAD_CACHE:
        return pathlib.Path(download_cache)
    return cache_folder() / "detectron"


def base_url() -> str:
    """Where Detectron's files are downloaded from: $TFDET_DETECTRON_URL, else Detectron's base."""
    return (os.environ.get(BASE_URL_ENV) or DETECTRON_BASE_URL).rstrip("/")


def is_url(value) -> bool:
    """Whether `value` is an http(s) URL (Detectron's test in cache_url)."""
    return isinstance(value, str) and re.match(r"^https?://", value, re.IGNORECASE) is not None


def detectron_path(url) -> str:
    """The path of `url` below Detectron's base (current, old S3 or $TFDET_DETECTRON_URL); DownloadError otherwise."""
    for base in dict.fromkeys((base_url(), DETECTRON_BASE_URL, OLD_DETECTRON_BASE_URL)):
        if url.startswith(base + "/"):
            relative = url[len(base) + 1 :]
            parts = relative.split("/")
            if any(part in ("", ".", "..") for part in parts) or re.search(r"[?#\\]", relative):
                raise DownloadError(f"{url}: not a file path below {base}")
            return relative
    raise DownloadError(
        f"{url}: only Detectron's files (below {DETECTRON_BASE_URL}, or ${BASE_URL_ENV}) are downloaded, since only "
        "they publish the md5 to check them against; download it yourself and give its local path"
    )


def catalog_url(name) -> str:
    """The Detectron URL of a maskrcnn-benchmark ModelCatalog name (`catalog://` optional), as its ModelCatalog.get."""
    entry = name.removeprefix(CATALOG_PREFIX)
    imagenet = entry.removeprefix("ImageNetPretrained/")
    if imagenet != entry and imagenet in IMAGENET_CATALOG:
        return f"{DETECTRON_BASE_URL}/{IMAGENET_CATALOG[imagenet]}"
    model = entry.removeprefix("Caffe2Detectron/COCO/")
    if model != entry and model in C2_DETECTRON_CATALOG:
        model_id, config_name = model.split("/")
        suffix = _C2_DETECTRON_SUFFIX.format("keypoints_" if "keypoint" in model else "")
        run = f"{config_name}.yaml.{C2_DETECTRON_CATALOG[model]}"
        return f"{DETECTRON_BASE_URL}/{model_id}/12_2017_baselines/{run}/{suffix}"
    known = [f"ImageNetPretrained/{key}" for key in IMAGENET_CATALOG]
    known += [f"Caffe2Detectron/COCO/{key}" for key in C2_DETECTRON_CATALOG]
    raise DownloadError(f"{CATALOG_PREFIX}{entry}: not in maskrcnn-benchmark's ModelCatalog ({', '.join(known)})")


def resolve_weights(value, download_cache=None) -> str:
    """A local weights path for `value`: a path unchanged, a Detectron URL or `catalog://` name downloaded and
    checked (cache_url). `download_cache`: the config's DOWNLOAD_CACHE, if any. Raises DownloadError."""
    value = os.fspath(value)
    if value.startswith(CATALOG_PREFIX):
        value = catalog_url(value)
    if is_url(value):
        return cache_url(value, download_cache)
    if re.match(r"^[a-z][a-z0-9+.-]*://", value, re.IGNORECASE):
        raise DownloadError(f"{value}: only http(s) URLs of Detectron's files and catalog:// names are downloaded")
    return value


def cache_url(url, download_cache=None, timeout=TIMEOUT_S) -> str:
    """The cached, md5-checked local copy of Detectron's `url`, downloaded when absent; its path."""
    relative = detectron_path(url)
    source = f"{base_url()}/{relative}"
    path = download_root(download_cache).joinpath(*relative.split("/"))
    if path.is_file():
        _check_cached(source, path, timeout)
        return str(path)
    try:
        expected = _reference_md5(source, timeout)
    except _Unavailable as failure:
        raise DownloadError(_by_hand_message(source, path, failure)) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    _download(source, path, expected, timeout)
    return str(path)


class _Unavailable(Exception):
    """A URL that gave nothing usable: no answer (no network, refused, timed out: `answered` False), or an answer
    without what was asked for (an HTTP error status, an md5sum text without an md5); `reason` says which."""

    def __init__(self, url, reason, answered=False):
        super().__init__(reason)
        self.url, self.reason, self.answered = url, reason, answered

    def __str__(self):
        """'URL is unreachable (Connection refused)', 'URL answered HTTP 503 Service Unavailable'."""
        if self.answered:
            return f"{self.url} answered {self.reason}"
        return f"{self.url} is unreachable ({self.reason})"


def _by_hand_message(source, path, failure):
    """A failed first download in one line: why, what to fetch by hand and where to put it."""
    why, by_hand = (str(failure), "put") if failure.answered else (failure.reason, "without network, put")
    return (
        f"cannot download {source} ({why}); {by_hand} the file at {path} and the text of "
        f"{source}{MD5SUM_SUFFIX} at {path}{MD5SUM_SUFFIX}"
    )


def _open(url, timeout, method="GET"):
    """urlopen with a bound on every wait; an HTTP error status or no answer is _Unavailable."""
    try:
        return urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=timeout)
    except urllib.error.HTTPError as error:
        raise _Unavailable(url, f"HTTP {error.code} {error.reason}", answered=True) from None
    except urllib.error.URLError as error:
        raise _Unavailable(url, getattr(error.reason, "strerror", None) or error.reason) from None
    except (OSError, http.client.HTTPException) as error:
        raise _Unavailable(url, str(error) or type(error).__name__) from None


def _reference_md5(source, timeout) -> str:
    """The md5 hex digest published as the text of `source.md5sum` (the first word, lower case); _Unavailable
    when it cannot be fetched or holds no md5 (a proxy's or captive portal's page)."""
    url = source + MD5SUM_SUFFIX
    try:
        with _open(url, timeout) as response:
            status, text = response.status, response.read(MAX_MD5SUM_BYTES).decode("latin-1")
    except (OSError, http.client.HTTPException) as error:
        raise _Unavailable(url, str(error) or type(error).__name__) from None
    md5 = _md5_in(text)
    if md5 is None:
        raise _Unavailable(url, f"HTTP {status} with no md5 hash in its text ({text.strip()[:40]!r})", answered=True)
    return md5


def _md5_in(text):
    """The md5 hex digest that starts an md5sum text (lower case), or None."""
    words = text.split()
    if not words or not re.fullmatch(r"[0-9a-fA-F]{32}", words[0]):
        return None
    return words[0].lower()


def _parse_md5(text, where) -> str:
    md5 = _md5_in(text)
    if md5 is None:
        raise DownloadError(f"{where}: holds no md5 hash ({text.strip()[:40]!r})")
    return md5


def file_md5(path) -> str:
    """The md5 hex digest of a file, read in chunks."""
    digest = hashlib.md5()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _check_cached(source, path, timeout):
    """Detectron's assert_cache_file_is_ok, offline-aware: against `source.md5sum`, else (whatever kept it from
    giving an md5) against the stored copy, said in one `note:` line."""
    stored_path = pathlib.Path(f"{path}{MD5SUM_SUFFIX}")
    reference = f"{source}{MD5SUM_SUFFIX}"
    try:
        expected = _reference_md5(source, timeout)
    except _Unavailable as failure:
        if not stored_path.is_file():
            raise DownloadError(
                f"cannot check the cached {path}: {failure}; put its text at {stored_path} to check the file offline"
            ) from None
        expected, reference = _parse_md5(stored_path.read_text(encoding="latin-1"), stored_path), stored_path
        print(f"note: {failure}; checked {path} against {stored_path}", file=sys.stderr)
    actual = file_md5(path)
    if actual != expected:
        path.unlink(missing_ok=True)
        stored_path.unlink(missing_ok=True)
        raise DownloadError(
            f"the cached {path} has md5 {actual}, not {expected} ({reference}): removed it from the cache; run again "
            "to download it anew"
        )
    if not stored_path.is_file() or _stored_md5(stored_path) != expected:
        _write_atomically(stored_path, (expected + "\n").encode())


def _stored_md5(stored_path):
    try:
        return _parse_md5(stored_path.read_text(encoding="latin-1"), stored_path)
    except DownloadError:
        return None


def _download(source, path, expected, timeout):
    """`source` into a temporary file beside `path`, renamed to `path` only when complete with md5 `expected`."""
    print(f"downloading {source}\n  to {path}", file=sys.stderr)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
    try:
        try:
            with _open(source, timeout) as response:
                length = response.headers.get("Content-Length")
                total = int(length) if length and length.strip().isdigit() else None
                received, actual = _stream(response, temporary, total, path.name)
        except _Unavailable as failure:
            raise DownloadError(_by_hand_message(source, path, failure)) from None
        except (OSError, http.client.HTTPException) as error:  # a stall or reset mid-body
            raise DownloadError(f"{source}: the download broke off ({error}); nothing was cached, run again") from None
        if total is not None and received != total:
            raise DownloadError(
                f"{source}: the connection closed after {received} of {total} bytes; nothing was cached, run again"
            )
        if actual != expected:
            raise DownloadError(
                f"{source}: the downloaded file has md5 {actual}, not {expected} ({source}{MD5SUM_SUFFIX}); "
                "nothing was cached"
            )
        _write_atomically(pathlib.Path(f"{path}{MD5SUM_SUFFIX}"), (expected + "\n").encode())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # whatever stopped it (Ctrl-C included), no partial file stays
    print(f"cached {path} (md5 {expected} checked)", file=sys.stderr)


def _stream(response, temporary, total, label):
    """Copy the response body into `temporary` with a progress bar (on a terminal); (bytes, md5 hex digest)."""
    digest, received = hashlib.md5(), 0
    bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label, file=sys.stderr, disable=None)
    with bar, open(temporary, "wb") as file:
        for chunk in _body_chunks(response):
            file.write(chunk)
            digest.update(chunk)
            received += len(chunk)
            bar.update(len(chunk))
        file.flush()
        os.fsync(file.fileno())
    return received, digest.hexdigest()


def _body_chunks(response):
    """The response body in chunks; a body cut short just ends early (the caller compares its length)."""
    while True:
        try:
            chunk = response.read(CHUNK_BYTES)
        except http.client.IncompleteRead as error:  # raised instead of a short read by some Python versions
            yield error.partial
            return
        if not chunk:
            return
        yield chunk


def _write_atomically(path, data):
    """`data` into `path` through a temporary file in its folder and a rename."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def remote_size(url, timeout=TIMEOUT_S):
    """The size in bytes the server gives for Detectron's `url` (a HEAD request's Content-Length); None when it
    gives none or answers with an HTTP error (it has no such file). DownloadError when it cannot be reached."""
    source = f"{base_url()}/{detectron_path(url)}"
    try:
        with _open(source, timeout, method="HEAD") as response:
            length = response.headers.get("Content-Length")
    except _Unavailable as failure:
        if failure.answered:  # an HTTP error status
            return None
        raise DownloadError(f"cannot reach {source} ({failure.reason})") from None
    return int(length) if length and length.strip().isdigit() else None
