#!/usr/bin/env bash
# Installs what groupsgd needs from Debian's archive. Idempotent: it only calls apt
# when a package is missing. Needs root (or sudo) for apt.
set -euo pipefail

# fortunes: the text of examples/pytorch/train_char_lm.py (/usr/share/games/fortunes).
packages=(
  build-essential cmake pkg-config python3
  libzmq3-dev cppzmq-dev capnproto libcapnp-dev
  libboost-dev nlohmann-json3-dev doctest-dev libcli11-dev
  libopenblas-dev zlib1g-dev
  dataset-fashion-mnist
  fortunes
)
# The network-fault tests (tests/netns): ip netns / veth / tc tbf, nft for drops; jq and
# bc read the control socket's JSON and do the timing arithmetic in those scripts.
packages+=(iproute2 nftables jq bc)
# The slurm test (tests/slurm): a throwaway Slurm cluster (slurmctld, slurmd) with munge.
packages+=(slurm-wlm munge)
# The dashboard's browser test (tests/browser): headless Chromium loads the page.
packages+=(chromium)
# scripts/check-format.sh (the settings in .clang-format are for Debian's clang-format 14).
packages+=(clang-format)
# The Prometheus tests (tests/prometheus, label prometheus): promtool and prometheus,
# both in Debian's prometheus package.
packages+=(prometheus)
# The package tests (tests/package): lintian on the .deb, and systemd-nspawn to boot
# systemd in a container where the package is installed (label systemd).
packages+=(lintian systemd systemd-container)
# The Python package (python/: pybind11 binding of the worker library) and its tests and
# examples: PyTorch and torchvision from Debian, run by /usr/bin/python3.
packages+=(pybind11-dev python3-pybind11 python3-dev python3-numpy python3-torch
           python3-torchvision python3-pytest)
if [[ "${1:-}" == "--extra" ]]; then
  # Tools for benchmarks, plots, linting and fuzzing (not needed to build or test).
  packages+=(gnuplot-nox python3 shellcheck iperf3 clang libclang-rt-14-dev)
  # The README's architecture picture (docs/img/architecture.dot -> .svg, .png).
  packages+=(graphviz)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
