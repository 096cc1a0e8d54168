"""Reads an OCI image layout (index.json -> manifest -> config and layers) without a container
engine: enough for the image checks (tools/image/check_image.py) and the container test
(tests/image), which unpacks the layers into a runc bundle itself."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

REF_NAME = "org.opencontainers.image.ref.name"


@dataclass
class Entry:
    """One file of the image as its layers leave it."""
    path: str          # absolute, e.g. /usr/local/bin/captf-lock-exporter
    kind: str          # file, dir, symlink, other
    mode: int          # permission bits
    uid: int
    gid: int
    size: int
    link: str = ""     # symlink target
    head: bytes = b""  # first bytes of a regular file (ELF magic, #!)

    def line(self) -> str:
        extra = f" -> {self.link}" if self.kind == "symlink" else ""
        return f"{self.kind:7} {self.mode:04o} {self.uid}:{self.gid} {self.size:>10} {self.path}{extra}"


@dataclass
class Image:
    layout: Path
    tag: str
    manifest_digest: str
    manifest: dict[str, Any]
    config: dict[str, Any]
    files: dict[str, Entry] = field(default_factory=dict)

    def blob(self, digest: str) -> Path:
        algo, hexd = digest.split(":", 1)
        return self.layout / "blobs" / algo / hexd

    @property
    def layers(self) -> list[dict[str, Any]]:
        return self.manifest["layers"]

    @property
    def compressed_size(self) -> int:
        return sum(l["size"] for l in self.layers) + self.manifest["config"]["size"]

    @property
    def uncompressed_size(self) -> int:
        return sum(e.size for e in self.files.values() if e.kind == "file")


def _read_json(p: Path) -> dict[str, Any]:
    return json.loads(p.read_text())


def _verified(path: Path, digest: str) -> bytes:
    data = path.read_bytes()
    algo, hexd = digest.split(":", 1)
    if hashlib.new(algo, data).hexdigest() != hexd:
        raise ValueError(f"blob {digest} does not match its digest")
    return data


def layer_members(data: bytes, media_type: str) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
    raw = gzip.decompress(data) if media_type.endswith("+gzip") else data
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
        for m in tf:
            yield m, tf


def load(layout: Path, tag: str) -> Image:
    """The image tagged ``tag`` in ``layout``, every blob checked against its digest, the layers
    applied in order (whiteouts honoured)."""
    index = _read_json(layout / "index.json")
    found = [m for m in index.get("manifests", []) if m.get("annotations", {}).get(REF_NAME) == tag]
    if len(found) != 1:
        names = [m.get("annotations", {}).get(REF_NAME) for m in index.get("manifests", [])]
        raise ValueError(f"{len(found)} manifests tagged {tag!r} in {layout} (tags: {names})")
    desc = found[0]
    img = Image(layout, tag, desc["digest"], {}, {})
    img.manifest = json.loads(_verified(img.blob(desc["digest"]), desc["digest"]))
    cdesc = img.manifest["config"]
    img.config = json.loads(_verified(img.blob(cdesc["digest"]), cdesc["digest"]))
    for layer in img.layers:
        data = _verified(img.blob(layer["digest"]), layer["digest"])
        for m, tf in layer_members(data, layer["mediaType"]):
            path = "/" + m.name.lstrip("./").rstrip("/") if m.name not in (".", "./") else "/"
            base = path.rsplit("/", 1)[-1]
            if base.startswith(".wh."):
                gone = path.rsplit("/", 1)[0] + "/" + base[4:]
                for p in [p for p in img.files if p == gone or p.startswith(gone + "/")]:
                    del img.files[p]
                continue
            kind = "file" if m.isreg() else "dir" if m.isdir() else "symlink" if m.issym() else "other"
            head = b""
            if m.isreg():
                f = tf.extractfile(m)
                head = f.read(64) if f else b""
            img.files[path] = Entry(path, kind, stat.S_IMODE(m.mode), m.uid, m.gid,
                                    m.size if m.isreg() else 0, m.linkname if m.issym() else "", head)
    return img


def file_list(img: Image) -> str:
    return "".join(e.line() + "\n" for _, e in sorted(img.files.items()))
