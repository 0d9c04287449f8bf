# cmake -DREADELF=<readelf> -DLIBRARY=<libplugin_REMORA.so> -P check_plugin_elf.cmake
#
# The NIXL plugin needs neither NIXL nor CUDA at load time (it declares NIXL's interface
# itself and loads CUDA's driver with dlopen), and its dynamic symbol table defines exactly
# nixl_plugin_init and nixl_plugin_fini: remora and the NIXL-named classes of nixl_abi.h
# stay inside, so nothing can bind to libnixl.so's symbols of the same names.
execute_process(COMMAND ${READELF} -d ${LIBRARY} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIBRARY} failed (${rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${dynamic}")
foreach(entry ${needed})
  if(entry MATCHES "nixl|cuda|cudart|nvidia|ucx|ucp|ucs")
    message(FATAL_ERROR "${LIBRARY} links a NIXL, UCX or CUDA library: ${entry}")
  endif()
endforeach()
execute_process(COMMAND ${READELF} --dyn-syms -W ${LIBRARY} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} --dyn-syms ${LIBRARY} failed (${rc})")
endif()
# Defined (section index not UND), global or weak, of any type.
string(REGEX MATCHALL "[^\n]*(OBJECT|FUNC|NOTYPE|TLS) +(GLOBAL|WEAK|UNIQUE) +DEFAULT +[0-9]+ [^\n]*" defined "${syms}")
set(names)
foreach(line ${defined})
  string(REGEX REPLACE ".* ([^ ]+)$" "\\1" name "${line}")
  list(APPEND names ${name})
endforeach()
list(SORT names)
set(expected nixl_plugin_fini nixl_plugin_init)
if(NOT names STREQUAL expected)
  message(FATAL_ERROR "${LIBRARY} defines [${names}], expected exactly [${expected}]")
endif()
# Undefined symbols must all be the C and C++ runtimes' or the system libraries' (NEEDED):
# nothing may be left for libnixl.so to satisfy.
string(REGEX MATCHALL "[^\n]* UND [^\n]*" undefined "${syms}")
foreach(line ${undefined})
  if(line MATCHES "nixl")
    message(FATAL_ERROR "${LIBRARY} expects NIXL to define a symbol: ${line}")
  endif()
endforeach()
message(STATUS "${LIBRARY}: exports ${names}; needs ${needed}")
