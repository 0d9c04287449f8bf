# shellcheck shell=bash
# scripts/lib/kernel_lab.sh — the kernel lab: remora's test programs run inside a Debian
# kernel booted by QEMU under software emulation (TCG), so that what this machine's kernel
# refuses (udmabuf, DMA-BUF heaps, devmem binds, io_uring zcrx's device-less mode) is tried
# against the real kernel code. Used by scripts/kernel_lab.sh and the lab step of
# scripts/test.sh.
#
# Sourced; defines:
#   remora_lab_host_tools         installs qemu-system-x86, kmod and xz-utils with apt-get
#                                 where missing (as scripts/lib/deps.sh does), or says why not
#   remora_lab_fetch <suite>      the newest linux-image-<flavour> of that Debian suite and its
#                                 modules, and busybox-static, downloaded by package name with
#                                 apt's own tools into the cache, unpacked there; prints the
#                                 kernel tree's path. apt runs with a private sources list,
#                                 package lists and status file under the cache: the host's
#                                 apt configuration is not touched.
#   remora_lab_initramfs <tree> <out> <binary>...   a gzip'd cpio with busybox, the binaries
#                                 (at their own absolute paths, so paths compiled into them
#                                 hold) and every shared library they load, the modules the
#                                 tests need with modprobe's files, and /init (below); sets
#                                 REMORA_LAB_LOADED_MODULES to the modules /init loads
#   remora_lab_boot <tree> <initramfs> <console log>   boots it, with a hard time limit
#   remora_lab_results <console log>   the result lines, one per test: "<name> <rc> <seconds>"
#
# Each test is a line of REMORA_LAB_TESTS: "<name> <command...>". /init runs them in order
# and prints, per test:
#   REMORA-LAB-BEGIN <name>
#   ... the test's output ...
#   REMORA-LAB-RESULT <name> rc=<exit status> seconds=<s>
# then REMORA-LAB-DONE and powers the machine off.
#
# Environment:
#   REMORA_LAB_CACHE    downloads and unpacked kernels (default ~/.cache/remora/kernel-lab)
#   REMORA_LAB_FLAVOUR  the kernel flavour (default amd64)
#   REMORA_LAB_MODULES  modules loaded before the tests when the kernel has them as modules
#                       (default: udmabuf veth tls gcm; built-in ones are skipped)
#   REMORA_LAB_TIMEOUT  seconds the whole boot may take, tests included (default 900)
#   REMORA_LAB_TEST_TIMEOUT  seconds one test may take in the guest (default 600; then it
#                       is killed and its result line says rc=143)
#   REMORA_LAB_MEMORY   guest memory (default 2G); REMORA_LAB_CPUS guest CPUs (default 2)
#   REMORA_MIRROR       the Debian mirror (default http://deb.debian.org/debian)

