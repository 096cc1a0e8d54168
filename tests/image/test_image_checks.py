"""tools/image/check_image.py on the built image passes, and fails on what it must catch: a shell,
a package manager, a file nobody needs, a writable or non-root file, a missing library, the wrong
user, a Dockerfile or chart that disagrees. Each tampered case is the real image with one change."""

from __future__ import annotations

import copy
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import NAME, ROOT, cargo_version

sys.path.insert(0, str(ROOT / "tools" / "image"))
import check_image  # noqa: E402
import oci  # noqa: E402

OUT = ROOT / "target" / "image"


@pytest.fixture(scope="module")
def image() -> oci.Image:
    return oci.load(OUT / "oci", f"{NAME}:{cargo_version()}")


@pytest.fixture(scope="module")
def packages() -> list[str]:
    return [p.split(":")[0] for p in (OUT / "packages.txt").read_text().split()]


def contents(img: oci.Image, packages: list[str]) -> list[str]:
    with tempfile.TemporaryDirectory() as t:
        return check_image.check_contents(img, packages, Path(t))


def test_the_built_image_passes_every_check(image: oci.Image, packages: list[str]) -> None:
    results = check_image.run_checks(image, packages, OUT / f"{NAME}.oci.tar", OUT / f"{NAME}.cdx.json")
    assert results == {k: [] for k in results}, results
    # what the image holds, beyond the fixed files: glibc's and libgcc's libraries and the loader
    libs = sorted(p for p, e in image.files.items() if "/lib" in p and e.kind != "dir")
    assert any(p.endswith("/libc.so.6") for p in libs) and any("ld-linux" in p for p in libs), libs
    assert len(image.layers) == 1


@pytest.mark.parametrize("path,kind,mode,head", [
    ("/bin/sh", "file", 0o755, b"\x7fELF"),
    ("/usr/bin/busybox", "file", 0o755, b"\x7fELF"),
    ("/usr/bin/dpkg", "file", 0o755, b"\x7fELF"),
    ("/usr/bin/apt-get", "symlink", 0o777, b""),
    ("/usr/local/bin/helper", "file", 0o755, b"#!/bin/sh\n"),
    ("/etc/motd", "file", 0o644, b"hello"),
])
def test_an_added_file_fails(image: oci.Image, packages: list[str], path: str, kind: str, mode: int,
                             head: bytes) -> None:
    bad = copy.deepcopy(image)
    bad.files[path] = oci.Entry(path, kind, mode, 0, 0, len(head), "/bin/busybox" if kind == "symlink" else "", head)
    problems = contents(bad, packages)
    assert any(p.startswith(path) for p in problems), problems


def test_a_writable_or_foreign_owned_file_fails(image: oci.Image, packages: list[str]) -> None:
    bad = copy.deepcopy(image)
    bad.files["/etc/passwd"].mode = 0o666
    bad.files[check_image.BINARY].uid = 65532
    problems = contents(bad, packages)
    assert any("/etc/passwd: writable" in p for p in problems), problems
    assert any("owned by 65532" in p for p in problems), problems


def test_a_missing_library_fails(image: oci.Image, packages: list[str]) -> None:
    bad = copy.deepcopy(image)
    libc = next(p for p in bad.files if p.endswith("/libc.so.6"))
    del bad.files[libc]
    assert any("libc.so.6" in p for p in contents(bad, packages))


def test_wrong_user_fails(image: oci.Image) -> None:
    bad = copy.deepcopy(image)
    bad.config["config"]["User"] = "0:0"
    with tempfile.TemporaryDirectory() as t:
        assert any("User" in p for p in check_image.check_user(bad, Path(t)))
    assert any("USER" in p for p in check_image.check_dockerfile(bad, []))


def test_a_dockerfile_that_disagrees_fails(image: oci.Image, packages: list[str], monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    text = (ROOT / "Dockerfile").read_text()
    for old, new, want in [("EXPOSE 9820", "EXPOSE 9090", "EXPOSE"),
                           ("USER 65532:65532", "USER 1000:1000", "USER"),
                           ('"/usr/local/bin/captf-lock-exporter"]', '"/app/exporter"]', "ENTRYPOINT"),
                           ("cc-debian12", "cc-debian11", "Debian 11"),
                           ('org.opencontainers.image.licenses="Apache-2.0"',
                            'org.opencontainers.image.licenses="MIT"', "licenses")]:
        assert old in text, old
        root = tmp_path / want.replace(" ", "")
        root.mkdir()
        (root / "Dockerfile").write_text(text.replace(old, new))
        shutil.copy(ROOT / "Cargo.toml", root / "Cargo.toml")
        monkeypatch.setattr(check_image, "ROOT", root)
        problems = check_image.check_dockerfile(image, packages)
        assert any(want in p for p in problems), (want, problems)


def test_a_chart_that_points_elsewhere_fails(image: oci.Image, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shutil.copy(ROOT / "Cargo.toml", tmp_path / "Cargo.toml")
    (tmp_path / "chart").mkdir()
    chart = (ROOT / "chart" / "Chart.yaml").read_text()
    (tmp_path / "chart" / "Chart.yaml").write_text(chart.replace(f'appVersion: "{cargo_version()}"', 'appVersion: "9.9.9"'))
    shutil.copy(ROOT / "chart" / "values.yaml", tmp_path / "chart" / "values.yaml")
    monkeypatch.setattr(check_image, "ROOT", tmp_path)
    monkeypatch.setattr(check_image, "git_head", lambda: image.config["config"]["Labels"]["org.opencontainers.image.revision"][:40])
    problems = check_image.check_chart(image, OUT / f"{NAME}.oci.tar")
    assert any("appVersion 9.9.9" in p for p in problems), problems


@pytest.mark.parametrize("change,section,want", [
    ('  "MIT",\n', "licenses", "rejected"),
    ('deny = [\n', "bans", "banned"),
    ('allow-registry = ["https://github.com/rust-lang/crates.io-index"]', "sources", "not explicitly allowed"),
])
def test_cargo_deny_fails_on_what_deny_toml_forbids(tmp_path: Path, change: str, section: str, want: str) -> None:
    """deny.toml is live: removing MIT from the allowed licences, banning tokio, or allowing no
    registry each fails `cargo deny check` (the stage runs it with the real deny.toml)."""
    import subprocess
    if shutil.which("cargo-deny") is None:
        pytest.fail("cargo-deny missing (scripts/test.sh installs it: cargo install --locked cargo-deny)")
    text = (ROOT / "deny.toml").read_text()
    assert change in text, change
    repl = {"licenses": "", "bans": 'deny = [\n  { name = "tokio", reason = "mutation test" },\n',
            "sources": "allow-registry = []"}[section]
    cfg = tmp_path / "deny.toml"
    cfg.write_text(text.replace(change, repl))
    ok = subprocess.run(["cargo", "deny", "--locked", "--config", str(ROOT / "deny.toml"), "check",
                         "--hide-inclusion-graph", section], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = subprocess.run(["cargo", "deny", "--locked", "--config", str(cfg), "check", "--hide-inclusion-graph",
                          section], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and want in bad.stderr, bad.stderr[-2000:]
