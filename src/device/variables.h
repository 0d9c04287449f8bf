// device/variables.h — the REMORA_* variables the device layer reads
// (device/cuda_driver.cc), for core's unknown-variable warning (core/env.h).
#pragma once

#include "core/env.h"

namespace remora::device {

/// REMORA_CUDA_DRIVER: the CUDA driver library to load instead of libcuda.so.1.
core::VariableTable variables() noexcept;

}  // namespace remora::device
