# examples/check_readme_excerpts.cmake — fails when a code block of README.md is not,
# byte for byte, the region of an example it says it is, or when an example marks a
# region that README.md does not show. A CTest test (examples/CMakeLists.txt):
#   cmake -DREADME=<README.md> -DROOT=<source dir> -P check_readme_excerpts.cmake
#
# In README.md, an excerpt is a ```cpp block right after a line
#   <!-- excerpt of examples/api_tour.cc [readme-api-tour] -->
# and in the example, its region is every line between
#   // [readme-api-tour begin]
#   // [readme-api-tour end]
# (each at the start of a line). Editing either one without the other fails the test,
# with a diff; copy the example's region into README.md to fix it.
cmake_minimum_required(VERSION 3.25)

if(NOT DEFINED README OR NOT DEFINED ROOT)
  message(FATAL_ERROR "usage: cmake -DREADME=<README.md> -DROOT=<source dir> -P check_readme_excerpts.cmake")
endif()
file(READ "${README}" readme)
get_filename_component(readme_name "${README}" NAME)
set(fence "```")
set(errors "")
set(shown "")  # file:name of every excerpt README.md shows

# The region of `name` in the file `rel` (relative to ROOT), or an error.
function(read_region rel name out_text out_error)
  set(${out_text} "" PARENT_SCOPE)
  if(NOT EXISTS "${ROOT}/${rel}")
    set(${out_error} "${readme_name} shows an excerpt of ${rel}, which does not exist" PARENT_SCOPE)
    return()
  endif()
  file(READ "${ROOT}/${rel}" src)
  set(begin_marker "// [${name} begin]\n")
  string(FIND "${src}" "${begin_marker}" first)
  string(FIND "${src}" "${begin_marker}" last REVERSE)
  if(first EQUAL -1 OR NOT first EQUAL last)
    set(${out_error} "${rel} must mark [${name}] with exactly one '// [${name} begin]' line" PARENT_SCOPE)
    return()
  endif()
  string(LENGTH "${begin_marker}" n)
  math(EXPR start "${first} + ${n}")
  string(SUBSTRING "${src}" ${start} -1 tail)
  string(FIND "${tail}" "// [${name} end]" end)
  if(end EQUAL -1)
    set(${out_error} "${rel} has no '// [${name} end]' line after its begin marker" PARENT_SCOPE)
    return()
  endif()
  string(SUBSTRING "${tail}" 0 ${end} text)
  set(${out_text} "${text}" PARENT_SCOPE)
  set(${out_error} "" PARENT_SCOPE)
endfunction()

set(rest "${readme}")
set(marker_regex "<!-- excerpt of ([^ ]+) \\[([A-Za-z0-9_-]+)\\] -->")
while(TRUE)
  string(REGEX MATCH "${marker_regex}" marker "${rest}")
  if(marker STREQUAL "")
    break()
  endif()
  set(rel "${CMAKE_MATCH_1}")
  set(name "${CMAKE_MATCH_2}")
  list(APPEND shown "${rel}:${name}")
  string(FIND "${rest}" "${marker}" at)
  string(LENGTH "${marker}" n)
  math(EXPR after "${at} + ${n}")
  string(SUBSTRING "${rest}" ${after} -1 rest)
  # The block starts on the next line and ends at the next fence.
  set(open "\n${fence}cpp\n")
  string(LENGTH "${open}" open_length)
  string(SUBSTRING "${rest}" 0 ${open_length} head)
  if(NOT head STREQUAL open)
    string(APPEND errors "${readme_name}: '${marker}' is not followed, on the next line, by a ${fence}cpp block\n")
    continue()
  endif()
  string(SUBSTRING "${rest}" ${open_length} -1 rest)
  string(FIND "${rest}" "\n${fence}" close)
  if(close EQUAL -1)
    string(APPEND errors "${readme_name}: the ${fence}cpp block after '${marker}' never ends\n")
    break()
  endif()
  math(EXPR block_length "${close} + 1")  # the block's last newline included, as in the region
  string(SUBSTRING "${rest}" 0 ${block_length} block)
  string(SUBSTRING "${rest}" ${block_length} -1 rest)

  read_region("${rel}" "${name}" region error)
  if(NOT error STREQUAL "")
    string(APPEND errors "${error}\n")
  elseif(NOT block STREQUAL region)
    file(WRITE "${name}.readme" "${block}")
    file(WRITE "${name}.example" "${region}")
    execute_process(COMMAND diff -u --label "${readme_name}" --label "${rel}" "${name}.readme" "${name}.example"
                    OUTPUT_VARIABLE diff ERROR_QUIET)
    string(APPEND errors "${readme_name}: the excerpt of ${rel} [${name}] differs from the example; copy the lines "
                         "between its markers into ${readme_name}:\n${diff}\n")
  endif()
endwhile()

if(shown STREQUAL "")
  string(APPEND errors "${readme_name} marks no excerpt ('<!-- excerpt of <file> [<name>] -->'); expected at least one\n")
endif()

# Every region an example marks is in the README.
file(GLOB examples RELATIVE "${ROOT}" "${ROOT}/examples/*.cc")
foreach(rel IN LISTS examples)
  file(READ "${ROOT}/${rel}" src)
  string(REGEX MATCHALL "// \\[[A-Za-z0-9_-]+ begin\\]" begins "${src}")
  foreach(begin IN LISTS begins)
    string(REGEX REPLACE "// \\[([A-Za-z0-9_-]+) begin\\]" "\\1" name "${begin}")
    if(NOT "${rel}:${name}" IN_LIST shown)
      string(APPEND errors "${rel} [${name}] is not shown in ${readme_name}: put its region there in a ${fence}cpp "
                           "block right after '<!-- excerpt of ${rel} [${name}] -->'\n")
    endif()
  endforeach()
endforeach()

if(NOT errors STREQUAL "")
  message(NOTICE "${errors}")  # as it is: FATAL_ERROR would re-wrap the diffs
  message(FATAL_ERROR "${readme_name} and the examples it quotes are out of step (above)")
endif()
list(LENGTH shown count)
message(STATUS "${readme_name}: ${count} excerpts, each identical to its example")
