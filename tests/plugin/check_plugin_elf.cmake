# cmake -DREADELF=<readelf> -DLIBRARY=<plugin.so> -DEXPORTS=<a,b,...> -DFORBIDDEN=<regex>
#       [-DFORBIDDEN_UNDEFINED=<regex>] -P check_plugin_elf.cmake
#
# A plugin that a host program (NCCL, NIXL) dlopens must load without the host's or
# CUDA's libraries (none of its NEEDED entries matches FORBIDDEN), must define exactly
# EXPORTS in its dynamic symbol table (remora's own symbols stay inside, so nothing binds
# to the host's symbols of the same names), and, with FORBIDDEN_UNDEFINED, must leave no
# undefined symbol matching it for the host to satisfy.
foreach(arg READELF LIBRARY EXPORTS FORBIDDEN)
  if(NOT DEFINED ${arg})
    message(FATAL_ERROR "check_plugin_elf.cmake: -D${arg}= is missing")
  endif()
endforeach()
execute_process(COMMAND ${READELF} -d ${LIBRARY} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIBRARY} failed (${rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${dynamic}")
foreach(entry ${needed})
  if(entry MATCHES "${FORBIDDEN}")
    message(FATAL_ERROR "${LIBRARY} links a library it must load without: ${entry}")
  endif()
endforeach()
execute_process(COMMAND ${READELF} --dyn-syms -W ${LIBRARY} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} --dyn-syms ${LIBRARY} failed (${rc})")
endif()
# Defined (section index not UND), global, weak or unique, of any type.
string(REGEX MATCHALL "[^\n]*(OBJECT|FUNC|NOTYPE|TLS) +(GLOBAL|WEAK|UNIQUE) +DEFAULT +[0-9]+ [^\n]*" defined "${syms}")
set(names)
foreach(line ${defined})
  string(REGEX REPLACE ".* ([^ ]+)$" "\\1" name "${line}")
  list(APPEND names ${name})
endforeach()
list(SORT names)
string(REPLACE "," ";" expected "${EXPORTS}")
list(SORT expected)
if(NOT names STREQUAL expected)
  message(FATAL_ERROR "${LIBRARY} defines [${names}], expected exactly [${expected}]")
endif()
if(DEFINED FORBIDDEN_UNDEFINED)
  string(REGEX MATCHALL "[^\n]* UND [^\n]*" undefined "${syms}")
  foreach(line ${undefined})
    if(line MATCHES "${FORBIDDEN_UNDEFINED}")
      message(FATAL_ERROR "${LIBRARY} expects its host to define a symbol: ${line}")
    endif()
  endforeach()
endif()
message(STATUS "${LIBRARY}: exports ${names}; needs ${needed}")
