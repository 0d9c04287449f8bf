// tests/nccl/installed_nccl.h — what installed_nccl.cc reads from NCCL's headers.
#pragma once

#include <array>
#include <cstddef>

struct InstalledNccl {
  int version_code = 0;
  std::array<int, 8> results{};
  int device_host = -1, device_unpack = -1;
  size_t device_handle_size = 0, device_handle_size_offset = 0, device_handle_proxy_offset = 0;
};
InstalledNccl installed_nccl();
