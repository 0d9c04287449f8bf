# The `remora` command-line tool: a thin CLI (remora.cc: arguments and the progress line;
# run.cc: the launcher; soak.cc: one rank of `remora soak`; doctor.cc: the capability report;
# config.cc: `remora config`, the configuration table) over the perf library (perf/), which holds the p2p, RMA and
# collective benchmarks, the two-process demo, and the printers of their reports (report.cc).
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json REQUIRED)

add_library(remora_perf STATIC
  ${CMAKE_CURRENT_LIST_DIR}/perf/session.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf/memory.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf/p2p.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf/staging_check.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf/rma.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf/demo.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf/coll.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf/report.cc)
target_include_directories(remora_perf PUBLIC ${CMAKE_CURRENT_LIST_DIR}/perf)
target_compile_options(remora_perf PRIVATE ${REMORA_WARNINGS})
target_link_libraries(remora_perf PUBLIC remora_static nlohmann_json::nlohmann_json fmt::fmt Threads::Threads)

add_executable(remora_tool ${CMAKE_CURRENT_LIST_DIR}/remora.cc ${CMAKE_CURRENT_LIST_DIR}/run.cc
               ${CMAKE_CURRENT_LIST_DIR}/doctor.cc ${CMAKE_CURRENT_LIST_DIR}/rxq.cc
               ${CMAKE_CURRENT_LIST_DIR}/soak.cc ${CMAKE_CURRENT_LIST_DIR}/config.cc)