REMORA_LAB_CACHE=${REMORA_LAB_CACHE:-${HOME}/.cache/remora/kernel-lab}
REMORA_LAB_FLAVOUR=${REMORA_LAB_FLAVOUR:-amd64}
REMORA_LAB_MODULES=${REMORA_LAB_MODULES:-udmabuf veth tls gcm}
REMORA_LAB_TIMEOUT=${REMORA_LAB_TIMEOUT:-900}
REMORA_LAB_TEST_TIMEOUT=${REMORA_LAB_TEST_TIMEOUT:-600}
REMORA_LAB_MEMORY=${REMORA_LAB_MEMORY:-2G}
REMORA_LAB_CPUS=${REMORA_LAB_CPUS:-2}
REMORA_MIRROR=${REMORA_MIRROR:-http://deb.debian.org/debian}

remora_lab_log() { printf '[kernel-lab] %s\n' "$*" >&2; }

# remora_lab_kmod <depmod|modprobe> <args...>: kmod's tool, also where sbin is not on PATH.
remora_lab_kmod() {
  local tool=$1 dir
  shift
  for dir in "" /usr/sbin/ /sbin/; do
    if command -v "${dir}${tool}" >/dev/null 2>&1; then
      "${dir}${tool}" "$@"
      return
    fi
  done
  return 127
}

# What the host needs: QEMU, and kmod (depmod, modprobe) and xz to pick the modules out.
REMORA_LAB_HOST_PACKAGES=(qemu-system-x86 kmod xz-utils)

# remora_lab_host_missing: the packages of REMORA_LAB_HOST_PACKAGES not installed.
remora_lab_host_missing() {
  local pkg status
  for pkg in "${REMORA_LAB_HOST_PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "${pkg}" 2>/dev/null || true)
    [[ ${status} == ii* ]] || printf '%s ' "${pkg}"
  done
}

# remora_lab_host_tools: 0 when qemu-system-x86_64, depmod and xz are there (installed
# now with apt-get if need be); else prints the reason on stdout and returns 2.
remora_lab_host_tools() {
  local missing
  if command -v qemu-system-x86_64 >/dev/null 2>&1 && remora_lab_kmod depmod --version >/dev/null 2>&1 &&
    command -v xz >/dev/null 2>&1; then
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
    echo "qemu-system-x86_64, depmod or xz is missing and there is no apt-get to install them (${REMORA_LAB_HOST_PACKAGES[*]})"
    return 2
  fi
  missing=$(remora_lab_host_missing)
  if [[ ${REMORA_SKIP_APT:-0} == 1 ]]; then
    echo "${missing:-qemu-system-x86_64} missing, and REMORA_SKIP_APT=1 forbids installing it"
    return 2
  fi
  local -a sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "${missing} missing, and installing it needs root (no sudo here)"
      return 2
    fi
    sudo=(sudo)
  fi
  remora_lab_log "installing ${missing}"
  local out
  # shellcheck disable=SC2086 # one word per package
  if ! out=$("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    ${missing} 2>&1); then
    echo "apt-get install ${missing}failed: $(tail -n 2 <<<"${out}" | tr '\n' ' ')"
    return 2
  fi
  if command -v qemu-system-x86_64 >/dev/null 2>&1 && remora_lab_kmod depmod --version >/dev/null 2>&1; then
    return 0
  fi
  echo "${missing}were installed but qemu-system-x86_64 or depmod is still not found"
  return 2
}

# remora_lab_apt <suite> <apt-get|apt-cache> <args...>: apt with the suite's private
# sources list (the suite, and for a backports suite its base suite too), lists, status
# file and archive cache, all under the cache folder.
remora_lab_apt() {
  local suite=$1 tool=$2
  shift 2
  local dir=${REMORA_LAB_CACHE}/apt/${suite}
  "${tool}" -o "Dir::Etc::SourceList=${dir}/sources.list" -o "Dir::Etc::SourceParts=${dir}/empty" \
    -o "Dir::Etc::Preferences=${dir}/empty/preferences" -o "Dir::Etc::PreferencesParts=${dir}/empty" \
    -o "Dir::State::Lists=${dir}/lists" -o "Dir::State::Status=${dir}/status" \
    -o "Dir::Cache=${dir}/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root \
    -o "APT::Default-Release=${suite}" "$@"
}

# remora_lab_apt_update <suite>: the private package lists of that suite, fresh.
remora_lab_apt_update() {
  local suite=$1 dir=${REMORA_LAB_CACHE}/apt/$1 keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  mkdir -p "${dir}/lists/partial" "${dir}/cache/archives/partial" "${dir}/empty"
  : >"${dir}/status.new" && mv -f "${dir}/status.new" "${dir}/status"
  {
    echo "deb [signed-by=${keyring}] ${REMORA_MIRROR} ${suite} main"
    if [[ ${suite} == *-backports ]]; then echo "deb [signed-by=${keyring}] ${REMORA_MIRROR} ${suite%-backports} main"; fi
  } >"${dir}/sources.list"
  remora_lab_apt "${suite}" apt-get -q --error-on=any update >"${dir}/update.log" 2>&1
}

# remora_lab_candidate <suite> <package>: the version apt would take, or nothing.
remora_lab_candidate() {
  remora_lab_apt "$1" apt-cache policy "$2" 2>/dev/null | sed -n 's/^ *Candidate: *//p' | grep -v '(none)'
}

# remora_lab_kernel_package <suite>: the versioned image package the suite's
# linux-image-<flavour> depends on (e.g. linux-image-7.3.4+deb13-amd64).
remora_lab_kernel_package() {
  remora_lab_apt "$1" apt-cache depends "linux-image-${REMORA_LAB_FLAVOUR}" 2>/dev/null |
    sed -n "s/^ *Depends: *\(linux-image-[^ ]*-${REMORA_LAB_FLAVOUR}\)\$/\1/p" | head -n 1
}

# remora_lab_unpack <dir> <package>...: downloads the packages (apt-get download, by
# name) into <dir>/debs and unpacks them into <dir>/root; the .debs go afterwards.
remora_lab_unpack() {
  local suite=$1 dir=$2 deb
  shift 2
  mkdir -p "${dir}/debs" "${dir}/root"
  (cd "${dir}/debs" && remora_lab_apt "${suite}" apt-get -q download "$@") >"${dir}/download.log" 2>&1 || {
    tail -n 3 "${dir}/download.log" >&2
    return 1
  }
  for deb in "${dir}"/debs/*.deb; do dpkg-deb -x "${deb}" "${dir}/root" || return 1; done
  rm -rf "${dir}/debs"
}

# remora_lab_modules_dir <tree>: the kernel's module directory inside an unpacked tree
# (usr/lib/modules/<version> in newer packages, lib/modules/<version> in older ones).
remora_lab_modules_dir() {
  local d
  for d in "$1"/root/usr/lib/modules/* "$1"/root/lib/modules/*; do
    if [[ -f ${d}/modules.order ]]; then
      echo "${d}"
      return 0
    fi
  done
  return 1
}

# remora_lab_vmlinuz <tree>: the kernel image inside an unpacked tree.
remora_lab_vmlinuz() {
  local m f
  m=$(remora_lab_modules_dir "$1") || return 1
  for f in "${m}/vmlinuz" "$1/root/boot/vmlinuz-$(basename "${m}")"; do
    if [[ -f ${f} ]]; then
      echo "${f}"
      return 0
    fi
  done
  return 1
}

# remora_lab_fetch <suite>: prints the unpacked kernel tree of the suite's newest kernel
# (fetched now unless this version is in the cache already). Where the package lists
# cannot be had, the newest kernel already in the cache for that suite is used, with a
# note. On failure, prints the reason and returns 2.
remora_lab_fetch() {
  local suite=$1 pkg version tree bb_version bb
  if ! remora_lab_apt_update "${suite}"; then
    tree=$(find "${REMORA_LAB_CACHE}/kernels/${suite}" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sort -V | tail -n 1)
    if [[ -n ${tree} && -f ${tree}/complete ]]; then
      remora_lab_log "apt-get update for ${suite} failed; using the cached kernel ${tree}"
      echo "${tree}"
      return 0
    fi
    echo "apt-get update of ${suite} from ${REMORA_MIRROR} failed: $(tail -n 2 "${REMORA_LAB_CACHE}/apt/${suite}/update.log" | tr '\n' ' ')"
    return 2
  fi
  pkg=$(remora_lab_kernel_package "${suite}")
  if [[ -z ${pkg} ]]; then
    echo "${suite} has no linux-image-${REMORA_LAB_FLAVOUR} package"
    return 2
  fi
  version=$(remora_lab_candidate "${suite}" "${pkg}")
  tree=${REMORA_LAB_CACHE}/kernels/${suite}/${pkg#linux-image-}_${version}
  if [[ ! -f ${tree}/complete ]]; then
    rm -rf "${tree}"
    # Newer Debian kernels split the image package into linux-binary-* (vmlinuz),
    # linux-modules-* (the modules) and linux-base-* (modules.order, config); older ones
    # hold everything in linux-image-*.
    local -a pkgs=("${pkg}") p
    for p in "linux-binary-${pkg#linux-image-}" "linux-modules-${pkg#linux-image-}" "linux-base-${pkg#linux-image-}"; do
      if [[ -n $(remora_lab_candidate "${suite}" "${p}") ]]; then pkgs+=("${p}"); fi
    done
    remora_lab_log "fetching ${pkgs[*]} (${version}) from ${suite}"
    if ! remora_lab_unpack "${suite}" "${tree}" "${pkgs[@]}"; then
      echo "apt-get download of ${pkgs[*]} from ${suite} failed"
      return 2
    fi
    if ! remora_lab_vmlinuz "${tree}" >/dev/null; then
      echo "no vmlinuz or modules in ${pkgs[*]} (${suite})"
      return 2
    fi
    echo "${suite} ${pkg} ${version}" >"${tree}/complete"
  fi
  # busybox-static from the same suite (its base suite for backports).
  bb_version=$(remora_lab_candidate "${suite}" busybox-static)
  bb=${REMORA_LAB_CACHE}/busybox/${bb_version:-none}
  if [[ -z ${bb_version} ]]; then
    echo "${suite} has no busybox-static package"
    return 2
  fi
  if [[ ! -f ${bb}/complete ]]; then
    rm -rf "${bb}"
    if ! remora_lab_unpack "${suite}" "${bb}" busybox-static; then
      echo "apt-get download of busybox-static from ${suite} failed"
      return 2
    fi
    touch "${bb}/complete"
  fi
  ln -sfn "${bb}" "${tree}/busybox"
  echo "${tree}"
}

# remora_lab_busybox <tree>: the static busybox that goes with a fetched kernel tree.
remora_lab_busybox() {
  local f
  for f in "$1"/busybox/root/usr/bin/busybox "$1"/busybox/root/bin/busybox; do
    if [[ -x ${f} ]]; then
      echo "${f}"
      return 0
    fi
  done
  return 1
}

# remora_lab_copy_with_libs <root> <file>...: each file at its own absolute path under
# <root>, with every shared library ldd says it loads (and the dynamic loader).
remora_lab_copy_with_libs() {
  local root=$1 f lib
  shift
  for f in "$@"; do
    f=$(realpath "${f}")
    mkdir -p "${root}$(dirname "${f}")"
    cp -L "${f}" "${root}${f}"
    # "name => /path (addr)" and "/lib64/ld-linux-x86-64.so.2 (addr)"
    while read -r lib; do
      [[ -z ${lib} || -e ${root}${lib} ]] && continue
      mkdir -p "${root}$(dirname "${lib}")"
      cp -L "${lib}" "${root}${lib}"
    done < <(ldd "${f}" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p')
  done
}

# remora_lab_add_modules <tree> <root>: the modules of REMORA_LAB_MODULES (and what they
# depend on) that the kernel has as modules, decompressed, under <root>/lib/modules/<v>
# with depmod's files, so that modprobe works in the guest (the kernel's own requests for
# a module too); prints the names it added, in load order.
remora_lab_add_modules() {
  local tree=$1 root=$2 mdir version base m line path rel
  mdir=$(remora_lab_modules_dir "${tree}") || return 1
  version=$(basename "${mdir}")
  base=${mdir%/lib/modules/*}
  # depmod's files of the whole package, once, for modprobe --show-depends on the host.
  if [[ ! -f ${mdir}/modules.dep ]]; then remora_lab_kmod depmod -b "${base}" "${version}" || return 1; fi
  mkdir -p "${root}/lib/modules/${version}"
  cp "${mdir}/modules.order" "${mdir}/modules.builtin" "${root}/lib/modules/${version}/"
  if [[ -f ${mdir}/modules.builtin.modinfo ]]; then cp "${mdir}/modules.builtin.modinfo" "${root}/lib/modules/${version}/"; fi
  for m in ${REMORA_LAB_MODULES}; do
    while read -r line; do
      [[ ${line} == insmod\ * ]] || continue
      path=$(awk '{print $2}' <<<"${line}")
      rel=${path#"${mdir}"/}
      rel=${rel%.xz}
      rel=${rel%.zst}
      rel=${rel%.gz}
      [[ -f ${root}/lib/modules/${version}/${rel} ]] && continue
      mkdir -p "$(dirname "${root}/lib/modules/${version}/${rel}")"
      case ${path} in
        *.xz) xz -dc "${path}" >"${root}/lib/modules/${version}/${rel}" ;;
        *.zst) zstd -qdc "${path}" >"${root}/lib/modules/${version}/${rel}" ;;
        *.gz) gzip -dc "${path}" >"${root}/lib/modules/${version}/${rel}" ;;
        *) cp "${path}" "${root}/lib/modules/${version}/${rel}" ;;
      esac
    done < <(remora_lab_kmod modprobe -d "${base}" -S "${version}" --show-depends "${m}" 2>/dev/null)
  done
  remora_lab_kmod depmod -b "${root}" "${version}" || return 1
  for m in ${REMORA_LAB_MODULES}; do
    if remora_lab_kmod modprobe -d "${root}" -S "${version}" --show-depends "${m}" 2>/dev/null | grep -q '^insmod '; then echo "${m}"; fi
  done
}

# The guest's /init: mounts what programs expect, loads the modules, brings loopback up,
# runs each test of /lab/tests, prints the result lines, powers off.
remora_lab_init_script() {
  cat <<'EOF'
#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /run /tmp /root
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
# /tmp gets a tmpfs of its own, holding what the initramfs put under /tmp: the programs
# keep their host paths, which are under /tmp for a checkout there.
mkdir -p /.lab-tmp
mount -t tmpfs tmpfs /.lab-tmp
cp -a /tmp/. /.lab-tmp/
mount -o move /.lab-tmp /tmp
chmod 1777 /tmp
echo "REMORA-LAB-KERNEL $(uname -r) $(cat /proc/version)"
for m in $(cat /lab/modules); do
  modprobe "$m" || echo "REMORA-LAB-NOTE modprobe $m failed"
done
ip link set lo up
while read -r name cmd; do
  [ -z "$name" ] && continue
  echo "REMORA-LAB-BEGIN $name"
  start=$(cut -d. -f1 /proc/uptime)
  timeout "$(cat /lab/timeout)" sh -c "$cmd" </dev/null 2>&1
  rc=$?
  end=$(cut -d. -f1 /proc/uptime)
  echo "REMORA-LAB-RESULT $name rc=$rc seconds=$((end - start))"
done </lab/tests
echo "REMORA-LAB-DONE"
sync
poweroff -f
EOF
}

# remora_lab_initramfs <tree> <out> <binary>...: writes the guest's initramfs to <out>.
# REMORA_LAB_TESTS holds the tests, one "<name> <command>" per line.
remora_lab_initramfs() {
  local tree=$1 out=$2 root busybox applet extra
  shift 2
  busybox=$(remora_lab_busybox "${tree}") || {
    echo "no busybox in ${tree}" >&2
    return 1
  }
  root=$(mktemp -d "${TMPDIR:-/tmp}/remora-lab-root.XXXXXX")
  mkdir -p "${root}"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,var,lab,etc,root}
  ln -s ../run "${root}/var/run"
  cp "${busybox}" "${root}/bin/busybox"
  for applet in $("${busybox}" --list); do
    [[ -e ${root}/bin/${applet} ]] || ln -s busybox "${root}/bin/${applet}"
  done
  ln -sf ../bin/modprobe "${root}/sbin/modprobe"  # the kernel's usermode helper runs /sbin/modprobe
  remora_lab_copy_with_libs "${root}" "$@" || return 1
  # iproute2's ip and ethtool, where the host has them: the tests make veth pairs and ask
  # for features busybox's ip does not know.
  for extra in /usr/sbin/ip /usr/sbin/ethtool; do
    if [[ -x ${extra} ]]; then
      remora_lab_copy_with_libs "${root}" "${extra}"
      ln -sf "${extra}" "${root}/bin/$(basename "${extra}")"
    fi
  done
  remora_lab_add_modules "${tree}" "${root}" >"${root}/lab/modules" || return 1
  # shellcheck disable=SC2034 # for the caller
  REMORA_LAB_LOADED_MODULES=$(tr '\n' ' ' <"${root}/lab/modules")
  printf '%s\n' "${REMORA_LAB_TESTS}" >"${root}/lab/tests"
  echo "${REMORA_LAB_TEST_TIMEOUT}" >"${root}/lab/timeout"
  remora_lab_init_script >"${root}/init"
  chmod 755 "${root}/init"
  (cd "${root}" && find . | "${busybox}" cpio -o -H newc 2>/dev/null | gzip -1) >"${out}"
  local rc=$?
  rm -rf "${root}"
  return "${rc}"
}

# remora_lab_boot <tree> <initramfs> <console log>: boots the kernel of <tree> with the
# initramfs under TCG, its console in the log (and on stdout when REMORA_LAB_VERBOSE=1),
# killed after REMORA_LAB_TIMEOUT seconds. Returns QEMU's status (124: timed out).
remora_lab_boot() {
  local tree=$1 initrd=$2 log=$3 vmlinuz
  vmlinuz=$(remora_lab_vmlinuz "${tree}") || return 1
  local -a qemu=(qemu-system-x86_64 -accel tcg -cpu max -smp "${REMORA_LAB_CPUS}" -m "${REMORA_LAB_MEMORY}"
    -nographic -no-reboot -nic none -kernel "${vmlinuz}" -initrd "${initrd}"
    -append "console=ttyS0 panic=-1 quiet loglevel=4 rdinit=/init")
  if [[ ${REMORA_LAB_VERBOSE:-0} == 1 ]]; then
    timeout --kill-after=10 "${REMORA_LAB_TIMEOUT}" "${qemu[@]}" </dev/null 2>&1 | tr -d '\r' | tee "${log}"
    return "${PIPESTATUS[0]}"
  fi
  timeout --kill-after=10 "${REMORA_LAB_TIMEOUT}" "${qemu[@]}" </dev/null 2>&1 | tr -d '\r' >"${log}"
  return "${PIPESTATUS[0]}"
}

# remora_lab_results <console log>: "<name> <rc> <seconds>" per test that finished.
remora_lab_results() {
  sed -n 's/^REMORA-LAB-RESULT \([^ ]*\) rc=\([0-9]*\) seconds=\([0-9]*\).*/\1 \2 \3/p' "$1"
}

# remora_lab_section <console log> <name>: what that test printed.
remora_lab_section() {
  awk -v n="$2" '$0 == "REMORA-LAB-BEGIN " n {on = 1; next} on && index($0, "REMORA-LAB-RESULT " n " ") == 1 {exit} on' "$1"
}
