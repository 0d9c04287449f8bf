#!/usr/bin/env bash
# check_install.sh <build-dir> <source-dir> <scratch-dir>
#
# Installs the remora build in <build-dir> into <scratch-dir>/prefix, then builds and
# runs tests/install/consumer/main.cc three ways against that prefix only:
#   1. CMake find_package(remora) + remora::remora          (shared)
#   2. CMake find_package(remora) + remora::remora_static   (static)
#   3. g++ with `pkg-config --cflags --libs remora`         (shared), and the same with
#      `pkg-config --static` and the archive picked explicitly (static)
# The shared find_package build also builds and runs outside_client.cc, which uses the
# package as a user would: every size class, every refusal, bounded waits.
# Any failing step stops the script with a message saying which step failed.
#
# Environment (set by tests/install/CMakeLists.txt, all optional):
#   REMORA_CONSUMER_CXX        compiler for the consumer (default: c++)
#   REMORA_CONSUMER_FLAGS      extra compile+link flags (the sanitizer flags in asan builds)
#   REMORA_CONSUMER_GENERATOR  CMake generator for the consumer (default: CMake's)
#   REMORA_INSTALL_CONFIG      configuration to install (multi-config generators)
#   REMORA_INSTALL_LIBDIR      CMAKE_INSTALL_LIBDIR of the build (default: lib)
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 <build-dir> <source-dir> <scratch-dir>" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
scratch=$3

step="setup"
on_exit() {
  local rc=$?
  if [[ ${rc} -ne 0 ]]; then
    echo "check_install: FAILED at step: ${step} (exit ${rc})" >&2
  fi
}
trap on_exit EXIT

run_step() {  # run_step <description> <command...>
  step=$1
  shift
  echo "=== ${step}"
  echo "+ $*"
  "$@"
}

