#!/usr/bin/env bash
# Builds the exporter's OCI image without a container engine or a registry
# (umoci + skopeo from Debian), as the Dockerfile's distroless image would be
# for this binary, and leaves beside it what a user needs to trust it:
#
#   target/image/oci/                          OCI image layout, tag captf-lock-exporter:<version>
#   target/image/captf-lock-exporter.oci.tar   the same image as an oci-archive, named as the chart
#                                              pulls it (<image.repository>:<appVersion>)
#   target/image/captf-lock-exporter.cdx.json  CycloneDX SBOM of the binary's crates (auditable2cdx)
#   target/image/files.txt                     every file of the image: mode, owner, size, path
#   target/image/summary.json                  digest, layers, sizes, labels, Debian packages used
#
# The image: the release binary built with `cargo auditable` (its crate list
# embedded, readable by `cargo audit bin`), exactly the shared libraries
# `ldd` names, copied from the installed Debian packages after checking them
# against dpkg's md5sums, the CA bundle, /etc/passwd and /etc/group with only
# nonroot (65532), each package's copyright file and dpkg status stanza
# (licence notice, and what lets an image scanner see the glibc it carries).
# No shell, no package manager: tools/image/check_image.py fails if one gets
# in. See docs/decisions/image.md.
#
# Usage: scripts/image.sh [--binary PATH]   (--binary: use this binary instead of building one)
# Needs: cargo-auditable and auditable2cdx (cargo install --locked), umoci, skopeo, binutils.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/target/image

BINARY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARY=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "image.sh: $*" >&2; exit 1; }
for t in umoci skopeo readelf ldd dpkg-query python3; do
  command -v "$t" >/dev/null || die "$t not found (Debian: apt-get install umoci skopeo binutils)"
done

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
LICENSES=$(sed -n 's/^license = "\(.*\)"$/\1/p' Cargo.toml | head -1)
SOURCE=$(sed -n 's/^repository = "\(.*\)"$/\1/p' Cargo.toml | head -1)
[ -n "$VERSION" ] && [ -n "$LICENSES" ] && [ -n "$SOURCE" ] || die "Cargo.toml lacks version, license or repository"
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- 2>/dev/null || REVISION="$REVISION-dirty"
# Reproducible timestamps: the commit's time unless SOURCE_DATE_EPOCH says otherwise.
EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
CREATED=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)
REPOSITORY=$(python3 -c 'import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))["image"]["repository"])' chart/values.yaml)
NAME=captf-lock-exporter
TAG="$NAME:$VERSION"

# ---- the binary (cargo auditable) and its SBOM ----
if [ -z "$BINARY" ]; then
  command -v cargo-auditable >/dev/null || die "cargo-auditable missing: cargo install --locked cargo-auditable"
  # A target directory of its own: cargo-auditable wraps rustc for the workspace crate, which
  # changes its fingerprint, so sharing target/ with `cargo build --release` (the realkube stage)
  # would rebuild the crate on every switch between the two.
  # First time: seeded from target/release when that exists (the dependencies are the same
  # compiled units; only the workspace crate is built again).
  if [ ! -d "$ROOT/target/image-build/release" ] && [ -d "$ROOT/target/release" ]; then
    mkdir -p "$ROOT/target/image-build" && cp -a "$ROOT/target/release" "$ROOT/target/image-build/"
  fi
  CARGO_TARGET_DIR=$ROOT/target/image-build cargo auditable build --release --locked --bin "$NAME"
  BINARY=$ROOT/target/image-build/release/$NAME
fi
[ -x "$BINARY" ] || die "no binary at $BINARY"
readelf -S -W "$BINARY" | grep -q '\.dep-v0' || die "$BINARY carries no .dep-v0 section (not built with cargo auditable)"

mkdir -p "$OUT"
command -v auditable2cdx >/dev/null || die "auditable2cdx missing: cargo install --locked auditable2cdx"
# The SBOM is read back from the crate list cargo-auditable embedded in the binary: exactly the
# crates compiled into it (no build-script-only crates, no dev-dependencies), the same list
# `cargo audit bin` and Trivy read from the image.
auditable2cdx "$BINARY" >"$OUT/$NAME.cdx.json.tmp" || die "auditable2cdx could not read $BINARY"
mv -f "$OUT/$NAME.cdx.json.tmp" "$OUT/$NAME.cdx.json"

# ---- the root filesystem ----
FS=$OUT/rootfs
rm -rf "$FS" && mkdir -p "$FS"
: >"$OUT/packages.txt"

owner_of() {  # the Debian package (with arch) that installed path $1
  dpkg-query -S "$1" 2>/dev/null | awk -F': ' -v p="$1" '$2 == p { print $1; exit }'
}

