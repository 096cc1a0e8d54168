# Sourced by tools/kube/build.sh and tools/realtools/build.sh: one Go binary built into the
# version-keyed cache "$cache" (set by the caller) under a lock, so two runs never build it twice
# and a killed build never leaves a half-written binary under the final name. Each build's
# `/usr/bin/time -v` report is kept next to the binary as <name>-<version>.build.txt.

timed() { # timed REPORT cmd... : run cmd under /usr/bin/time -v when there is one
  if [ -x /usr/bin/time ]; then /usr/bin/time -v -o "$1" "${@:2}"; else "${@:2}"; fi
}

go_build_cached() { # go_build_cached NAME VERSION MODULE_DIR PACKAGE LDFLAGS ; prints the path
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=$5 out
  out="$cache/$name-$version"
  exec 9>"$out.lock"
  flock 9
  if [ ! -x "$out" ]; then
    echo "build.sh: building $name $version into $out" >&2
    local start=$SECONDS
    (cd "$dir" && timed "$out.build.txt.tmp" go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg")
    mv "$out.tmp" "$out"
    [ -f "$out.build.txt.tmp" ] && mv "$out.build.txt.tmp" "$out.build.txt"
    echo "build.sh: built $name $version in $((SECONDS - start)) s" >&2
  fi
  flock -u 9
  exec 9>&-
  echo "$out"
}
