// zerocopy/kernel_error.h — how the kernel refused something: its errno and, for netlink,
// its extended-ack message; and the one way this layer spells an errno in a message
// ("EOPNOTSUPP (Operation not supported)"). The probes keep a KernelError next to their
// Status so that `remora doctor` can report the raw answer as well as the explanation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace remora::zerocopy {

/// What the kernel answered when it refused a request.
struct KernelError {
  int err = 0;                              ///< positive errno; 0 when the kernel did not refuse
  std::string message;                      ///< netlink extended-ack message ("" when none came)
  std::optional<uint32_t> bad_attr_offset;  ///< netlink: offset in our request of the attribute it objected to
  std::optional<uint16_t> bad_attr_type;    ///< netlink: that attribute's type (found in our request)
  std::optional<uint32_t> missing_attr;     ///< netlink: the attribute type it missed

  /// "EOPNOTSUPP (Operation not supported): Driver does not support netmem TX", then
  /// " (objected to attribute type 1)" or " (missing attribute type 3)" where known.
  std::string to_string() const;
};

/// "EINVAL (Invalid argument)"; an unknown number as "errno 1234 (Unknown error 1234)".
std::string errno_text(int err);

}  // namespace remora::zerocopy
