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

if(REMORA_CUDA_HEADERS)
  message(STATUS "remora: CUDA API declarations checked against ${REMORA_CUDA_INCLUDE_DIR}/cuda.h")
endif()

# Adds the toolkit-dependent sources to the device layer's target.
function(remora_cuda_parts target)
  if(REMORA_CUDA_HEADERS)
    set(check ${PROJECT_SOURCE_DIR}/src/device/cuda_api_check.cc)
    target_sources(${target} PRIVATE ${check})
    # -isystem: the toolkit's headers are not ours to hold to our warnings.
    set_source_files_properties(${check} PROPERTIES COMPILE_OPTIONS "-isystem;${REMORA_CUDA_INCLUDE_DIR}")
  endif()
endfunction()
