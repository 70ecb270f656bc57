# Shared set-up for scripts/demo, scripts/test and scripts/bench. Every step checks before it
# installs, so running it again costs seconds; none assumes anything is already there.

KILN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$KILN_ROOT/.venv"
# Where cargo puts what it builds: CARGO_TARGET_DIR when set, as cargo itself reads it.
KILN_BUILD_DIR="${CARGO_TARGET_DIR:-$KILN_ROOT/target}"

# The toolchain our GPU hosts run, from deploy/toolchain-requirements.txt (Triton 3.6.0 and CUDA
# 13.0, with nvvm and crt pinned to nvcc's release), one NAME==VERSION per element.
mapfile -t PY_PACKAGES < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$KILN_ROOT/deploy/toolchain-requirements.txt")

# The Python client's own dependencies and test tools, pinned: grpcio and protobuf at the oldest
# versions client/python supports (its stubs come from grpcio-tools 1.84.0, whose gencode needs
# protobuf 7.35.1), pytest with pytest-xdist (the suite's tests in two processes at once: most of
# their time is spent waiting on the processes they start), blake3 for the key vectors, and redis
# for the Triton Redis peer of the fleet-herd benchmark.
PY_CLIENT_PACKAGES=(
  grpcio==1.84.0
  protobuf==7.35.1
  pytest==9.2.0
  pytest-xdist==3.8.0
  execnet==2.1.2
  blake3==1.0.11
  redis==8.1.0
)

# The Python client's linter and type checker (configured in client/python/pyproject.toml), and
# the type stubs of its dependencies, pinned so a new release never fails a run by itself.
PY_LINT_PACKAGES=(
  ruff==0.17.5
  mypy==2.4.1
  types-protobuf==7.35.1.20260906
  types-grpcio==1.85.0.20261028
)

# torch for kiln.torch's tests with a real torch: PyPI's build, the GPU hosts' version. It runs
# on the CPU (Inductor's C++ backend), so the graph path, async and every fallback are tested
# here; its CUDA libraries come along as its dependencies (about 4.6 GB, under a minute to install).
#
# transformers: the corpus's model from a library people use (client/python/tests/corpus/hf_llama.py,
# built from its config with random weights, so nothing is downloaded at run time).
PY_TORCH_PACKAGES=(
  torch==2.11.0
  transformers==5.24.0
)

# The browser test of the status pages (tests/browser) drives Debian's chromium through its
# chromedriver with Selenium. 4.43.0: later releases need a certifi newer than PyPI mirrors may have.
PY_BROWSER_PACKAGES=(
  selenium==4.43.0
)

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

apt_updated=0
# apt-get update, once per run.
apt_update() {
  if [ "$apt_updated" = 0 ]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed"
    apt_updated=1
  fi
}

apt_install() {
  command -v apt-get >/dev/null || die "need $* but apt-get is missing; install them by hand"
  apt_update
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}

# Rust 1.88 or newer (edition 2024) with rustfmt and clippy. A machine without cargo gets the
# stable toolchain from rustup.rs under ~/.cargo; an older one is updated the same way.
ensure_rust() {
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  if ! command -v cargo >/dev/null || ! rust_new_enough; then
    command -v curl >/dev/null || apt_install curl ca-certificates
    say "installing the stable Rust toolchain with rustup"
    curl -sSf --proto '=https' --tlsv1.2 https://sh.rustup.rs | sh -s -- -y -q --profile minimal \
      --component rustfmt,clippy >/dev/null || die "rustup could not install Rust"
    export PATH="$HOME/.cargo/bin:$PATH"
    rust_new_enough || die "rustc is older than 1.88 even after rustup; run rustup update"
  fi
  for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
      command -v rustup >/dev/null || die "cargo $component is missing and there is no rustup to add it"
      rustup component add "$component" >/dev/null || die "rustup component add $component failed"
    fi
  done
}

rust_new_enough() {
  local minor
  minor="$(rustc --version 2>/dev/null | sed -n 's/^rustc 1\.\([0-9]*\)\..*/\1/p')"
  [ -n "$minor" ] && [ "$minor" -ge 88 ]
}

