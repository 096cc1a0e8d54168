"""The exporter's image run by runc (or crun) as the chart's pod: a bundle unpacked from the OCI
layout by umoci, its config.json written by tools/image/runtime_spec.py from the rendered chart,
the container run in the foreground (``runc run``: its exit code is the exporter's) with a state
directory of its own, stopped by ``runc kill`` and removed by ``runc delete``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

from pykit.process import ManagedProcess

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "target" / "image" / "oci"


def runtime() -> str:
    """$IMAGE_RUNTIME (runc or crun), default runc."""
    rt = os.environ.get("IMAGE_RUNTIME", "runc")
    if shutil.which(rt) is None:
        raise FileNotFoundError(f"{rt} not found (apt-get install runc)")
    return rt


def unpack(tag: str, bundle: Path) -> None:
    """umoci unpacks the image (as root: owners kept) into ``bundle``/rootfs."""
    if not (LAYOUT / "index.json").exists():
        raise FileNotFoundError(f"no image at {LAYOUT}: run scripts/image.sh first")
    subprocess.run(["umoci", "unpack", "--image", f"{LAYOUT}:{tag}", str(bundle)], check=True,
                   capture_output=True)


def tree(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``root`` (symlinks not followed): type, mode, owner, and for files size,
    modification time and SHA-256. Directory times are left out: the runtime's mountpoints change
    them; what a process could write shows in the files."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = "/" + str(p.relative_to(root))
            base = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
            if stat.S_ISREG(st.st_mode):
                out[rel] = base + (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = base + (os.readlink(p),)
            else:
                out[rel] = base
    return out


class Container(ManagedProcess):
    """``<runtime> run`` of a bundle in the foreground: stdout+stderr (the exporter's log) to
    ``log_path``; ``returncode()`` is the exporter's exit code."""

    stop_timeout = 40.0

    def __init__(self, bundle: Path, cid: str, state_root: Path, log_path: Path):
        self.rt = runtime()
        self.bundle = bundle
        self.cid = cid
        self.state_root = state_root
        super().__init__("container", [self.rt, "--root", str(state_root), "run", "--bundle", str(bundle),
                                       cid], log_path)
        self.started_at = 0.0

    def start(self) -> "Container":
        self.started_at = time.monotonic()
        super().start()
        return self

    def runtime_cmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.rt, "--root", str(self.state_root), *args], capture_output=True, text=True,
                              check=check, timeout=30)

    def state(self) -> dict[str, Any] | None:
        r = self.runtime_cmd("state", self.cid, check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def init_pid(self) -> int:
        st = self.state()
        if not st or st.get("status") != "running" or not st.get("pid"):
            raise AssertionError(f"container {self.cid} is not running: {st}")
        return int(st["pid"])

    def signal(self, sig: str) -> None:
        self.runtime_cmd("kill", self.cid, sig)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def remove(self) -> None:
        """Stop what is left and delete the container's state (the bundle stays)."""
        if self.returncode() is None and self.state():
            self.runtime_cmd("kill", self.cid, "KILL", check=False)
        self.stop(10)
        self.runtime_cmd("delete", "--force", self.cid, check=False)
