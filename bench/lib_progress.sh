# bench/lib_progress.sh — the progress line of the long benchmark scripts
# (bench/compare_*.sh, bench/checksum_cost.sh). Sourced, not run.
#
#   progress_start TOTAL   TOTAL steps are to come
#   progress_step TEXT     one step begins; TEXT says what runs now
#   progress_note TEXT     a message that must stay on screen (a warning)
#   progress_end           the run is over: the line is cleared
#
# When stderr is a terminal, progress_step rewrites one line in place:
#   [ 5/18] 0:40, about 1:05 left: compare_p2p: [round 2] iperf3 -l 1M -P 2 -t 6
# (elapsed time, and the time left estimated from the steps done so far). Otherwise
# (a pipe, a file, CI) each step's TEXT is printed as a line of its own, so logs keep
# what ran. Everything goes to stderr; stdout stays the script's table.

# shellcheck shell=bash disable=SC2034  # sourced: the calling script reads nothing back
progress_total=0
progress_done=-1
progress_started=${SECONDS}
progress_tty=0
[[ -t 2 ]] && progress_tty=1

# mm:ss of $1 seconds.
progress_clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

progress_start() {
  progress_total=$1
  progress_done=-1
  progress_started=${SECONDS}
}

progress_step() {
  progress_done=$((progress_done + 1))
  if ((!progress_tty)); then
    echo "$*" >&2
    return 0
  fi
  local elapsed=$((SECONDS - progress_started)) left="" estimate=0
  if ((progress_done > 0 && progress_total > progress_done)); then
    estimate=$((elapsed * (progress_total - progress_done) / progress_done))
  fi
  ((estimate > 0)) && left=", about $(progress_clock "${estimate}") left"
  local line
  line=$(printf '[%*d/%d] %s%s: %s' ${#progress_total} $((progress_done + 1)) "${progress_total}" \
    "$(progress_clock "${elapsed}")" "${left}" "$*")
  local width=${COLUMNS:-$(tput cols 2>/dev/null || echo 100)}
  printf '\r\033[K%s' "${line:0:$((width - 1))}" >&2
}

progress_note() {
  if ((progress_tty)); then printf '\r\033[K' >&2; fi
  echo "$*" >&2
}

progress_end() {
  if ((progress_tty)); then printf '\r\033[K' >&2; fi
  return 0
}
