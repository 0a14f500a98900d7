# The service image plus every toolchain the sandboxes run: the image to deploy where the `code`, `verilog`
# and tool-environment verifiers run programs. The nsjail backend binds this container's /usr read-only into
# each jail and calls the toolchains by their absolute /usr/bin paths (proctor/sandboxes/languages.py), so
# they are Debian packages of the same release as the service image's base (bookworm). The list is
# scripts/apt-packages.txt's toolchain part; tests/test_docker_images.py keeps the two in step.
#
#   docker build -f docker/toolchains.Dockerfile --build-arg SERVICE_IMAGE=proctor:latest \
#       -t proctor-toolchains:latest docker/
# (`make images` builds docker/Dockerfile first, then this.)
ARG SERVICE_IMAGE=proctor:latest
FROM ${SERVICE_IMAGE}
# python3 here is Debian's /usr/bin/python3, the one sandboxed Python programs run with; the service keeps its
# own interpreter and venv under /usr/local and /opt/proctor.
# Slim images drop manual pages, and openjdk's postinst still links java.1.gz there: the folder must exist.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 \
        gcc \
        g++ \
        libc6-dev \
        openjdk-17-jdk-headless \
        nodejs \
        golang-go \
        rustc \
        iverilog \
        yosys \
    && rm -rf /var/lib/apt/lists/*
# Fail the build, not the first request, when a binary the executors call by its absolute path is missing.
RUN set -e; \
    for tool in python3 gcc g++ cc javac java node go rustc iverilog vvp yosys; do \
        test -x /usr/bin/$tool || { echo "missing toolchain: /usr/bin/$tool" >&2; exit 1; }; \
    done
