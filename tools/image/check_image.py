#!/usr/bin/env python3
"""Checks the image scripts/image.sh built, and records its file list and size.

  python3 tools/image/check_image.py [--record]     (run by scripts/image.sh and the image stage)

What it asserts (each check names what failed; docs/decisions/image.md says why):
  contents    every file is one the image needs: the binary, the ELF libraries the binary needs
              (DT_NEEDED, followed through the libraries, and its PT_INTERP loader, read from the
              image's own copies with readelf, independently of the ldd run that collected them),
              the CA bundle, /etc/passwd, /etc/group, and each included package's copyright and
              dpkg status stanza; no shell, no package manager, no other executable.
  user        /etc/passwd and /etc/group hold only nonroot 65532; config User 65532:65532.
  supply      the binary carries cargo-auditable's .dep-v0 section; the CycloneDX SBOM read from it
              names the crate and lists every crate of Cargo.lock's graph that it holds.
  dockerfile  the Dockerfile's final stage agrees: binary path and mode, USER, EXPOSE, ENTRYPOINT,
              no CMD, the label keys and their fixed values, base image Debian release = the
              packages' release, its distroless flavour ships every package the image took.
  chart       appVersion = Cargo version = the version label; image.repository:tag (tag empty =
              appVersion) is the name the oci-archive carries; the chart's port, uid and gid are
              the image's.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oci  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAME = "captf-lock-exporter"
BINARY = f"/usr/local/bin/{NAME}"
CA = "/etc/ssl/certs/ca-certificates.crt"
PASSWD = "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"
GROUP = "nonroot:x:65532:"
# Names that must never be in the image, in any directory.
FORBIDDEN = {"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "toybox",
             "apt", "apt-get", "apt-cache", "aptitude", "dpkg", "dpkg-deb", "rpm", "yum", "dnf", "microdnf",
             "apk", "pip", "pip3", "python", "python3", "perl", "su", "sudo", "env", "ldconfig"}
# Packages of gcr.io/distroless/cc-debian12 (distroless' own docs: static = base-files, netbase,
# tzdata, ca-certificates + passwd/group; base adds libc6, libssl3; cc adds libgcc-s1, libgomp1,
# libstdc++6). No image can be pulled here: this list is what the comparison relies on.
DISTROLESS_CC_DEBIAN12 = {"base-files", "netbase", "tzdata", "ca-certificates", "libc6", "libssl3",
                          "libgcc-s1", "libgomp1", "libstdc++6"}


def cargo_field(key: str) -> str:
    m = re.search(rf'^{key} = "(.*)"$', (ROOT / "Cargo.toml").read_text(), re.M)
    if not m:
        raise SystemExit(f"Cargo.toml has no {key}")
    return m.group(1)


def git_head() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


# ---- ELF facts, from the image's own copies ----

def extract(img: oci.Image, paths: list[str], into: Path) -> None:
    want = {p.lstrip("/") for p in paths}
    for layer in img.layers:
        data = img.blob(layer["digest"]).read_bytes()
        for m, tf in oci.layer_members(data, layer["mediaType"]):
            name = m.name.lstrip("./")
            if name in want and m.isreg():
                dest = into / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                f = tf.extractfile(m)
                dest.write_bytes(f.read() if f else b"")


def readelf(flag: str, path: Path) -> str:
    return subprocess.run(["readelf", flag, "-W", str(path)], capture_output=True, text=True, check=True).stdout


def resolve(img: oci.Image, path: str, depth: int = 0) -> str:
    e = img.files.get(path)
    if e is None or e.kind != "symlink" or depth > 8:
        return path
    target = e.link if e.link.startswith("/") else str(Path(path).parent / e.link)
    return resolve(img, target, depth + 1)


def needed_closure(img: oci.Image, tmp: Path) -> tuple[set[str], list[str]]:
    """Paths of the binary's loader and libraries (as the loader finds them), and problems."""
    problems: list[str] = []
    lib_dirs = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/lib", "/usr/lib",
                "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"]
    regular = [p for p, e in img.files.items() if e.kind == "file"]
    extract(img, regular, tmp)
    found: set[str] = set()
    todo = [BINARY]
    interp = re.search(r"Requesting program interpreter: (\S+)\]", readelf("-l", tmp / BINARY.lstrip("/")))
    if not interp:
        problems.append(f"{BINARY} names no program interpreter (static?)")
    else:
        found.add(interp.group(1))
        real = resolve(img, interp.group(1))
        if real != interp.group(1):
            found.add(real)
    seen = set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        real = resolve(img, p)
        if not (tmp / real.lstrip("/")).exists():
            problems.append(f"{p} is not a file in the image")
            continue
        for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf("-d", tmp / real.lstrip("/"))):
            hit = next((d + "/" + lib for d in lib_dirs if d + "/" + lib in img.files), None)
            if hit is None:
                problems.append(f"{lib} (needed by {p}) is not in the image")
                continue
            found.add(hit)
            found.add(resolve(img, hit))
            todo.append(hit)
    return found, problems