# redis-server and redis-cli for the fleet tests, which start their own servers on private
# sockets and ports. A policy-rc.d keeps apt from starting Redis as a system service.
ensure_redis() {
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    if [ -d /usr/sbin ] && [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt_install redis-server redis-tools
  fi
}

ensure_cc() {
  command -v cc >/dev/null || apt_install gcc libc6-dev
}

# Headless Chromium and its WebDriver from Debian's packages (never a browser download), and the
# pinned Selenium in .venv/, for the status pages' browser test.
ensure_chromium() {
  if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    apt_install chromium chromium-driver
  fi
  ensure_venv
  pip_install_pinned "the browser test's packages" "${PY_BROWSER_PACKAGES[@]}"
}

# The interpreter .venv is made from. The system's python3 comes first: kilnd runs Triton
# workers as `nobody` when it is root, and an interpreter under /root (pyenv, say) is not
# reachable by that user.
BOOTSTRAP_PYTHON=""
ensure_python() {
  if [ -x /usr/bin/python3 ]; then
    BOOTSTRAP_PYTHON=/usr/bin/python3
  else
    command -v python3 >/dev/null || apt_install python3 python3-venv python3-pip
    BOOTSTRAP_PYTHON="$(command -v python3)"
  fi
  "$BOOTSTRAP_PYTHON" -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
}

# Installs the pinned requirements (NAME==VERSION) into .venv/ when pip freeze lacks any of them.
# $1 names them in the error message.
pip_install_pinned() {
  local what="$1"
  shift
  local missing=()
  local frozen
  frozen="$("$VENV/bin/python" -m pip freeze 2>/dev/null || true)"
  for w in "$@"; do
    grep -qix "$w" <<<"$frozen" || missing+=("$w")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing pinned packages: ${missing[*]}"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" || die "pip install of $what failed"
  fi
}

# .venv/ with the pinned CUDA wheels and Triton. Exports KILN_CUDA_ROOT (the wheel's
# nvidia/cu13 tree) and KILN_PYTHON (the interpreter kilnd's Triton workers use).
ensure_venv() {
  ensure_python
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    "$BOOTSTRAP_PYTHON" -m venv "$VENV" || die "$BOOTSTRAP_PYTHON -m venv failed"
  fi
  pip_install_pinned "the pinned packages" "${PY_PACKAGES[@]}"
  KILN_CUDA_ROOT="$("$VENV/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"
  [ -f "$KILN_CUDA_ROOT/lib/libnvrtc.so.13" ] || die "NVRTC missing under $KILN_CUDA_ROOT after install"
  [ -f "$KILN_CUDA_ROOT/include/cuda_fp16.h" ] || die "CUDA headers missing under $KILN_CUDA_ROOT after install"
  "$VENV/bin/python" -c 'import triton' 2>/dev/null || die "triton does not import in $VENV"
  KILN_PYTHON="$VENV/bin/python"
  export KILN_CUDA_ROOT KILN_PYTHON
}

# `-u NAME` for each KILN_* variable and CUDA_HOME this shell exports (ensure_venv exports some),
# for `env $(kiln_env_unset) COMMAND`: what runs finds its settings as a user's shell would, from
# its config file and defaults. env then executes COMMAND, so `$!` of one started with `&` is it.
kiln_env_unset() {
  local name
  for name in $(compgen -e); do
    case "$name" in KILN_* | CUDA_HOME) printf -- '-u\n%s\n' "$name" ;; esac
  done
}

# Downloads wheels into $1 unless it holds them already (its requirements.txt lists the pins it
# was filled for): `download_wheels DIR [PACKAGE...] [-- PIP_ARGS...]`, PY_PACKAGES when no
# package is named; PIP_ARGS go to pip download (a platform, say), and without them the wheels
# are for .venv's Python on this machine.
download_wheels() {
  local dir="$1" want packages=() pip_args=()
  shift
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    packages+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  pip_args=("$@")
  [ ${#packages[@]} -gt 0 ] || packages=("${PY_PACKAGES[@]}")
  want="$(printf '%s\n' "${packages[@]}")"
  if [ "$(cat "$dir/requirements.txt" 2>/dev/null)" != "$want" ]; then
    ensure_venv
    say "pip download ${packages[*]} into $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --only-binary=:all: "${pip_args[@]}" \
      --dest "$dir" "${packages[@]}" || die "pip download of the pinned wheels failed"
    printf '%s\n' "$want" >"$dir/requirements.txt"
  fi
}

# The Python package kiln (client/python) and what its tests need, in .venv/. The package is
# installed with pip from the source tree, as a user would (a wheel build, not an editable
# install, so its kiln-torch.pth lands in site-packages), again whenever its files change.
ensure_python_client() {
  ensure_venv
  pip_install_pinned "the Python client's packages" "${PY_CLIENT_PACKAGES[@]}"
  local src="$KILN_ROOT/client/python" stamp="$VENV/.kiln-python-client.sha256" sum
  sum="$(cd "$src" && find pyproject.toml setup.py README.md src -type f -not -name '*.pyc' -not -path '*.egg-info/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ] || ! "$VENV/bin/python" -c 'import kiln' 2>/dev/null; then
    say "pip install ./client/python"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$src" || die "pip install ./client/python failed"
    rm -rf "$src/build" "$src/src/kiln.egg-info"
    printf '%s\n' "$sum" >"$stamp"
  fi
}

# torch in .venv/, for kiln.torch's tests (see PY_TORCH_PACKAGES).
ensure_torch() {
  ensure_venv
  pip_install_pinned "torch" "${PY_TORCH_PACKAGES[@]}"
  "$VENV/bin/python" -c 'import torch' 2>/dev/null || die "torch does not import in $VENV"
}

# ruff and mypy for client/python, in .venv/.
ensure_python_lint() {
  ensure_venv
  pip_install_pinned "the Python lint and type tools" "${PY_LINT_PACKAGES[@]}"
}

# Fails early, and says so, when the disk under the target directory has less than $1 GiB free: a
# build that runs out of space half-way fails with a linker's bus error that names nothing.
ensure_disk_space() {
  local need_gib="$1" target="$KILN_BUILD_DIR" free_kib
  mkdir -p "$target"
  free_kib=$(df -Pk "$target" | awk 'NR == 2 { print $4 }')
  [ "$free_kib" -ge $((need_gib * 1024 * 1024)) ] ||
    die "only $((free_kib / 1024 / 1024)) GiB free under $target; the build and tests need about $need_gib GiB (cargo clean, or set CARGO_TARGET_DIR to a bigger disk)"
}

# Builds every binary of the workspace once into the shared target directory: kilnd, kiln,
# kiln-cache, and the bench/ crate's kiln-bench and kiln-reliability.
build_binaries() {
  local profile="$1"
  say "cargo build --workspace --bins ($profile)"
  if [ "$profile" = release ]; then
    cargo build --release --workspace --bins --quiet
  else
    cargo build --workspace --bins --quiet
  fi
}
