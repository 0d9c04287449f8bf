# The `remora` command-line tool: a thin CLI (remora.cc) over the perf library
# (perf/), which holds the p2p benchmarks and the two-process demo.
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json REQUIRED)

add_library(remora_perf STATIC
  ${CMAKE_CURRENT_LIST_DIR}/perf/session.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf/p2p.cc
  ${CMAKE_CURRENT_LIST_DIR}/perf/demo.cc)
target_include_directories(remora_perf PUBLIC ${CMAKE_CURRENT_LIST_DIR}/perf)
target_compile_options(remora_perf PRIVATE ${REMORA_WARNINGS})
target_link_libraries(remora_perf PUBLIC remora_static nlohmann_json::nlohmann_json fmt::fmt Threads::Threads)

add_executable(remora_tool ${CMAKE_CURRENT_LIST_DIR}/remora.cc)
set_target_properties(remora_tool PROPERTIES OUTPUT_NAME remora)
# -Wno-null-dereference: GCC 12 flags CLI11's own string splitting (a false positive
# that surfaces only once its templates are inlined here).
target_compile_options(remora_tool PRIVATE ${REMORA_WARNINGS} -Wno-null-dereference)
target_link_libraries(remora_tool PRIVATE remora_perf CLI11::CLI11 fmt::fmt)
install(TARGETS remora_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