set_target_properties(remora_tool PROPERTIES OUTPUT_NAME remora)
# -Wno-null-dereference: GCC 12 flags CLI11's own string splitting (a false positive
# that surfaces only once its templates are inlined here).
target_compile_options(remora_tool PRIVATE ${REMORA_WARNINGS} -Wno-null-dereference)
target_link_libraries(remora_tool PRIVATE remora_perf CLI11::CLI11 fmt::fmt nlohmann_json::nlohmann_json)
# rxq.cc drives the zerocopy layer's internals (ethtool, netdev, the rxq protocol and journal).
get_property(rxq_zerocopy_deps GLOBAL PROPERTY REMORA_LAYER_DEPS_zerocopy)
remora_layer_include_root(zerocopy rxq_zerocopy_root ${rxq_zerocopy_deps})
target_include_directories(remora_tool PRIVATE ${rxq_zerocopy_root})
install(TARGETS remora_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

if(REMORA_BUILD_TESTS)
  enable_testing()
  find_package(GTest REQUIRED)
  add_executable(remora_perf_tests ${CMAKE_CURRENT_LIST_DIR}/perf/perf_test.cc ${CMAKE_CURRENT_LIST_DIR}/perf/report_test.cc)
  target_compile_options(remora_perf_tests PRIVATE ${REMORA_WARNINGS})
  target_link_libraries(remora_perf_tests PRIVATE remora_perf GTest::gtest GTest::gtest_main)
  add_test(NAME remora_perf_tests COMMAND remora_perf_tests)

  # The tool end to end, each with its own spawned follower: every mode, both buffer
  # sources, the demo's verification. Small iteration counts keep them to seconds.
  add_test(NAME remora_version COMMAND remora_tool version --json)
  # The configuration table, the code that reads it, ContextOptions and
  # docs/configuration.md agree (tests/config/check_config_table.py).
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  add_test(NAME remora_config_table_code_and_docs_agree
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/config/check_config_table.py
                   --remora $<TARGET_FILE:remora_tool> --root ${PROJECT_SOURCE_DIR})
  add_test(NAME remora_config_lists_every_variable COMMAND remora_tool config)
  add_test(NAME remora_demo COMMAND remora_tool demo --sizes 1,4K,64K,1M,8M --iters 10)
  add_test(NAME remora_bench_p2p_bw COMMAND remora_tool bench p2p --mode bw --sizes 8,64K,4M --iters 3 --warmup 1)
  add_test(NAME remora_bench_p2p_bw_register
           COMMAND remora_tool bench p2p --mode bw --buffers register --sizes 1M --window 8 --iters 3 --warmup 1)
  add_test(NAME remora_bench_p2p_bibw COMMAND remora_tool bench p2p --mode bibw --sizes 8,4M --iters 3 --warmup 1)
  add_test(NAME remora_bench_p2p_lat COMMAND remora_tool bench p2p --mode lat --sizes 8,1M --iters 50 --warmup 5)
  # Device memory (the test device) on either side or both, every p2p mode, and the
  # staging check: what each side used, every size verified, exactly the device side's
  # messages staged (memory_json_check.cmake). No timing is checked.
  add_test(NAME remora_bench_memory_json
           COMMAND ${CMAKE_COMMAND} -DREMORA=$<TARGET_FILE:remora_tool> -DOUT=memory
                   -P ${CMAKE_CURRENT_LIST_DIR}/perf/memory_json_check.cmake)
  # Memory this remora cannot give is refused before anything starts, with the reason
  # and exit 1: cuda on either side without a driver (REMORA_CUDA_DRIVER at a missing
  # file, so that a machine with a GPU refuses too), kinds and rates it does not know.
  add_test(NAME remora_bench_p2p_memory_refusals
           COMMAND sh -c "for side in --memory --peer-memory; do \
                            REMORA_CUDA_DRIVER=/nonexistent/libcuda.so.1 \"$0\" bench p2p $side cuda > mem.out 2>&1; rc=$?; \
                            cat mem.out; [ $rc -eq 1 ] || exit 1; \
                            grep -q 'unsupported: cuda memory: no CUDA driver: dlopen(/nonexistent/libcuda.so.1)' mem.out || exit 1; done; \
                          \"$0\" bench p2p --memory gpu > mem.out 2>&1 && exit 1; \
                          grep -q \"memory: unknown memory kind 'gpu': use host, test-device or cuda\" mem.out || exit 1; \
                          \"$0\" bench p2p --memory test-device --device-copy-rate fast > mem.out 2>&1 && exit 1; \
                          grep -q \"device-copy-rate: bad copy rate 'fast'\" mem.out"
                   $<TARGET_FILE:remora_tool>)
  # A damaged byte in device memory must fail the run, loudly: the follower reads what
  # it received back through the device and reports the byte.
  add_test(NAME remora_bench_p2p_device_detects_corruption
           COMMAND sh -c "\"$0\" bench p2p --memory test-device --sizes 1M --window 4 --iters 2 --warmup 0 \
                            --inject-corruption > devc.out 2>&1; rc=$?; cat devc.out; [ $rc -eq 1 ] && \
                          grep -q 'size 1048576: data check failed: what the follower received: byte 524288 is ' devc.out"
                   $<TARGET_FILE:remora_tool>)
  # Every RMA mode against its spawned target, sizes on both sides of the eager limit
  # (16K: inline vs chunked puts and get responses) and 0 B; every size's data checked.
  add_test(NAME remora_bench_rma_put_bw COMMAND remora_tool bench rma --mode put_bw --sizes 0,8,16K,17K,4M --iters 3 --warmup 1)
  add_test(NAME remora_bench_rma_get_bw
           COMMAND remora_tool bench rma --mode get_bw --buffers register --sizes 0,8,16K,17K,4M --window 8 --iters 3 --warmup 1)
  add_test(NAME remora_bench_rma_put_lat COMMAND remora_tool bench rma --mode put_lat --sizes 0,8,17K,1M --iters 50 --warmup 5)
  add_test(NAME remora_bench_rma_get_lat COMMAND remora_tool bench rma --mode get_lat --sizes 8,17K,1M --iters 50 --warmup 5)
  add_test(NAME remora_bench_rma_put_rate COMMAND remora_tool bench rma --mode put_rate --iters 20 --warmup 2)
  add_test(NAME remora_bench_rma_notify_lat COMMAND remora_tool bench rma --mode notify_lat --sizes 0,8,17K,1M --iters 50 --warmup 5)
  # atomic_lat through a mapping of the peer's pool word, and through the peer (registered memory).
  add_test(NAME remora_bench_rma_atomic_lat
           COMMAND sh -c "\"$0\" bench rma --mode atomic_lat --iters 50 --warmup 5 && \
                          \"$0\" bench rma --mode atomic_lat --buffers register --iters 50 --warmup 5"
                   $<TARGET_FILE:remora_tool>)
  # Damaged data must fail the RMA bench, loudly: exit 1 and the byte that differs, for
  # the put path (read back, and the target's own check), the get path and an atomic's word.
  add_test(NAME remora_bench_rma_detects_corruption
           COMMAND sh -c "for m in put_bw get_lat; do \"$0\" bench rma --mode $m --sizes 1M --iters 2 --inject-corruption \
                            > rma-$m.out 2>&1; rc=$?; cat rma-$m.out; [ $rc -eq 1 ] || exit 1; done; \
                    \"$0\" bench rma --mode atomic_lat --iters 2 --inject-corruption > rma-atomic.out 2>&1; rc=$?; \
                    cat rma-atomic.out; [ $rc -eq 1 ] || exit 1; \
                    grep -q 'data check failed: the word is .*target.s own check: byte 0 ' rma-atomic.out && \
                    grep -q 'data check failed: read back after the puts: byte 524288 .*target.s own check: byte 524288' rma-put_bw.out && \
                    grep -q \"data check failed: the gets' data: byte 524288\" rma-get_lat.out"
                   $<TARGET_FILE:remora_tool>)
  # Damaged data must fail the demo, loudly: exit 1 and the peer's verdict in the table.
  add_test(NAME remora_demo_detects_corruption
           COMMAND sh -c "\"$0\" demo --sizes 4K,1M --iters 5 --inject-corruption > demo.out 2>&1; rc=$?; cat demo.out; \
                    [ $rc -eq 1 ] && [ $(grep -c 'NO: peer: verify round 0: checksum' demo.out) -eq 2 ]"
                   $<TARGET_FILE:remora_tool>)
  # remora bench coll: every operation at 2 and 3 ranks (and allreduce at 4), each
  # started by the tool itself (-n, no launcher around), every size checked on every
  # rank, in and out of place (alltoallv: the alltoall rows through it, up to 4100 bytes
  # through the shared segment; allgatherv: the allgather rows through it). The sizes cross the algorithm switches: 0, a size that
  # does not divide into blocks, 4100 (recursive doubling / Bruck / tree), 100K (ring
  # allreduce and reduce_scatter; reduce's chain at 3 ranks), 1100K (broadcast's chain
  # at 3 ranks, the allgather ring).
  set(coll_tests)
  foreach(n 2 3)
    foreach(op allreduce reduce broadcast allgather allgatherv reduce_scatter alltoall alltoallv gather scatter barrier)
      add_test(NAME remora_bench_coll_${op}_n${n}
               COMMAND remora_tool bench coll --op ${op} -n ${n} --sizes 0,6,4100,100K,1100K --root 1 --check
                       --iters 3 --warmup 1 --no-reference)
      list(APPEND coll_tests remora_bench_coll_${op}_n${n})
    endforeach()
  endforeach()
  add_test(NAME remora_bench_coll_allreduce_n4
           COMMAND remora_tool bench coll --op allreduce -n 4 --sizes 0,4K,100K,1100K --check --iters 3 --warmup 1
                   --no-reference)
  # Other types and reductions through the same check (exact small integers in every type).
  add_test(NAME remora_bench_coll_types
           COMMAND sh -c "for t in int8 uint8 int32 uint64 float16 bfloat16 float64; do \
                            for r in sum prod min max; do \"$0\" bench coll --op allreduce,reduce_scatter -n 3 \
                              --sizes 4100,100K --type $t --redop $r --iters 1 --warmup 0 --no-reference > /dev/null \
                              || { echo \"FAILED: $t $r\"; exit 1; }; done; done; \
                          for t in float16 bfloat16 float32; do \"$0\" bench coll --op allreduce,reduce -n 3 \
                            --sizes 4100,100K --type $t --redop avg --iters 1 --warmup 0 --no-reference > /dev/null \
                            || { echo \"FAILED: $t avg\"; exit 1; }; done"
                   $<TARGET_FILE:remora_tool>)
  # A flipped byte in every checked result must fail the run: exit 1, the count of
  # wrong elements (2 ops x 2 sizes x 2 placements, one element each) and the column.
  add_test(NAME remora_bench_coll_detects_corruption
           COMMAND sh -c "\"$0\" bench coll --op allreduce,gather -n 3 --sizes 4K,1M --iters 2 --warmup 1 \
                            --no-reference --inject-corruption > coll.out 2>&1; rc=$?; cat coll.out; \
                          [ $rc -eq 1 ] && grep -q 'FAILED: 8 wrong elements: the data check failed' coll.out && \
                          grep -q '^# #wrong: 8 ' coll.out"
                   $<TARGET_FILE:remora_tool>)
  # Bad input is refused before any rank starts, with a clear message.
  add_test(NAME remora_bench_coll_rejects_bad_input
           COMMAND sh -c "\"$0\" bench coll --op allreduce --type int32 --redop avg > bad.out 2>&1 && exit 1; \
                          grep -q 'avg needs a floating type' bad.out || exit 1; \
                          \"$0\" bench coll --op gather -n 2 --root 2 > bad.out 2>&1 && exit 1; \
                          grep -q 'root 2 is not a rank of 2 ranks' bad.out || exit 1; \
                          \"$0\" bench coll --op allscatter > bad.out 2>&1 && exit 1; \
                          grep -q \"unknown collective 'allscatter'\" bad.out || exit 1; \
                          \"$0\" bench coll --op alltoall,alltoallv > bad.out 2>&1 && exit 1; \
                          grep -q 'alltoall and alltoallv are one row each' bad.out || exit 1; \
                          \"$0\" bench coll --op allgather,allgatherv > bad.out 2>&1 && exit 1; \
                          grep -q 'allgather and allgatherv are one row each' bad.out || exit 1; \
                          \"$0\" bench coll --rounds 0 > bad.out 2>&1 && exit 1; \
                          grep -q -- '--rounds: Value 0 not in range 1 to 1000' bad.out || exit 1; \
                          RANK=0 \"$0\" bench coll -n 2 > bad.out 2>&1 && exit 1; \
                          grep -q 'RANK is set but describes no job' bad.out"
                   $<TARGET_FILE:remora_tool>)
  # The JSON: every column, what ran, the reference and the ratios.
  add_test(NAME remora_bench_coll_json
           COMMAND ${CMAKE_COMMAND} -DREMORA=$<TARGET_FILE:remora_tool> -DOUT=coll.json
                   -P ${CMAKE_CURRENT_LIST_DIR}/perf/coll_json_check.cmake)
  list(APPEND coll_tests remora_bench_coll_allreduce_n4 remora_bench_coll_types remora_bench_coll_detects_corruption
       remora_bench_coll_rejects_bad_input remora_bench_coll_json)
  # They start their own ranks: a launcher the tests themselves run under (srun ctest)
  # must not make them ranks of its job.
  set_tests_properties(${coll_tests} PROPERTIES ENVIRONMENT_MODIFICATION
                       "REMORA_RANK=unset:;RANK=unset:;OMPI_COMM_WORLD_RANK=unset:;PMI_RANK=unset:;SLURM_PROCID=unset:")

  # `remora run`: the program may follow the options with or without "--"; from the
  # program on everything is the program's ("--" and flags like ours included), a
  # program named like one of our subcommands is still run, and an option we do not
  # know is refused (exit 2) rather than run as the program.
  add_test(NAME remora_run_arguments
           COMMAND sh -c "\"$0\" run -n 2 /bin/echo a -- b -n 3 > run.out && [ $(grep -cx 'a -- b -n 3' run.out) -eq 2 ] && \
                          \"$0\" run -n 2 -- /bin/echo a -- b > run.out && [ $(grep -cx 'a -- b' run.out) -eq 2 ] && \
                          mkdir -p run-bin && printf '#!/bin/sh\\necho ran \"$@\"\\n' > run-bin/bench && chmod +x run-bin/bench && \
                          PATH=\"$PWD/run-bin:$PATH\" \"$0\" run -n 1 bench --help > run.out && grep -qx 'ran --help' run.out && \
                          { \"$0\" run -n 1 --bogus /bin/echo > run.out 2>&1; [ $? -eq 2 ]; } && \
                          grep -q \"unknown option '--bogus'\" run.out"
                   $<TARGET_FILE:remora_tool>)
  set_tests_properties(remora_run_arguments PROPERTIES LABELS "tools" TIMEOUT 60)

  # `remora soak`, short: 4 ranks, 20 s of mixed operations, every byte verified; fails on
  # any error or on descriptors or memory that grew after the warm-up (tools/soak.h).
  add_test(NAME remora_soak COMMAND remora_tool soak -n 4 --seconds 20 --max-size 2M)
  # ... and fails, naming the damage, when a received byte is wrong.
  add_test(NAME remora_soak_detects_corruption
           COMMAND sh -c "! \"$0\" soak -n 2 --seconds 5 --seed 7 --inject-corruption > soak.out 2>&1 && \
                          grep -q 'wrong bytes' soak.out"
                   $<TARGET_FILE:remora_tool>)
  set_tests_properties(remora_soak remora_soak_detects_corruption PROPERTIES LABELS "tools" TIMEOUT 300
                       ENVIRONMENT_MODIFICATION
                       "REMORA_RANK=unset:;RANK=unset:;OMPI_COMM_WORLD_RANK=unset:;PMI_RANK=unset:;SLURM_PROCID=unset:")
  if(REMORA_SANITIZE)
    # ASan's quarantine keeps up to 256 MiB of freed memory before reusing it: the soak
    # would read it as growth. 16 MiB keeps use-after-free detection and a flat RSS.
    set_property(TEST remora_soak APPEND PROPERTY ENVIRONMENT_MODIFICATION "ASAN_OPTIONS=string_append::quarantine_size_mb=16")
  endif()

  set_tests_properties(${coll_tests} remora_perf_tests remora_version remora_config_table_code_and_docs_agree
                       remora_config_lists_every_variable remora_demo remora_demo_detects_corruption remora_bench_p2p_bw remora_bench_p2p_bw_register
                       remora_bench_p2p_bibw remora_bench_p2p_lat remora_bench_rma_put_bw remora_bench_rma_get_bw
                       remora_bench_rma_put_lat remora_bench_rma_get_lat remora_bench_rma_put_rate remora_bench_rma_notify_lat
                       remora_bench_rma_atomic_lat
                       remora_bench_rma_detects_corruption remora_bench_memory_json remora_bench_p2p_memory_refusals
                       remora_bench_p2p_device_detects_corruption PROPERTIES LABELS "tools" TIMEOUT 120)
endif()
