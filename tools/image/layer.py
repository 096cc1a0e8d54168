#!/usr/bin/env python3
"""Writes a directory as one reproducible image layer (an uncompressed tar for `umoci raw
add-layer`): entries sorted by path, every entry owned by 0:0 with no user or group names, every
time the given epoch, modes as on disk, parents before children.

  python3 tools/image/layer.py ROOTFS EPOCH OUT.tar

umoci's own `insert` (0.4.7, Debian) was seen writing a layer whose tar stream ended early (GNU
tar: "Unexpected EOF in archive"); this writes the tar itself and lets umoci store it."""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path


def main(root: Path, epoch: int, out: Path) -> None:
    paths: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for n in dirnames + sorted(filenames):
            paths.append(Path(dirpath) / n)
    paths.sort(key=lambda p: str(p.relative_to(root)).split("/"))
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tf:
        for p in paths:
            rel = str(p.relative_to(root))
            info = tf.gettarinfo(str(p), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = epoch
            if info.isdir():
                info.name = rel + "/"
            if info.isreg():
                with open(p, "rb") as f:
                    tf.addfile(info, f)
            else:
                tf.addfile(info)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
