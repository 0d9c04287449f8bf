# shellcheck shell=bash
# Sourced by scripts/lib/deps.sh: a newer libsodium than Debian 12's, built once per
# machine from Debian's own source tarball, for the encryption layer (docs/encryption.md).
#
#   remora_sodium_setup
#
# Debian 12 ships libsodium 1.0.18, whose AES-256-GCM seals about 1.5 GB/s per core here
# and which has no AEGIS. 1.0.22 seals AES-256-GCM about twice as fast and adds AEGIS-256
# (bench/results/encryption.md). This builds 1.0.22 as a static, position-independent
# archive into a cache outside the checkout (REMORA_SODIUM_CACHE, default
# ~/.cache/remora/libsodium-1.0.22), verified by its SHA-256, and puts that folder first
# on CMAKE_PREFIX_PATH, where every CMake configure of the project (the presets, the
# Python package, the PyTorch backend) finds it before the system's. Nothing depends on
# it: where the tarball cannot be had (offline, or Debian's pool has moved on), or with
# REMORA_SODIUM=system, the build uses Debian's libsodium-dev and the library says
# "built without AEGIS" (remora doctor) — AES-256-GCM and ChaCha20-Poly1305 still work.
#
# Environment: REMORA_SODIUM=system|bundled (default bundled), REMORA_SODIUM_CACHE,
# REMORA_SODIUM_TARBALL (a local copy of the tarball, for machines without the network).

REMORA_SODIUM_VERSION=1.0.22
REMORA_SODIUM_SHA256=5838bb0c3da6148c24ebe531d1ed1297de9a87aea77d426bcd99f289e681631c
REMORA_SODIUM_URLS=(
  "http://deb.debian.org/debian/pool/main/libs/libsodium/libsodium_${REMORA_SODIUM_VERSION}.orig.tar.gz"
)

remora_sodium_prefix() {
  printf '%s\n' "${REMORA_SODIUM_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/remora/libsodium-${REMORA_SODIUM_VERSION}}"
}

# Builds the archive into the cache unless it is there; prints nothing, returns 1 on failure.
remora_sodium_build() {
  local prefix=$1 work tarball url
  work=$(mktemp -d) || return 1
  tarball=${work}/libsodium.tar.gz
  if [[ -n ${REMORA_SODIUM_TARBALL:-} ]]; then
    cp "${REMORA_SODIUM_TARBALL}" "${tarball}" || { rm -rf "${work}"; return 1; }
  else
    for url in "${REMORA_SODIUM_URLS[@]}"; do
      if curl -fsSL --max-time 120 -o "${tarball}" "${url}" 2>/dev/null; then break; fi
      rm -f "${tarball}"
    done
  fi
  if [[ ! -f ${tarball} ]] || ! sha256sum "${tarball}" | grep -q "^${REMORA_SODIUM_SHA256} "; then
    remora_log "libsodium ${REMORA_SODIUM_VERSION}: no tarball with SHA-256 ${REMORA_SODIUM_SHA256:0:16}…"
    rm -rf "${work}"
    return 1
  fi
  remora_log "building libsodium ${REMORA_SODIUM_VERSION} into ${prefix} (once; under a minute)"
  rm -rf "${prefix}"
  if ! (cd "${work}" && tar xzf libsodium.tar.gz && cd libsodium-*/ &&
    ./configure --quiet --prefix="${prefix}" --disable-shared --enable-static --with-pic &&
    make -s -j"$(nproc)" && make -s install) >"${work}/build.log" 2>&1; then
    remora_log "libsodium ${REMORA_SODIUM_VERSION} failed to build; the end of its log:"
    tail -n 20 "${work}/build.log" >&2
    rm -rf "${work}" "${prefix}"
    return 1
  fi
  rm -rf "${work}"
  touch "${prefix}/.complete"
}

remora_sodium_setup() {
  if [[ ${REMORA_SODIUM:-bundled} == system ]]; then
    remora_log "REMORA_SODIUM=system: Debian's libsodium (no AEGIS)"
    return 0
  fi
  local prefix
  prefix=$(remora_sodium_prefix)
  if [[ ! -f ${prefix}/.complete ]] && ! remora_sodium_build "${prefix}"; then
    remora_log "going on with Debian's libsodium 1.0.18: encryption works, without AEGIS and at about half the AES-256-GCM rate"
    return 0
  fi
  case ":${CMAKE_PREFIX_PATH:-}:" in
    *":${prefix}:"*) ;;
    *) export CMAKE_PREFIX_PATH="${prefix}${CMAKE_PREFIX_PATH:+:${CMAKE_PREFIX_PATH}}" ;;
  esac
  remora_log "libsodium ${REMORA_SODIUM_VERSION} from ${prefix}"
}
