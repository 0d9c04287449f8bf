// zerocopy/kernel_error.cc — see kernel_error.h.
#include "zerocopy/kernel_error.h"

#include <cstring>

#include <fmt/format.h>

namespace remora::zerocopy {

std::string errno_text(int err) {
  const char* name = strerrorname_np(err);
  return fmt::format("{} ({})", name != nullptr ? std::string(name) : fmt::format("errno {}", err), std::strerror(err));
}

std::string KernelError::to_string() const {
  std::string text = errno_text(err);
  if (!message.empty()) text += ": " + message;
  if (bad_attr_type) text += fmt::format(" (objected to attribute type {})", *bad_attr_type);
  if (missing_attr) text += fmt::format(" (missing attribute type {})", *missing_attr);
  return text;
}

}  // namespace remora::zerocopy
