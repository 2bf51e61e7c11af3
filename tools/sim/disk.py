"""The simulation's disk: the storage layer's file operations (``strom.storage.files.ops``) with
a record of what each fsync made durable, crashes that keep only that (or, seeded, the page
cache as well), and seeded disk errors.

Files live in a real directory (a tmpfs when there is one), so reads, ``sendfile`` regions and
directory listings are the operating system's; only what a crash keeps is decided here:

- ``fsync(fd)`` of a file records its whole content as durable; ``replace`` carries the durable
  content of the source to the destination (a rename is atomic; the storage layer fsyncs the
  directory after it).
- :meth:`SimDisk.crash_image` is what the broker's directory holds after a power loss at this
  instant: every file as last fsynced (a file never fsynced is empty), or, when the page cache
  survives (a process crash, kill -9), every file as it is now.
- :meth:`SimDisk.restore` puts an image back after the crashed broker's tasks were cancelled,
  so nothing they wrote while unwinding survives.

Errors: :class:`strom.testing.storage_faults.FileFaults` rules (``fail("write", ENOSPC, ...)``).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from strom.storage import files
from strom.testing.storage_faults import FileFaults

Image = dict[str, bytes | None]  # relative path -> content (None: a directory)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:  # by path: the fsynced descriptor may be write-only
        return f.read()


class SimDisk(FileFaults):
    def __init__(self) -> None:
        super().__init__()
        self.durable: dict[str, bytes] = {}
        self.fsyncs = 0

    def fsync(self, fd: int, path: str = "") -> None:
        super().fsync(fd, path)
        if path and not stat.S_ISDIR(os.fstat(fd).st_mode):
            self.durable[path] = _read(path)
            self.fsyncs += 1

    def replace(self, src: str, dst: str) -> None:
        super().replace(src, dst)
        content = self.durable.pop(src, None)
        if content is None:
            self.durable.pop(dst, None)
        else:
            self.durable[dst] = content

    def crash_image(self, root: Path, keep_page_cache: bool) -> Image:
        image: Image = {}
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            image[rel_dir] = None
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if keep_page_cache:
                    with open(path, "rb") as f:
                        image[os.path.join(rel_dir, name)] = f.read()
                else:
                    image[os.path.join(rel_dir, name)] = self.durable.get(path, b"")
        return image

    def restore(self, root: Path, image: Image) -> None:
        """Make ``root`` hold exactly ``image`` (now all durable), dropping cached descriptors."""
        files.cache.forget_under(str(root))
        shutil.rmtree(root, ignore_errors=True)
        for prefix in [p for p in self.durable if p.startswith(str(root) + os.sep)]:
            del self.durable[prefix]
        for rel, content in image.items():
            path = os.path.normpath(os.path.join(root, rel))
            if content is None:
                os.makedirs(path, exist_ok=True)
        for rel, content in image.items():
            if content is not None:
                path = os.path.normpath(os.path.join(root, rel))
                with open(path, "wb") as f:
                    f.write(content)
                self.durable[path] = content