# ---- the checks ----

def check_contents(img: oci.Image, packages: list[str], tmp: Path) -> list[str]:
    bad: list[str] = []
    libs, problems = needed_closure(img, tmp)
    bad += problems
    allowed = {BINARY, CA, "/etc/passwd", "/etc/group"} | libs
    for pkg in packages:
        allowed |= {f"/usr/share/doc/{pkg}/copyright", f"/var/lib/dpkg/status.d/{pkg}"}
    parents = {str(p) for a in allowed for p in Path(a).parents}
    for path, e in sorted(img.files.items()):
        base = path.rsplit("/", 1)[-1]
        if base in FORBIDDEN and e.kind != "dir":
            bad.append(f"{path}: a shell, package manager or interpreter has no place in the image")
        if e.kind == "dir":
            if path not in parents:
                bad.append(f"{path}: a directory no needed file lives in")
            continue
        if path not in allowed:
            bad.append(f"{path}: not a file the exporter needs ({e.kind})")
        if e.kind == "file" and (e.mode & 0o111) and path not in libs | {BINARY}:
            bad.append(f"{path}: executable, and neither the binary nor its loader")
        if e.kind == "file" and e.head[:4] == b"\x7fELF" and path not in libs | {BINARY}:
            bad.append(f"{path}: an ELF file the binary does not load")
        if e.kind == "file" and e.head[:2] == b"#!":
            bad.append(f"{path}: a script")
        if (e.uid, e.gid) != (0, 0):
            bad.append(f"{path}: owned by {e.uid}:{e.gid}, not root (the process must not own its files)")
        if e.kind != "symlink" and e.mode & 0o022:
            bad.append(f"{path}: writable by group or others ({e.mode:04o})")
    for must in (BINARY, CA, "/etc/passwd", "/etc/group"):
        if must not in img.files:
            bad.append(f"{must} missing")
    return bad


def read_text(img: oci.Image, path: str, tmp: Path) -> str:
    p = tmp / path.lstrip("/")
    if not p.exists():
        extract(img, [path], tmp)
    return p.read_text() if p.exists() else ""


def check_user(img: oci.Image, tmp: Path) -> list[str]:
    bad = []
    if read_text(img, "/etc/passwd", tmp).splitlines() != [PASSWD]:
        bad.append(f"/etc/passwd is not exactly {PASSWD!r}")
    if read_text(img, "/etc/group", tmp).splitlines() != [GROUP]:
        bad.append(f"/etc/group is not exactly {GROUP!r}")
    if img.config.get("config", {}).get("User") != "65532:65532":
        bad.append(f"config User is {img.config.get('config', {}).get('User')!r}, not 65532:65532")
    return bad


def check_supply(img: oci.Image, tmp: Path, sbom: Path) -> list[str]:
    bad = []
    if ".dep-v0" not in readelf("-S", tmp / BINARY.lstrip("/")):
        bad.append(f"{BINARY} has no .dep-v0 section: not built with cargo auditable")
    try:
        doc = json.loads(sbom.read_text())
        comp = doc.get("metadata", {}).get("component", {})
        if doc.get("bomFormat") != "CycloneDX" or comp.get("name") != NAME:
            bad.append(f"{sbom} is not a CycloneDX SBOM of {NAME}")
        elif comp.get("version") != cargo_field("version"):
            bad.append(f"SBOM version {comp.get('version')} is not Cargo's {cargo_field('version')}")
        elif len(doc.get("components", [])) < 10:
            bad.append(f"SBOM lists {len(doc.get('components', []))} components: the crate graph is missing")
    except (OSError, ValueError) as e:
        bad.append(f"SBOM {sbom}: {e}")
    return bad


