#!/usr/bin/env bash
# Make a Python base image from this machine's own interpreter, for building docker/Dockerfile where no base
# image can be pulled (the tests do). The image stands in for python:3.11-slim: the interpreter's whole
# installation (standard library with ensurepip, so `python3 -m venv` bootstraps pip offline) at the path it
# was built for, reached as /usr/local/bin/python3 as in the official image, /bin/sh and a few coreutils for
# RUN lines, and the shared libraries they load plus those manylinux wheels expect from the base system
# (Debian's libc6, libstdc++6, libgcc-s1 and zlib1g, which its slim images have). Then `docker import`, as
# scripts/sandbox-image.sh does for the sandbox image.
#
#   docker/host-python-image.sh [TAG]          import as TAG (default proctor-python-base:host)
#   docker/host-python-image.sh --tar FILE     only write the root filesystem tarball to FILE
#
# $PYTHON picks the interpreter whose installation is copied (default: .venv/bin/python's base, else
# python3); $DOCKER the docker CLI; $DOCKER_HOST the daemon.
set -euo pipefail

tag="proctor-python-base:host"
tar_only=""
case "${1:-}" in
  --tar) tar_only="${2:?--tar needs a file name}" ;;
  -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
  "") ;;
  *) tag="$1" ;;
esac

docker_cli=${DOCKER:-docker}
if [[ -z "$tar_only" ]] && ! command -v "$docker_cli" >/dev/null; then
  echo "host-python-image: no docker CLI ($docker_cli); install Debian's docker.io" >&2
  exit 1
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-}
if [[ -z "$python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python=python3; fi
fi
# The installation itself (a venv's base), its version and its interpreter binary.
read -r prefix version < <("$python" -c 'import sys; print(sys.base_prefix, "%d.%d" % sys.version_info[:2])')
interpreter="$prefix/bin/python$version"
stdlib="$prefix/lib/python$version"
if [[ ! -x "$interpreter" || ! -f "$stdlib/ensurepip/__init__.py" ]]; then
  echo "host-python-image: $prefix is not a whole Python installation (need bin/python$version and ensurepip)" >&2
  exit 1
fi
tools=(sh dash cat echo ls sleep head tail env true false wc sort mkdir rm cp mv ln chmod tr id uname touch test)

stage=$(mktemp -d)
chmod 755 "$stage"
trap 'rm -rf "$stage"' EXIT

# Copy a host file to the same place in the image, following symlinks (the image needs the bytes; the
# host's merged-/usr layout is recreated below with the same top-level links).
place() {
  local source=$1 dir
  dir=$(readlink -f "$(dirname "$source")")
  mkdir -p "$stage$dir"
  cp -L --preserve=mode "$source" "$stage$dir/$(basename "$source")"
}

for top in bin lib lib64 sbin; do
  if [[ -L /$top ]]; then ln -s "$(readlink "/$top")" "$stage/$top"; fi
done
mkdir -p "$stage/usr/bin" "$stage/usr/local/bin"

binaries=()
for tool in "${tools[@]}"; do
  path=$(PATH=/usr/bin:/bin type -P "$tool" || true)
  [[ -n "$path" ]] && binaries+=("$path")
done
for binary in "${binaries[@]}"; do place "$binary"; done

# The installation without what a service never needs: its own site-packages (the image's venv brings the
# packages), the test suite, GUI and IDE modules, static libraries, headers and manuals.
mkdir -p "$stage$prefix"
excludes=(--exclude='*.a' --exclude='__pycache__' --exclude="./include" --exclude="./share"
  --exclude="./lib/python$version/site-packages/*" --exclude="./lib/python$version/test"
  --exclude="./lib/python$version/idlelib" --exclude="./lib/python$version/tkinter"
  --exclude="./lib/python$version/turtledemo" --exclude="./lib/python$version/lib2to3/tests"
  --exclude="./lib/python$version/lib-dynload/_tkinter*" --exclude="./lib/pkgconfig")
tar -C "$prefix" -cf - "${excludes[@]}" . | tar -C "$stage$prefix" -xf -
for name in python3 python "python$version"; do ln -s "$interpreter" "$stage/usr/local/bin/$name"; done

# Every shared library the binaries, the interpreter and its extension modules load, the dynamic loader, and
# the base-system libraries manylinux wheels link against without bundling.
mapfile -t libraries < <(
  for object in "${binaries[@]}" "$interpreter" "$prefix"/lib/libpython*.so* "$stdlib"/lib-dynload/*.so; do
    ldd "$object" 2>/dev/null | awk '/=> \// {print $3} /^[ \t]*\/[^ ]*ld-linux/ {print $1}'
  done | sort -u
)
for library in "${libraries[@]}"; do place "$library"; done
# The base system's C and C++ runtime whole, as every Debian image has it (libc6's librt, libdl, libresolv ...
# are loaded by wheels, not by the interpreter): the shared objects of these Debian packages.
for package in libc6 libstdc++6 libgcc-s1 zlib1g; do
  mapfile -t objects < <(dpkg -L "$package:$(dpkg --print-architecture)" 2>/dev/null || dpkg -L "$package")
  for object in "${objects[@]}"; do
    [[ -f "$object" && "$object" =~ \.so(\.[0-9]+)*$ ]] && place "$object"
  done
done
# The prefix's own copies (libpython) are reached through the interpreter's RUNPATH, already in place.

mkdir -p "$stage"/{etc,tmp,root,proc,dev,sys,var/tmp}
chmod 1777 "$stage/tmp" "$stage/var/tmp"
chmod 700 "$stage/root"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$stage/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$stage/etc/group"

tarball=${tar_only:-$stage.tar}
owner=()
[[ $(id -u) -eq 0 ]] || owner=(--owner=0 --group=0)  # without root, files still belong to root in the image
tar -C "$stage" --numeric-owner "${owner[@]}" -cf "$tarball" .
if [[ -n "$tar_only" ]]; then
  echo "host-python-image: wrote $tarball ($(du -h "$tarball" | cut -f1))"
  exit 0
fi
trap 'rm -rf "$stage" "$tarball"' EXIT
"$docker_cli" import \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$tarball" "$tag" >/dev/null
echo "host-python-image: imported $tag (Python $version from $prefix; $(du -h "$tarball" | cut -f1) root filesystem)"
