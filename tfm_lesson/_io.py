"""Writing files so that a failure never leaves a half-written file where a good one was."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Iterator

__all__ = ["atomic_open", "PACKAGE", "inside_package", "check_writable_file", "cannot_write_in"]

PACKAGE = Path(__file__).resolve().parent  # the installed tfm_lesson: its data is shipped, never a default output


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file in ``path``'s folder for writing (``mode`` "w" or "wb"). When the block ends
    normally the file is flushed to disk, given ``path``'s permissions (or the usual ones for a new file) and
    renamed over ``path``; when it raises, the temporary file is removed and ``path`` is left as it was."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    with suppress(OSError, AttributeError):  # make the rename itself durable (POSIX)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def inside_package(path: str | os.PathLike) -> bool:
    """Is ``path`` inside the installed package (its shipped data, its code)?"""
    return Path(path).resolve().is_relative_to(PACKAGE)


def check_writable_file(path: str | os.PathLike, overwrite: bool = False) -> Path:
    """``path`` as a ``Path``, once sure a command may write it: not inside the package (whose data is shipped),
    not a folder, no file replaced unless ``overwrite``, its folder writable. Otherwise a ``ValueError`` saying
    which; command lines turn it into a usage error before any work starts."""
    path = Path(path)
    if inside_package(path):
        raise ValueError(f"{path} is inside the tfm_lesson package, whose files are shipped: write elsewhere "
                         "(e.g. runs/)")
    if path.is_dir():
        raise ValueError(f"{path} is a folder; give a file name")
    if path.exists() and not overwrite:
        raise ValueError(f"{path} already exists: pass --overwrite to replace it, or choose another --out")
    why = cannot_write_in(path.parent)
    if why:
        raise ValueError(f"{path}: cannot write there ({why})")
    return path


def cannot_write_in(folder: str | os.PathLike) -> str | None:
    """Why no file can be written in ``folder`` (made if missing), or None when one can: a test file is written
    there and removed."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as err:
        return str(err.strerror or err)
    return None