def dockerfile_final_stage(text: str) -> dict[str, object]:
    """The Dockerfile's stages' FROM lines and the final stage's instructions (joined lines)."""
    lines, cur = [], ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("#") and not cur:
            continue
        cur += raw.rstrip("\\").strip() + " " if raw.rstrip().endswith("\\") else raw.strip()
        if not raw.rstrip().endswith("\\"):
            if cur.strip():
                lines.append(cur.strip())
            cur = ""
    stages: list[list[str]] = []
    for ln in lines:
        if ln.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(ln)
    froms = [s[0].split()[1] for s in stages]
    final = stages[-1]
    out: dict[str, object] = {"froms": froms, "copy": [], "labels": {}, "args": {}}
    for ln in final:
        word, _, rest = ln.partition(" ")
        word = word.upper()
        if word == "COPY":
            out["copy"].append(rest.split())
        elif word in ("USER", "EXPOSE", "WORKDIR"):
            out[word.lower()] = rest.strip()
        elif word in ("ENTRYPOINT", "CMD"):
            out[word.lower()] = json.loads(rest)
        elif word == "LABEL":
            for k, v in re.findall(r'([\w.\-]+)=("(?:[^"\\]|\\.)*"|\S+)', rest):
                out["labels"][k] = v.strip('"')
        elif word == "ARG":
            k, _, v = rest.partition("=")
            out["args"][k.strip()] = v.strip().strip('"')
    return out


def check_dockerfile(img: oci.Image, packages: list[str]) -> list[str]:
    bad = []
    df = dockerfile_final_stage((ROOT / "Dockerfile").read_text())
    cfg = img.config.get("config", {})
    if df.get("user") != cfg.get("User"):
        bad.append(f"Dockerfile USER {df.get('user')} != image User {cfg.get('User')}")
    ports = {p if "/" in p else p + "/tcp" for p in str(df.get("expose", "")).split()}
    if ports != set(cfg.get("ExposedPorts", {})):
        bad.append(f"Dockerfile EXPOSE {ports} != image {set(cfg.get('ExposedPorts', {}))}")
    if df.get("entrypoint") != cfg.get("Entrypoint"):
        bad.append(f"Dockerfile ENTRYPOINT {df.get('entrypoint')} != image {cfg.get('Entrypoint')}")
    if df.get("cmd") != cfg.get("Cmd"):
        bad.append(f"Dockerfile CMD {df.get('cmd')} != image Cmd {cfg.get('Cmd')}")
    copies = [c for c in df["copy"] if any(a.startswith("--from=") for a in c)]
    dests = [c[-1] for c in copies]
    if dests != [BINARY]:
        bad.append(f"Dockerfile's final stage copies {dests}, the image has only {BINARY} on top of its base")
    if any(a.startswith("--chown") or a.startswith("--chmod") for c in copies for a in c):
        bad.append("Dockerfile COPY changes owner or mode: the image's binary is root:root 0755")
    e = img.files.get(BINARY)
    if e is not None and (e.mode, e.uid, e.gid) != (0o755, 0, 0):
        bad.append(f"image {BINARY} is {e.mode:04o} {e.uid}:{e.gid}; the Dockerfile's is 0755 0:0 (install -m 0755)")
    labels = cfg.get("Labels", {})
    img_keys = {k for k in labels if k.startswith("org.opencontainers.image.")}
    if set(df["labels"]) != img_keys:
        bad.append(f"label keys differ: Dockerfile {sorted(df['labels'])}, image {sorted(img_keys)}")
    for k, v in df["labels"].items():
        if "$" not in v and labels.get(k) != v:
            bad.append(f"label {k}: Dockerfile {v!r}, image {labels.get(k)!r}")
    if df["args"].get("VERSION") != cargo_field("version"):
        bad.append(f"Dockerfile ARG VERSION={df['args'].get('VERSION')} is not Cargo's {cargo_field('version')}")
    base = df["froms"][-1]
    m = re.search(r"distroless/(\w+)-debian(\d+)", base)
    if not m or m.group(1) != "cc":
        bad.append(f"Dockerfile base {base} is not distroless cc (glibc + libgcc_s, what the binary links)")
    else:
        host = Path("/etc/debian_version").read_text().split(".")[0]
        if m.group(2) != host:
            bad.append(f"Dockerfile base is Debian {m.group(2)}, the image's packages are Debian {host}")
        missing = sorted(set(packages) - DISTROLESS_CC_DEBIAN12)
        if missing:
            bad.append(f"the image carries packages distroless cc-debian12 lacks: {missing}")
    build = df["froms"][0]
    rm = re.search(r"rust:(\d+\.\d+)", build)
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.split()
    if rm and len(rustc) > 1 and not rustc[1].startswith(rm.group(1) + "."):
        bad.append(f"Dockerfile builds with rust {rm.group(1)}, this image with rustc {rustc[1]}")
    return bad


