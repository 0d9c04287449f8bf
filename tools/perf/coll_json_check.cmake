# tools/perf/coll_json_check.cmake — runs `remora bench coll --json` and checks the
# file: every nccl-tests column per row, the algorithm and its steps, the reference and
# the ratios against it. A CTest test (tools/programs.cmake):
#   cmake -DREMORA=<remora> -DOUT=<file.json> -P coll_json_check.cmake
cmake_minimum_required(VERSION 3.25)

# Pieces of 256K, so that the 1M broadcast is 4 pieces and takes the chain whatever
# the default piece size.
execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env REMORA_COLL_PIPELINE=256K "${REMORA}" bench coll --op allreduce,allgather,broadcast -n 3 --sizes 4K,1M --iters 3 --warmup 1
          --reference-iters 20 --json "${OUT}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 100)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "remora bench coll exited with '${rc}'")
endif()
file(READ "${OUT}" json)

function(expect what actual wanted)
  if(NOT "${actual}" STREQUAL "${wanted}")
    message(FATAL_ERROR "${what}: '${actual}', expected '${wanted}'")
  endif()
endfunction()
# A number (integer or decimal), and above zero where `positive` is set.
function(expect_number what actual positive)
  if(NOT "${actual}" MATCHES "^[0-9]+(\\.[0-9]*)?([eE][-+]?[0-9]+)?$")
    message(FATAL_ERROR "${what}: '${actual}' is not a non-negative number")
  endif()
  if(positive AND "${actual}" MATCHES "^0(\\.0*)?$")
    message(FATAL_ERROR "${what}: ${actual}, expected above zero")
  endif()
endfunction()

string(JSON v GET "${json}" tool)
expect("tool" "${v}" "remora bench coll")
string(JSON v GET "${json}" ranks)
expect("ranks" "${v}" 3)
string(JSON v GET "${json}" wrong)
expect("wrong" "${v}" 0)
string(JSON v GET "${json}" config type)
expect("config.type" "${v}" "float32")
string(JSON v GET "${json}" config redop)
expect("config.redop" "${v}" "sum")
string(JSON v GET "${json}" config check)
expect("config.check" "${v}" "ON")

# Rows: 3 ops x 2 sizes, in order; nccl-tests' sizes and counts; what ran.
string(JSON rows LENGTH "${json}" results)
expect("rows" "${rows}" 6)
# op size count root algorithm steps out_of_place? in_place?   (4 bytes per float32)
set(want
  "allreduce|4096|1024|-1|rd|3|ON|ON"
  "allreduce|1048576|262144|-1|ring|4|ON|ON"
  "allgather|4092|1023|-1|bruck|2|ON|ON"           # 4K / (3 ranks x 4 B) = 341 per rank
  "allgather|1048572|262143|-1|ring|2|ON|ON"
  "broadcast|4096|1024|0|tree|2|OFF|ON"            # one buffer: the in-place column only
  "broadcast|1048576|262144|0|chain|2|OFF|ON")
math(EXPR last "${rows} - 1")
foreach(i RANGE ${last})
  list(GET want ${i} w)
  string(REPLACE "|" ";" fields "${w}")
  list(GET fields 0 op)
  list(GET fields 1 size)
  list(GET fields 2 count)
  list(GET fields 3 root)
  list(GET fields 4 algorithm)
  list(GET fields 5 steps)
  list(GET fields 6 has_oop)
  list(GET fields 7 has_ip)
  foreach(key op size count root algorithm steps)
    string(JSON v GET "${json}" results ${i} ${key})
    expect("row ${i} ${key}" "${v}" "${${key}}")
  endforeach()
  string(JSON v GET "${json}" results ${i} type)
  expect("row ${i} type" "${v}" "float32")
  foreach(place out_of_place in_place)
    string(JSON kind TYPE "${json}" results ${i} ${place})
    if(place STREQUAL "out_of_place")
      set(present ${has_oop})
    else()
      set(present ${has_ip})
    endif()
    if(NOT present)
      expect("row ${i} ${place}" "${kind}" "NULL")
      continue()
    endif()
    foreach(col time_us algbw_GBps busbw_GBps)
      string(JSON v GET "${json}" results ${i} ${place} ${col})
      expect_number("row ${i} ${place}.${col}" "${v}" ON)
    endforeach()
    string(JSON v GET "${json}" results ${i} ${place} wrong)
    expect("row ${i} ${place}.wrong" "${v}" 0)
  endforeach()
endforeach()

# busbw = algbw x the bus factor: allreduce 2(n-1)/n = 4/3 at 3 ranks.
string(JSON f GET "${json}" results 1 bus_factor)
string(SUBSTRING "${f}" 0 6 f)
expect("allreduce bus factor" "${f}" "1.3333")

# The reference: the exchange at 1M, the 4K round trip, and the ratios against them.
string(JSON v GET "${json}" reference exchange 0 size)
expect("reference exchange size" "${v}" 1048576)
string(JSON v GET "${json}" reference exchange 0 bandwidth_GBps_per_direction)
expect_number("reference bandwidth" "${v}" ON)
string(JSON v GET "${json}" reference pingpong rtt_us avg)
expect_number("reference RTT" "${v}" ON)
string(JSON n LENGTH "${json}" ratios)
set(seen "")
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON op GET "${json}" ratios ${i} op)
  string(JSON size GET "${json}" ratios ${i} size)
  string(JSON kind GET "${json}" ratios ${i} kind)
  string(JSON ratio GET "${json}" ratios ${i} ratio)
  expect_number("ratio ${i}" "${ratio}" ON)
  string(JSON target_type TYPE "${json}" ratios ${i} target)
  set(target "")
  if(target_type STREQUAL "STRING")
    string(JSON target GET "${json}" ratios ${i} target)
  endif()
  list(APPEND seen "${op}/${size}/${target}")
endforeach()
foreach(w "allreduce/1048576/>= 0.8" "allreduce/4096/<= 2" "allgather/1048572/" "broadcast/4096/")
  if(NOT w IN_LIST seen)
    message(FATAL_ERROR "no ratio '${w}' among: ${seen}")
  endif()
endforeach()
message(STATUS "coll JSON: ${rows} rows, ${n} ratios, every column present")
