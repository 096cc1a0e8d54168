"""Images for the node stage, made from files (no engine, no registry): one static Go binary per
image, laid out with umoci, written as a docker-archive by skopeo for ``ctr images import``, and the
exporter's own image as scripts/image.sh builds it (target/image/oci), re-tagged for the node.

Names are ``captf.local/<name>:<version>``: a name no registry answers for, so a pod that would pull
fails at once instead of hanging on the closed network.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pykit.controlplane import ROOT

LOCAL = "captf.local"


def _run(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=300)


def static_image(workdir: Path, binary: Path, name: str, tag: str, *, entry: str, user: str = "65534:65534",
                 dirs: tuple[str, ...] = ("tmp",), workdir_in_image: str | None = None) -> tuple[str, Path]:
    """A one-layer image holding ``binary`` at ``entry`` (its entrypoint), /etc/passwd with nobody and
    nonroot, and ``dirs``; returns (reference, docker-archive path)."""
    ref = f"{LOCAL}/{name}:{tag}"
    d = workdir / f"img-{name}"
    shutil.rmtree(d, ignore_errors=True)
    fs = d / "rootfs"
    (fs / entry.lstrip("/")).parent.mkdir(parents=True)
    shutil.copy2(binary, fs / entry.lstrip("/"))
    (fs / "etc").mkdir(exist_ok=True)
    (fs / "etc" / "passwd").write_text("root:x:0:0:root:/:/sbin/nologin\n"
                                       "nobody:x:65534:65534:nobody:/:/sbin/nologin\n"
                                       "nonroot:x:65532:65532:nonroot:/:/sbin/nologin\n")
    (fs / "etc" / "group").write_text("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")
    for sub in dirs:
        (fs / sub).mkdir(parents=True, exist_ok=True)
        (fs / sub).chmod(0o1777)
    layout = d / "oci"
    _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", f"{layout}:{tag}")
    _run("python3", str(ROOT / "tools" / "image" / "layer.py"), str(fs), "0", str(d / "layer.tar"))
    _run("umoci", "raw", "add-layer", "--image", f"{layout}:{tag}", str(d / "layer.tar"))
    cfg = ["umoci", "config", "--image", f"{layout}:{tag}", "--config.entrypoint", entry,
           "--config.user", user, "--os", "linux", "--architecture", "amd64", "--clear", "config.cmd"]
    if workdir_in_image:
        cfg += ["--config.workingdir", workdir_in_image]
    _run(*cfg)
    archive = d / f"{name}.tar"
    _run("skopeo", "copy", "--quiet", f"oci:{layout}:{tag}", f"docker-archive:{archive}:{ref}")
    shutil.rmtree(fs)
    (d / "layer.tar").unlink()
    return ref, archive


def exporter_image(workdir: Path, version: str) -> tuple[str, Path]:
    """scripts/image.sh's image (target/image/oci, tag captf-lock-exporter:<version>) as
    captf.local/captf-lock-exporter:<version>."""
    layout = ROOT / "target" / "image" / "oci"
    if not (layout / "index.json").is_file():
        raise AssertionError(f"{layout} missing: run scripts/image.sh first (the node stage does)")
    ref = f"{LOCAL}/captf-lock-exporter:{version}"
    archive = workdir / "captf-lock-exporter.tar"
    archive.unlink(missing_ok=True)
    _run("skopeo", "copy", "--quiet", f"oci:{layout}:captf-lock-exporter:{version}",
         f"docker-archive:{archive}:{ref}")
    return ref, archive
