# The parts of remora that need a CUDA toolkit at build time. The CUDA memory domain
# itself needs none: it loads the driver with dlopen at run time (src/device/), so the
# library builds and runs on any machine. With a toolkit, the build adds
#   - the scatter ("unpack") kernel, src/device/cuda_unpack.cu, compiled by nvcc to a
#     fatbin (sm_80, sm_90, and compute_90 PTX that newer GPUs compile when loading it)
#     and embedded in the library as bytes (cmake/RemoraEmbed.cmake);
#   - src/device/cuda_api_check.cc, which checks at compile time that our declarations
#     of the driver API (src/device/cuda_api.h) match the toolkit's cuda.h.
#
# REMORA_CUDA: AUTO (use a toolkit when find_package(CUDAToolkit) finds one), ON
# (require one), OFF (do not look). Point CMake at a toolkit with
# -DCUDAToolkit_ROOT=/usr/local/cuda-13.0 when several are installed.
# No enable_language(CUDA): nvcc runs as a plain custom command, so a machine without
# it, or with an nvcc that CMake's CUDA language support would reject, still configures.
set(REMORA_CUDA AUTO CACHE STRING "Build the CUDA unpack kernel and the cuda.h check: AUTO, ON or OFF")
set_property(CACHE REMORA_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${REMORA_CUDA}" remora_cuda_mode)
if(NOT remora_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "REMORA_CUDA must be AUTO, ON or OFF, not '${REMORA_CUDA}'")
endif()

set(REMORA_CUDA_HEADERS OFF)  # cuda.h found: compile the declaration check
set(REMORA_CUDA_KERNEL OFF)   # nvcc found and working: build the unpack kernel
set(remora_cuda_why "REMORA_CUDA=OFF")
if(NOT remora_cuda_mode STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  set(remora_cuda_why "no CUDA toolkit found (set CUDAToolkit_ROOT to use one)")
  if(CUDAToolkit_FOUND)
    find_path(REMORA_CUDA_INCLUDE_DIR cuda.h PATHS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
    if(REMORA_CUDA_INCLUDE_DIR)
      set(REMORA_CUDA_HEADERS ON)
    endif()
    set(remora_cuda_why "CUDA toolkit ${CUDAToolkit_VERSION} has no nvcc")
    if(CUDAToolkit_NVCC_EXECUTABLE)
      execute_process(COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} --version
                      RESULT_VARIABLE remora_nvcc_rc OUTPUT_QUIET ERROR_QUIET)
      if(remora_nvcc_rc EQUAL 0)
        set(REMORA_CUDA_KERNEL ON)
      else()
        set(remora_cuda_why "${CUDAToolkit_NVCC_EXECUTABLE} --version failed (${remora_nvcc_rc})")
      endif()
    endif()
  endif()
  if(remora_cuda_mode STREQUAL "ON" AND NOT (REMORA_CUDA_KERNEL AND REMORA_CUDA_HEADERS))
    message(FATAL_ERROR "REMORA_CUDA=ON but ${remora_cuda_why}")
  endif()
endif()

# The architectures the kernel is compiled for: machine code for each, and PTX of the
# last for GPUs newer than all of them.
set(REMORA_CUDA_ARCHITECTURES 80 90 CACHE STRING "GPU architectures (sm_XX) of the CUDA unpack kernel")

if(REMORA_CUDA_KERNEL)
  list(GET REMORA_CUDA_ARCHITECTURES -1 remora_cuda_ptx_arch)
  list(TRANSFORM REMORA_CUDA_ARCHITECTURES PREPEND sm_ OUTPUT_VARIABLE remora_cuda_sms)
  list(JOIN remora_cuda_sms ", " remora_cuda_sms)
  message(STATUS "remora: CUDA unpack kernel: built by ${CUDAToolkit_NVCC_EXECUTABLE} "
                 "(CUDA ${CUDAToolkit_VERSION}; ${remora_cuda_sms}, compute_${remora_cuda_ptx_arch} PTX)")
else()
  message(STATUS "remora: CUDA unpack kernel: not built (${remora_cuda_why}); CUDA scatters copy entry by entry")
endif()

# Adds the toolkit-dependent sources to the device layer's target.
function(remora_cuda_parts target)
  if(REMORA_CUDA_HEADERS)
    set(check ${PROJECT_SOURCE_DIR}/src/device/cuda_api_check.cc)
    target_sources(${target} PRIVATE ${check})
    # -isystem: the toolkit's headers are not ours to hold to our warnings.
    set_source_files_properties(${check} PROPERTIES COMPILE_OPTIONS "-isystem;${REMORA_CUDA_INCLUDE_DIR}")
  endif()
  if(NOT REMORA_CUDA_KERNEL)
    return()
  endif()
  set(out ${CMAKE_BINARY_DIR}/cuda)
  set(fatbin ${out}/cuda_unpack.fatbin)
  set(embedded ${out}/cuda_unpack_fatbin.cc)
  set(gencode)
  foreach(arch ${REMORA_CUDA_ARCHITECTURES})
    list(APPEND gencode -gencode arch=compute_${arch},code=sm_${arch})
  endforeach()
  list(APPEND gencode -gencode arch=compute_${remora_cuda_ptx_arch},code=compute_${remora_cuda_ptx_arch})
  set(host_compiler)
  if(CMAKE_CUDA_HOST_COMPILER)
    set(host_compiler -ccbin ${CMAKE_CUDA_HOST_COMPILER})
  endif()
  add_custom_command(
    OUTPUT ${fatbin}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out}
    COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} -fatbin -std=c++17 -O3 ${host_compiler} ${gencode}
            -I${PROJECT_SOURCE_DIR}/src -o ${fatbin} ${PROJECT_SOURCE_DIR}/src/device/cuda_unpack.cu
    DEPENDS ${PROJECT_SOURCE_DIR}/src/device/cuda_unpack.cu ${PROJECT_SOURCE_DIR}/src/device/unpack_layout.h
            ${PROJECT_SOURCE_DIR}/src/device/unpack_copy.h
    COMMENT "nvcc: CUDA unpack kernel -> ${fatbin}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${embedded}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${fatbin} -DOUTPUT=${embedded} -DHEADER=device/cuda_unpack.h
            -DNAMESPACE=remora::device -DFUNCTION=unpack_fatbin -P ${PROJECT_SOURCE_DIR}/cmake/RemoraEmbed.cmake
    DEPENDS ${fatbin} ${PROJECT_SOURCE_DIR}/cmake/RemoraEmbed.cmake
    COMMENT "Embedding the CUDA unpack kernel in libremora"
    VERBATIM)
  target_sources(${target} PRIVATE ${embedded})
  target_compile_definitions(${target} PRIVATE REMORA_CUDA_UNPACK_KERNEL=1)
  set(REMORA_CUDA_FATBIN ${fatbin} PARENT_SCOPE)
endfunction()
