# cmake -DREADELF=<readelf> -DLIBRARY=<libremora.so> -P check_no_cuda_link.cmake
#
# libremora must not need any CUDA library at load time: the driver is dlopen'ed at run
# time (src/device/cuda_driver.cc). Fails naming the NEEDED entry that says otherwise.
execute_process(COMMAND ${READELF} -d ${LIBRARY} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIBRARY} failed (${rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${dynamic}")
if(NOT needed)
  message(FATAL_ERROR "no NEEDED entries in ${LIBRARY}: is it a shared library?")
endif()
foreach(entry ${needed})
  if(entry MATCHES "cuda|cudart|nvrtc|nvidia")
    message(FATAL_ERROR "${LIBRARY} links a CUDA library: ${entry}")
  endif()
endforeach()
message(STATUS "${LIBRARY} needs no CUDA library: ${needed}")