def check_chart(img: oci.Image, archive: Path) -> list[str]:
    bad = []
    chart = yaml.safe_load((ROOT / "chart" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())
    version = cargo_field("version")
    labels = img.config.get("config", {}).get("Labels", {})
    if str(chart["appVersion"]) != version:
        bad.append(f"Chart appVersion {chart['appVersion']} != Cargo version {version}")
    if labels.get("org.opencontainers.image.version") != version:
        bad.append(f"version label {labels.get('org.opencontainers.image.version')} != {version}")
    rev = labels.get("org.opencontainers.image.revision", "")
    if not rev.startswith(git_head()):
        bad.append(f"revision label {rev!r} is not this checkout's HEAD {git_head()}")
    for k, want in (("source", cargo_field("repository")), ("licenses", cargo_field("license"))):
        if labels.get(f"org.opencontainers.image.{k}") != want:
            bad.append(f"label org.opencontainers.image.{k} {labels.get('org.opencontainers.image.' + k)!r} != {want!r}")
    tag = values["image"]["tag"] or chart["appVersion"]
    if str(tag) != version:
        bad.append(f"chart image tag {tag} != {version}")
    want_name = f"{values['image']['repository']}:{tag}"
    with tarfile.open(archive) as tf:
        index = json.load(tf.extractfile("index.json"))
    names = [(m.get("annotations", {}).get(oci.REF_NAME), m["digest"]) for m in index["manifests"]]
    if names != [(want_name, img.manifest_digest)]:
        bad.append(f"oci-archive holds {names}, expected [({want_name!r}, {img.manifest_digest!r})]")
    if values["port"] != 9820 or f"{values['port']}/tcp" not in img.config.get("config", {}).get("ExposedPorts", {}):
        bad.append(f"chart port {values['port']} is not the image's exposed port")
    sc = values["securityContext"]
    if f"{sc['runAsUser']}:{sc['runAsGroup']}" != img.config.get("config", {}).get("User"):
        bad.append("chart runAsUser:runAsGroup is not the image's User")
    return bad


def record(img: oci.Image, packages: list[str], out: Path) -> dict[str, object]:
    (out / "files.txt").write_text(oci.file_list(img))
    pkgs = {}
    for p in packages:
        v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True, text=True).stdout
        pkgs[p] = v
    summary = {
        "tag": img.tag, "manifest_digest": img.manifest_digest,
        "layers": len(img.layers), "compressed_bytes": img.compressed_size,
        "uncompressed_bytes": img.uncompressed_size, "files": sum(1 for e in img.files.values() if e.kind != "dir"),
        "labels": img.config.get("config", {}).get("Labels", {}), "debian_packages": pkgs,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def run_checks(img: oci.Image, packages: list[str], archive: Path, sbom: Path) -> dict[str, list[str]]:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        return {
            "contents": check_contents(img, packages, tmp),
            "user": check_user(img, tmp),
            "supply": check_supply(img, tmp, sbom),
            "dockerfile": check_dockerfile(img, packages),
            "chart": check_chart(img, archive),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out = ROOT / "target" / "image"
    ap.add_argument("--dir", type=Path, default=out, help="image.sh's output directory")
    ap.add_argument("--record", action="store_true", help="write files.txt and summary.json")
    a = ap.parse_args()
    tag = f"{NAME}:{cargo_field('version')}"
    img = oci.load(a.dir / "oci", tag)
    packages = [p.split(":")[0] for p in (a.dir / "packages.txt").read_text().split()]
    if a.record:
        s = record(img, packages, a.dir)
        print(f"image {tag}: {s['layers']} layer(s), {s['compressed_bytes'] / 2**20:.1f} MiB compressed, "
              f"{s['uncompressed_bytes'] / 2**20:.1f} MiB of files ({s['files']} files), {img.manifest_digest}")
    results = run_checks(img, packages, a.dir / f"{NAME}.oci.tar", a.dir / f"{NAME}.cdx.json")
    failed = 0
    for name, bad in results.items():
        print(f"check {name}: {'ok' if not bad else 'FAILED'}")
        for b in bad:
            print(f"  - {b}")
        failed += bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
