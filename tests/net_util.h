// tests/net_util.h — small socket helpers shared by the unit and integration tests.
#pragma once

#include <cstdint>

#include <gtest/gtest.h>

#include "../tools/store_port.h"

namespace remora::test {

/// A loopback TCP port that was free a moment ago, for a rendezvous store the ranks of
/// a test host: `remora run`'s choice (tools/store_port.h), outside the ephemeral range.
inline uint16_t free_tcp_port() {
  const auto port = tools::free_store_port();
  if (!port) ADD_FAILURE() << "no free TCP port outside the ephemeral range in 1000 tries";
  return port.value_or(0);
}

}  // namespace remora::test
