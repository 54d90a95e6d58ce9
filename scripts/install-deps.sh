#!/bin/sh
# SPDX-License-Identifier: MIT
# install-deps.sh - install what kvmem needs to build and test, from apt
#
# Checks each Debian package and installs only the missing ones. Prints
# nothing when everything is there. Needs root or sudo to install; fails
# with the list of packages otherwise.
set -eu

PKGS="build-essential pkg-config check liburing-dev libsystemd-dev clang libclang-rt-dev python3 python3-numpy python3-torch python3-venv python3-setuptools python3-wheel python3-build redis-server redis-tools libhiredis-dev"

missing=
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing"
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-deps: apt-get not found; install by hand:$missing" >&2
	exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
	SUDO=
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	SUDO="sudo -n"
else
	echo "install-deps: need root (or password-less sudo) to install:$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# $missing is a word list on purpose.
# shellcheck disable=SC2086
if ! $SUDO apt-get install -y -q --no-install-recommends $missing; then
	echo "install-deps: retrying after apt-get update" >&2
	$SUDO apt-get update -q
	$SUDO apt-get install -y -q --no-install-recommends $missing || {
		echo "install-deps: apt-get could not install:$missing" >&2
		exit 1
	}
fi
