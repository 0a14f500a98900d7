#!/usr/bin/env bash
# Build Proctor's docker sandbox image from files on this machine (no registry pull, no internet):
# Python 3 (the host's /usr/bin/python3.X and its standard library), /bin/sh and a few coreutils,
# the shared libraries `ldd` lists for them, and a sandbox user (uid/gid 65534), then `docker import` it.
#
#   scripts/sandbox-image.sh [TAG]             import as TAG (default proctor-sandbox:latest)
#   scripts/sandbox-image.sh --tar FILE        only write the root filesystem tarball to FILE
#
# The docker CLI talks to $DOCKER_HOST when it is set (the tests point it at their private daemon);
# $DOCKER picks the CLI binary (default: `docker` on PATH).
set -euo pipefail

tag="proctor-sandbox:latest"
tar_only=""
case "${1:-}" in
  --tar) tar_only="${2:?--tar needs a file name}" ;;
  -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
  "") ;;
  *) tag="$1" ;;
esac

docker_cli=${DOCKER:-docker}
if [[ -z "$tar_only" ]] && ! command -v "$docker_cli" >/dev/null; then
  echo "sandbox-image: no docker CLI ($docker_cli); install Debian's docker.io" >&2
  exit 1
fi

python=$(readlink -f /usr/bin/python3)
case "$python" in
  /usr/bin/python3.*) ;;
  *) echo "sandbox-image: need Debian's /usr/bin/python3.X, found $python" >&2; exit 1 ;;
esac
version=${python##*/}  # python3.11
stdlib=/usr/lib/$version
tools=(sh dash cat echo ls sleep head tail env true false wc sort mkdir rm cp mv tr yes id uname touch)

stage=$(mktemp -d)
chmod 755 "$stage"
trap 'rm -rf "$stage"' EXIT

# Copy a host file to the same place in the image, following symlinks (the image needs the bytes, and
# the host's merged-/usr layout is recreated below with the same top-level links).
place() {
  local source=$1 dir
  dir=$(readlink -f "$(dirname "$source")")
  mkdir -p "$stage$dir"
  cp -L --preserve=mode "$source" "$stage$dir/$(basename "$source")"
}

for top in bin lib lib64 sbin; do
  if [[ -L /$top ]]; then ln -s "$(readlink "/$top")" "$stage/$top"; fi
done

binaries=("$python")
for tool in "${tools[@]}"; do
  path=$(PATH=/usr/bin:/bin type -P "$tool" || true)
  [[ -n "$path" ]] && binaries+=("$path")
done
for binary in "${binaries[@]}"; do place "$binary"; done
ln -s "$version" "$stage/usr/bin/python3"
ln -s "$version" "$stage/usr/bin/python"

# The standard library without what sandboxed programs never need (tests, GUI, terminals, databases of the
# host, build files, installers).
mkdir -p "$stage$stdlib"
skip=(config-\* test idlelib tkinter turtledemo lib2to3 ensurepip pydoc_data distutils site-packages dist-packages
  lib-dynload/_test\* lib-dynload/xx\* lib-dynload/_ctypes_test\* lib-dynload/_curses\* lib-dynload/_dbm\*
  lib-dynload/nis\* lib-dynload/readline\* lib-dynload/ossaudiodev\*)
excludes=(--exclude='*.opt-1.pyc' --exclude='*.opt-2.pyc')
for pattern in "${skip[@]}"; do excludes+=("--exclude=./$pattern"); done
tar -C "$stdlib" -cf - "${excludes[@]}" . | tar -C "$stage$stdlib" -xf -

# Every shared library the binaries and the extension modules load, and the dynamic loader itself.
mapfile -t libraries < <(
  for object in "${binaries[@]}" "$stage$stdlib"/lib-dynload/*.so; do
    ldd "$object" 2>/dev/null | awk '/=> \// {print $3} /^[ \t]*\/[^ ]*ld-linux/ {print $1}'
  done | sort -u
)
for library in "${libraries[@]}"; do place "$library"; done

mkdir -p "$stage"/{etc,tmp,work,proc,dev,sys} "$stage/usr/sbin"
chmod 1777 "$stage/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:65534:65534:sandbox:/work:/bin/sh\n' >"$stage/etc/passwd"
printf 'root:x:0:\nsandbox:x:65534:\n' >"$stage/etc/group"
owner=()
if [[ $(id -u) -eq 0 ]]; then
  chown 65534:65534 "$stage/work"
else
  owner=(--owner=0 --group=0)  # without root, files still belong to root inside the image
fi

tarball=${tar_only:-$stage.tar}
tar -C "$stage" --numeric-owner "${owner[@]}" -cf "$tarball" .
if [[ -n "$tar_only" ]]; then
  echo "sandbox-image: wrote $tarball ($(du -h "$tarball" | cut -f1))"
  exit 0
fi
trap 'rm -rf "$stage" "$tarball"' EXIT
"$docker_cli" import \
  --change 'USER 65534:65534' \
  --change 'WORKDIR /work' \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8' \
  --change "CMD [\"/usr/bin/python3\"]" \
  "$tarball" "$tag" >/dev/null
echo "sandbox-image: imported $tag ($(du -h "$tarball" | cut -f1) root filesystem)"
