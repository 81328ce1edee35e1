"""Reading the .npz files a user gives (--inputs, --load-outputs, an export folder's cases): the
members' headers first, with numpy's own header readers, so that each array's shape, dtype and
size are known - and checked by the caller - before its bytes are allocated. Pickles are never
read."""
from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from .errors import AlignError

MIB = 1 << 20
DEFAULT_MAX_MIB = 64
LIMIT_FLAG = "--max-input-mib"
NPY_MAGIC = b"\x93NUMPY"
HEADER_READERS = {(1, 0): npy_format.read_array_header_1_0,
                  (2, 0): npy_format.read_array_header_2_0,
                  (3, 0): npy_format.read_array_header_2_0}  # 3.0: 2.0 with a UTF-8 header


@dataclass(frozen=True)
class Member:
    """One array of an .npz, as its header describes it."""
    key: str
    shape: tuple
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def members(path: Path) -> dict:
    """key -> Member for every array of the .npz at `path`, from the headers alone."""
    path = Path(path)
    if not path.is_file():
        raise AlignError(f"{path}: {'a folder' if path.is_dir() else 'no such file'}; expected "
                         "an .npz file")
    if not zipfile.is_zipfile(path):
        raise AlignError(f"{path}: expected an .npz (np.savez: one array per name), got "
                         f"{_what_it_is(path)}")
    try:
        with zipfile.ZipFile(path) as archive:
            found = {}
            for info in archive.infolist():
                if info.filename.endswith(".npy"):
                    member = _read_header(archive, info)
                    found[member.key] = member
            return found
    except AlignError:
        raise
    except Exception as err:  # noqa: BLE001  a corrupt archive surfaces as many error types
        raise AlignError(f"{path}: not a readable .npz ({type(err).__name__}: "
                         f"{_first_line(err)})") from None


def load(path: Path, keys) -> dict:
    """The arrays of `keys` (their headers already checked with `members`)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in keys}
    except MemoryError:
        raise AlignError(f"{path}: out of memory reading its arrays") from None
    except Exception as err:  # noqa: BLE001  truncated or corrupt data: zlib, zipfile, numpy errors
        raise AlignError(f"{path}: not a readable .npz ({type(err).__name__}: "
                         f"{_first_line(err)})") from None


def check_size(path: Path, member: Member, max_bytes: int) -> None:
    """AlignError when one array of the file would take more than `max_bytes`."""
    if member.nbytes > max_bytes:
        raise AlignError(f"{path}: array {member.key!r}: {list(member.shape)} {member.dtype} "
                         f"takes {size_text(member.nbytes)}, over the cap of "
                         f"{size_text(max_bytes)} ({LIMIT_FLAG} raises it)")


def size_text(nbytes: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def _read_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Member:
    key = info.filename[:-len(".npy")]
    with archive.open(info) as handle:
        version = npy_format.read_magic(handle)
        reader = HEADER_READERS.get(version)
        if reader is None:
            raise AlignError(f"{archive.filename}: array {key!r}: .npy format version "
                             f"{version[0]}.{version[1]}, expected 1.0, 2.0 or 3.0")
        shape, _, dtype = reader(handle)
    if dtype.hasobject:
        raise AlignError(f"{archive.filename}: array {key!r}: holds Python objects ({dtype}); "
                         "expected numeric arrays (pickles are not read)")
    return Member(key, tuple(int(d) for d in shape), dtype)


def _what_it_is(path: Path) -> str:
    with open(path, "rb") as handle:
        start = handle.read(len(NPY_MAGIC))
    return "a .npy file (one unnamed array)" if start == NPY_MAGIC else "a file that is not a zip"


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else "no detail"