cxx=${REMORA_CONSUMER_CXX:-c++}
flags=${REMORA_CONSUMER_FLAGS:-}
libdir_rel=${REMORA_INSTALL_LIBDIR:-lib}
if [[ $libdir_rel == /* ]]; then
  echo "check_install: CMAKE_INSTALL_LIBDIR is absolute (${libdir_rel}); cannot install into a scratch prefix" >&2
  exit 1
fi
config_args=()
if [[ -n ${REMORA_INSTALL_CONFIG:-} ]]; then
  config_args=(--config "${REMORA_INSTALL_CONFIG}")
fi
generator_args=()
if [[ -n ${REMORA_CONSUMER_GENERATOR:-} ]]; then
  generator_args=(-G "${REMORA_CONSUMER_GENERATOR}")
fi

rm -rf "${scratch}"
mkdir -p "${scratch}"
scratch=$(cd "${scratch}" && pwd)
prefix=${scratch}/prefix
libdir=${prefix}/${libdir_rel}

# 0. Install.
run_step "cmake --install" cmake --install "${build_dir}" --prefix "${prefix}" "${config_args[@]}"

step="check installed files"
echo "=== ${step}"
expect_file() {
  if [[ ! -e $1 ]]; then
    echo "check_install: missing after install: $1" >&2
    exit 1
  fi
}
expect_file "${prefix}/include/remora/remora.h"
expect_file "${libdir}/libremora.a"
expect_file "${libdir}/libremora.so"
expect_file "${libdir}/cmake/remora/remoraConfig.cmake"
expect_file "${libdir}/cmake/remora/remoraConfigVersion.cmake"
expect_file "${libdir}/cmake/remora/remoraTargets.cmake"
expect_file "${libdir}/pkgconfig/remora.pc"
# The NCCL net plugin, where the build made it (REMORA_BUILD_NCCL_PLUGIN, docs/nccl.md).
if [[ -e ${build_dir}/plugin/nccl/libnccl-net-remora.so ]]; then
  expect_file "${libdir}/libnccl-net-remora.so"
fi
# The NIXL backend plugin, alone in its folder (a NIXL_PLUGIN_DIR; docs/nixl.md).
if [[ -e ${build_dir}/plugin/nixl/libplugin_REMORA.so ]]; then
  expect_file "${libdir}/remora/nixl/libplugin_REMORA.so"
  if [[ $(find "${libdir}/remora/nixl" -mindepth 1 | wc -l) != 1 ]]; then
    echo "check_install: ${libdir}/remora/nixl holds more than the plugin" >&2
    exit 1
  fi
fi
# libremora.so must be a link to the versioned file, whose soname is libremora.so.<major>.
soname=$(readelf -d "${libdir}/libremora.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [[ -z $soname || ! -L ${libdir}/libremora.so || ! -e ${libdir}/${soname} ]]; then
  echo "check_install: libremora.so is not a link, or its soname '${soname}' is not installed" >&2
  ls -l "${libdir}" >&2
  exit 1
fi
# Only public headers are installed, and nothing from src/.
if find "${prefix}/include" -type f ! -path "${prefix}/include/remora/*.h" | grep .; then
  echo "check_install: unexpected files under include/ (above)" >&2
  exit 1
fi
echo "installed: $(cd "${prefix}" && find . -type f -o -type l | sort | tr '\n' ' ')"

needed_libs() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
expect_linkage() {  # expect_linkage <binary> shared|static
  step="linkage of $1 ($2)"
  echo "=== ${step}"
  local needed
  needed=$(needed_libs "$1")
  if [[ $2 == shared ]] && ! grep -qx "${soname}" <<<"${needed}"; then
    echo "check_install: $1 should need ${soname}; it needs: ${needed//$'\n'/ }" >&2
    exit 1
  fi
  if [[ $2 == static ]] && grep -q '^libremora\.so' <<<"${needed}"; then
    echo "check_install: $1 should not need libremora.so; it needs: ${needed//$'\n'/ }" >&2
    exit 1
  fi
}
run_consumer() {  # run_consumer <binary>
  local out
  step="run $1"
  echo "=== ${step}"
  # LD_LIBRARY_PATH only for the pkg-config builds, which carry no RPATH.
  out=$(LD_LIBRARY_PATH="${libdir}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" "$1")
  echo "${out}"
  if ! grep -q 'timeout=timeout' <<<"${out}"; then
    echo "check_install: unexpected output from $1" >&2
    exit 1
  fi
}

# 1 and 2. find_package, shared and static.
for kind in shared static; do
  static=OFF
  [[ $kind == static ]] && static=ON
  bdir=${scratch}/consumer-${kind}
  # The package registry is off so only the scratch prefix can provide remora.
  run_step "configure consumer (${kind})" \
    cmake -S "${source_dir}/tests/install/consumer" -B "${bdir}" "${generator_args[@]}" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER="${cxx}" \
      -DCMAKE_CXX_FLAGS="${flags}" \
      -DCMAKE_EXE_LINKER_FLAGS="${flags}" \
      -DCMAKE_PREFIX_PATH="${prefix}" \
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
      -DREMORA_CONSUMER_STATIC="${static}"
  step="consumer (${kind}) found remora in the scratch prefix"
  found=$(sed -n 's/^remora_DIR:PATH=//p' "${bdir}/CMakeCache.txt")
  if [[ $found != "${prefix}"/* ]]; then
    echo "check_install: consumer found remora in '${found}', not under ${prefix}" >&2
    exit 1
  fi
  run_step "build consumer (${kind})" cmake --build "${bdir}" -j 1
  expect_linkage "${bdir}/consumer" "${kind}"
  run_consumer "${bdir}/consumer"
  if [[ $kind == shared ]]; then
    # Once: every size class and every refusal, as a user of the package would.
    # (Without this script's own REMORA_CONSUMER_* settings, which the library would
    # warn about as unknown REMORA_* variables.)
    run_step "run the outside client" env -u REMORA_CONSUMER_CXX -u REMORA_CONSUMER_FLAGS \
      -u REMORA_CONSUMER_GENERATOR -u REMORA_INSTALL_CONFIG -u REMORA_INSTALL_LIBDIR "${bdir}/outside_client"
  fi
done

# 3. pkg-config, shared and static.
export PKG_CONFIG_PATH="${libdir}/pkgconfig"
run_step "pkg-config --validate" pkg-config --validate remora
step="pkg-config flags"
version=$(pkg-config --modversion remora)
cflags=$(pkg-config --cflags remora)
libs=$(pkg-config --libs remora)
static_libs=$(pkg-config --static --libs remora)
echo "=== ${step}: version=${version} cflags=[${cflags}] libs=[${libs}] static=[${static_libs}]"
if [[ " ${cflags} " != *" -I${prefix}/include "* ]]; then
  echo "check_install: pkg-config --cflags does not point into the scratch prefix" >&2
  exit 1
fi
# shellcheck disable=SC2086  # flags are word lists by design
run_step "compile with pkg-config (shared)" \
  "${cxx}" -std=c++20 ${flags} -DREMORA_EXPECTED_VERSION="\"${version}\"" ${cflags} \
    "${source_dir}/tests/install/consumer/main.cc" -o "${scratch}/consumer-pc-shared" ${libs}
expect_linkage "${scratch}/consumer-pc-shared" shared
run_consumer "${scratch}/consumer-pc-shared"

# Static: the same --static flags, with -lremora pinned to the archive (a plain -lremora
# would pick the .so that sits beside it). This checks that Libs.private is sufficient.
# shellcheck disable=SC2001  # needs word boundaries, which ${//} cannot express
static_libs_pinned=$(sed 's/\(^\| \)-lremora\( \|$\)/\1-l:libremora.a\2/' <<<"${static_libs}")
# shellcheck disable=SC2086
run_step "compile with pkg-config --static" \
  "${cxx}" -std=c++20 ${flags} -DREMORA_EXPECTED_VERSION="\"${version}\"" ${cflags} \
    "${source_dir}/tests/install/consumer/main.cc" -o "${scratch}/consumer-pc-static" ${static_libs_pinned}
expect_linkage "${scratch}/consumer-pc-static" static
run_consumer "${scratch}/consumer-pc-static"

step="done"
echo "check_install: OK (cmake shared, cmake static, pkg-config shared, pkg-config static)"
