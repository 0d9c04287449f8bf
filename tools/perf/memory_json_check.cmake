# tools/perf/memory_json_check.cmake — `remora bench p2p` and `remora bench staging` with
# test-device memory, end to end between the tool and its spawned follower, checked in
# their JSON: which memory each side used, that every size verified, and that exactly the
# device side's transfers went through staging (EndpointStats::staged_transfers: one per
# message of device memory sent or received). No timing is checked. A CTest test
# (tools/programs.cmake):
#   cmake -DREMORA=<remora> -DOUT=<file prefix> -P memory_json_check.cmake
cmake_minimum_required(VERSION 3.25)

function(expect what actual wanted)
  if(NOT "${actual}" STREQUAL "${wanted}")
    message(FATAL_ERROR "${what}: '${actual}', expected '${wanted}'")
  endif()
endfunction()
function(expect_positive what actual)
  if(NOT "${actual}" MATCHES "^[0-9]+(\\.[0-9]*)?([eE][-+]?[0-9]+)?$" OR "${actual}" MATCHES "^0(\\.0*)?$")
    message(FATAL_ERROR "${what}: '${actual}', expected a number above zero")
  endif()
endfunction()

# Runs `remora bench <args> --json <file>`; the file's text in ${json} of the caller.
function(run_bench file)
  execute_process(COMMAND "${REMORA}" bench ${ARGN} --json "${file}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 100)
  message("$ remora bench ${ARGN}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "remora bench ${ARGN} exited with '${rc}'")
  endif()
  file(READ "${file}" text)
  set(json "${text}" PARENT_SCOPE)
endfunction()

# One row of results: its memory, its data check, and the transfers staged on each side
# during it (driver, follower; "-" for not checked).
function(expect_row prefix row driver follower staged_driver staged_follower)
  string(JSON v GET "${row}" memory driver)
  expect("${prefix} memory.driver" "${v}" "${driver}")
  string(JSON v GET "${row}" memory follower)
  expect("${prefix} memory.follower" "${v}" "${follower}")
  string(JSON v GET "${row}" verified)
  expect("${prefix} verified" "${v}" "ON")
  if("${staged_driver}" STREQUAL "-")
    return()
  endif()
  string(JSON v GET "${row}" staged driver staged_transfers)
  expect("${prefix} staged on the driver's side" "${v}" "${staged_driver}")
  string(JSON v GET "${row}" staged follower staged_transfers)
  expect("${prefix} staged on the follower's side" "${v}" "${staged_follower}")
endfunction()

# 1. bw, device to device: every data message of the driver is a staged send and every
#    one the follower gets a staged receive (window 64 x (3 + 1) iterations); acks are
#    host memory. 0 B verifies, its counts are not checked: the sending endpoint counts
#    an empty message of device memory as staged, the receiving one does not.
run_bench("${OUT}-bw.json" p2p --mode bw --memory test-device --sizes 0,8,64K,1M,4M --iters 3 --warmup 1)
string(JSON v GET "${json}" config memory driver)
expect("config.memory.driver" "${v}" "test-device")
string(JSON v GET "${json}" config memory follower)
expect("config.memory.follower (as --memory)" "${v}" "test-device")
string(JSON v GET "${json}" config memory device_copy_rate)
expect("config.memory.device_copy_rate" "${v}" "unlimited")
string(JSON rows LENGTH "${json}" results)
expect("bw rows" "${rows}" 5)
string(JSON row GET "${json}" results 0)
expect_row("bw 0 B" "${row}" test-device test-device - -)
foreach(i 1 2 3 4)
  string(JSON row GET "${json}" results ${i})
  expect_row("bw row ${i}" "${row}" test-device test-device 256 256)
endforeach()
string(JSON v GET "${json}" peer endpoint staged_transfers)
expect("the follower's staged_transfers" "${v}" 1024)
foreach(side local peer)
  string(JSON v GET "${json}" ${side} endpoint staged_bytes)
  expect("${side} staged_bytes" "${v}" 1358956544)  # 256 x (8 + 64K + 1M + 4M)
endforeach()

# 2. bibw, device here and host there, distinct buffers: the driver stages its sends
#    and its receives, the follower nothing.
run_bench("${OUT}-bibw.json" p2p --mode bibw --memory test-device --peer-memory host --sizes 8,1M
          --window 4 --distinct-buffers --iters 3 --warmup 1)
foreach(i 0 1)
  string(JSON row GET "${json}" results ${i})
  expect_row("bibw row ${i}" "${row}" test-device host 32 0)
endforeach()
string(JSON v GET "${json}" peer endpoint staged_transfers)
expect("bibw: the host side's staged_transfers" "${v}" 0)

# 3. lat, host here and device there, copies at the rate measured just before: each
#    size has its host-to-host calibration, and the follower stages each ping it gets
#    and each pong it sends (20 + 2 round trips).
run_bench("${OUT}-lat.json" p2p --mode lat --memory host --peer-memory test-device --device-copy-rate auto
          --sizes 8,1M --iters 20 --warmup 2)
string(JSON v GET "${json}" config memory device_copy_rate)
expect("config.memory.device_copy_rate" "${v}" "auto")
foreach(i 0 1)
  string(JSON row GET "${json}" results ${i})
  expect_row("lat row ${i}" "${row}" host test-device 0 44)
  string(JSON calibration GET "${row}" calibration)
  expect_row("lat row ${i}'s calibration" "${calibration}" host host 0 0)
  string(JSON rate GET "${row}" device_copy_rate_Bps)
  expect_positive("lat row ${i}: the copy rate from its calibration" "${rate}")
endforeach()

# 4. The staging check, small: a calibration, then 4 adjacent pairs in alternating order
#    with copies at the calibrated rate and 4 unlimited; every device measurement
#    staged on both sides ((2 + 1) messages), every host one nowhere.
run_bench("${OUT}-staging.json" staging --size 1M --pairs 4 --iters 2 --warmup 1 --calibration-iters 2)
string(JSON v GET "${json}" tool)
expect("tool" "${v}" "remora bench staging")
string(JSON network GET "${json}" calibration network_rate_Bps)
expect_positive("calibration.network_rate_Bps" "${network}")
string(JSON row GET "${json}" calibration)
expect_row("calibration" "${row}" host host 0 0)
string(JSON v GET "${json}" verdict bound)
expect("verdict.bound" "${v}" 1.25)
string(JSON v GET "${json}" verdict pass)
if(NOT v MATCHES "^(ON|OFF)$")
  message(FATAL_ERROR "verdict.pass: '${v}', expected a boolean")
endif()
string(JSON phases LENGTH "${json}" phases)
expect("phases" "${phases}" 2)
foreach(p 0 1)
  string(JSON phase GET "${json}" phases ${p})
  string(JSON name GET "${phase}" name)
  string(JSON rate GET "${phase}" copy_rate_Bps)
  if(p EQUAL 0)
    expect("phase 0" "${name}" "matched")
    expect("matched copy rate = the calibration's network rate" "${rate}" "${network}")
  else()
    expect("phase 1" "${name}" "unlimited")
    expect("unlimited copy rate" "${rate}" 0.0)
  endif()
  string(JSON pairs LENGTH "${phase}" pairs)
  expect("${name} pairs" "${pairs}" 4)
  foreach(i 0 1 2 3)
    string(JSON pair GET "${phase}" pairs ${i})
    math(EXPR odd "${i} % 2")
    string(JSON v GET "${pair}" host_first)
    if(odd)
      expect("${name} pair ${i} host_first" "${v}" "OFF")
    else()
      expect("${name} pair ${i} host_first" "${v}" "ON")
    endif()
    string(JSON row GET "${pair}" host)
    expect_row("${name} pair ${i} host" "${row}" host host 0 0)
    string(JSON row GET "${pair}" device)
    expect_row("${name} pair ${i} device" "${row}" test-device test-device 3 3)
    string(JSON ratio GET "${pair}" ratio)
    expect_positive("${name} pair ${i} ratio" "${ratio}")
  endforeach()
endforeach()
