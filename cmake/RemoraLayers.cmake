# remora_layer(<name> [DEPS <lower layers...>] SOURCES <files...> [LIBS <libs...>])
#
# Builds one layer as an OBJECT library. Its private include root
# (${CMAKE_BINARY_DIR}/layers/<name>) holds symlinks to src/<name> and to the
# src/ folders of its DEPS only, so `#include "transport/x.h"` from a lower layer
# fails to compile: the layering is enforced by the build, not by review.
function(remora_layer name)
  cmake_parse_arguments(L "" "" "DEPS;SOURCES;LIBS" ${ARGN})
  add_library(remora_${name} OBJECT ${L_SOURCES})
  remora_layer_include_root(${name} root ${L_DEPS})
  target_include_directories(remora_${name} PUBLIC ${root} ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(remora_${name} PRIVATE ${REMORA_WARNINGS})
  target_link_libraries(remora_${name} PUBLIC ${L_LIBS} fmt::fmt Threads::Threads)
  set_property(GLOBAL PROPERTY REMORA_LAYER_DEPS_${name} ${L_DEPS})
endfunction()

# Creates the include root for a layer (or a test of that layer) and returns its path.
function(remora_layer_include_root name out_var)
  set(root ${CMAKE_BINARY_DIR}/layers/${name})
  file(MAKE_DIRECTORY ${root})
  foreach(dep ${name} ${ARGN})
    if(NOT EXISTS ${root}/${dep})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${dep} ${root}/${dep} SYMBOLIC)
    endif()
  endforeach()
  set(${out_var} ${root} PARENT_SCOPE)
endfunction()
