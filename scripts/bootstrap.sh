#!/usr/bin/env bash
# Install what rpcscope needs on a Debian 12 machine, idempotently:
# Debian packages (only those missing), kernel tracing filesystems, and the
# project venv with the rpcscope package and its pinned dependencies.
# Run as root (CI is root); re-running changes nothing that is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential clang clang-format llvm libclang-rt-14-dev pkg-config
  lttng-tools liblttng-ust-dev babeltrace2 python3-bt2 libbabeltrace2-dev linux-perf valgrind
  python3-venv python3-dev sockperf
  chromium
  openssh-server openssh-client openssh-sftp-server iproute2 nftables procps psmisc
  util-linux git tar zstd python3-apt
  libtirpc-dev rpcsvc-proto rpcbind protobuf-compiler libprotobuf-dev protobuf-compiler-grpc libgrpc++-dev
  qemu-system-x86 busybox-static kmod patch
)

if [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap: must run as root to install packages and mount tracefs (try: sudo make bootstrap)" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "bootstrap: Debian packages already installed"
fi

# Kernel tracepoints through perf need tracefs (and debugfs for older tools).
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || \
  echo "bootstrap: warning: cannot mount tracefs; kernel tracing will be unavailable" >&2
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug || \
  echo "bootstrap: warning: cannot mount debugfs" >&2

# The venv sees system site-packages so that bt2 (python3-bt2, not on PyPI) imports.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import bt2' 2>/dev/null; then
  rm -rf .venv
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade 'pip==24.3.1'
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
.venv/bin/python -c 'import bt2, rpcscope; print("bootstrap: venv ready:", rpcscope.__name__, "with bt2", bt2.__version__)'