verify_from_package() {  # $1 path as dpkg lists it; $2 package: checks the file against dpkg's md5sums
  local rel=${1#/} sums
  sums=$(dpkg-query --control-path "$2" md5sums 2>/dev/null) || die "no md5sums for $2"
  local want have
  want=$(awk -v p="$rel" '$2 == p { print $1 }' "$sums")
  [ -n "$want" ] || die "$1 is not in $2's md5sums"
  have=$(md5sum <"$1" | cut -d' ' -f1)
  [ "$want" = "$have" ] || die "$1 differs from package $2 (md5 $have, dpkg says $want)"
}

add_package_notes() {  # $1 package: its copyright and dpkg status stanza, once
  local pkg=$1 base=${1%%:*}
  grep -qx "$pkg" "$OUT/packages.txt" && return 0
  echo "$pkg" >>"$OUT/packages.txt"
  install -D -m 0644 "/usr/share/doc/$base/copyright" "$FS/usr/share/doc/$base/copyright"
  mkdir -p "$FS/var/lib/dpkg/status.d"
  dpkg-query -s "$pkg" | grep -v '^\(Status\|Conffiles\|Config-Version\):' >"$FS/var/lib/dpkg/status.d/$base"
  chmod 0644 "$FS/var/lib/dpkg/status.d/$base"
}

add_file() {  # $1 path the binary names (may be a symlink, as /lib64/ld-linux-x86-64.so.2 is)
  local path=$1 pkg
  pkg=$(owner_of "$path")
  [ -n "$pkg" ] || die "$path belongs to no Debian package"
  if [ -L "$path" ]; then
    local target
    target=$(readlink "$path")
    mkdir -p "$FS$(dirname "$path")"
    ln -sfn "$target" "$FS$path"
    case "$target" in /*) ;; *) target="$(dirname "$path")/$target" ;; esac
    add_file "$target"
    return
  fi
  verify_from_package "$path" "$pkg"
  install -D -m "$( [ -x "$path" ] && echo 0755 || echo 0644 )" "$path" "$FS$path"
  add_package_notes "$pkg"
}

# ldd lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)";
# linux-vdso is the kernel's. A library ldd cannot find stops the build.
LDD=$(ldd "$BINARY") || die "ldd $BINARY failed"
if grep -q 'not found' <<<"$LDD"; then die "ldd: $(grep 'not found' <<<"$LDD")"; fi
LIBS=$(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$LDD" | sort -u)
[ -n "$LIBS" ] || die "ldd named no library: a static binary needs no base; the image expects glibc"
for lib in $LIBS; do add_file "$lib"; done

install -D -m 0755 "$BINARY" "$FS/usr/local/bin/$NAME"
CA=/etc/ssl/certs/ca-certificates.crt
[ -s "$CA" ] || die "$CA missing (apt-get install ca-certificates)"
install -D -m 0644 "$CA" "$FS$CA"
add_package_notes "$(dpkg-query -W -f='${Package}' ca-certificates)"
mkdir -p "$FS/etc"
echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$FS/etc/passwd"
echo 'nonroot:x:65532:' >"$FS/etc/group"
chmod 0644 "$FS/etc/passwd" "$FS/etc/group"
find "$FS" -type d -exec chmod 0755 {} +

# ---- the image (one layer: tools/image/layer.py writes it, root-owned, at the commit's time; umoci
# stores it and sets the config as the Dockerfile says) ----
LAYOUT=$OUT/oci
rm -rf "$LAYOUT"
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$TAG"
python3 "$ROOT/tools/image/layer.py" "$FS" "$EPOCH" "$OUT/layer.tar"
umoci raw add-layer --image "$LAYOUT:$TAG" --history.created "$CREATED" \
  --history.created_by "scripts/image.sh: binary, ldd's libraries, CA bundle, nonroot user" "$OUT/layer.tar"
rm -f "$OUT/layer.tar"
labels=(
  "org.opencontainers.image.source=$SOURCE"
  "org.opencontainers.image.version=$VERSION"
  "org.opencontainers.image.revision=$REVISION"
  "org.opencontainers.image.licenses=$LICENSES"
  "org.opencontainers.image.title=$NAME"
)
cfg=(--image "$LAYOUT:$TAG" --created "$CREATED" --history.created "$CREATED"
  --history.created_by "scripts/image.sh: user, entrypoint, port, labels"
  --os linux --architecture "$(dpkg --print-architecture)"
  --config.user 65532:65532 --config.entrypoint "/usr/local/bin/$NAME" --config.exposedports 9820/tcp
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  --config.env SSL_CERT_FILE=$CA --clear config.cmd)
for l in "${labels[@]}"; do cfg+=(--config.label "$l" --manifest.annotation "$l"); done
umoci config "${cfg[@]}"
umoci gc --layout "$LAYOUT"

ARCHIVE=$OUT/$NAME.oci.tar
rm -f "$ARCHIVE"
skopeo copy --quiet "oci:$LAYOUT:$TAG" "oci-archive:$ARCHIVE:$REPOSITORY:$VERSION"

rm -rf "$FS"
# Records files.txt and summary.json; fails on a shell, a package manager, any file not needed,
# or a disagreement with the Dockerfile or the chart.
python3 "$ROOT/tools/image/check_image.py" --dir "$OUT" --record
echo "image.sh: $TAG in $LAYOUT, $ARCHIVE ($REPOSITORY:$VERSION), SBOM $OUT/$NAME.cdx.json"
