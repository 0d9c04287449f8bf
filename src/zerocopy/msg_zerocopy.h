// zerocopy/msg_zerocopy.h — the MSG_ZEROCOPY probe: SO_ZEROCOPY on a TCP socket, one
// MSG_ZEROCOPY send over a loopback connection made for the purpose, and its completion
// read from the error queue (SO_EE_ORIGIN_ZEROCOPY), which also says whether the kernel
// fell back to copying (SO_EE_CODE_ZEROCOPY_COPIED: loopback always does, since the
// receiver gets the pages; zero copy happens on a NIC's transmit path).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "remora/status.h"
#include "zerocopy/kernel_error.h"

namespace remora::zerocopy {

/// What probe_msg_zerocopy() saw.
struct MsgZerocopyProbe {
  bool so_zerocopy = false;      ///< setsockopt(SO_ZEROCOPY, 1) accepted
  bool completed = false;        ///< the send's completion came back on the error queue
  bool copied = false;           ///< ... with SO_EE_CODE_ZEROCOPY_COPIED
  uint32_t first = 0, last = 0;  ///< the completion's range of send sequence numbers
  KernelError refusal;           ///< the errno of the step that failed, if one did
};

/// Runs the probe: ok when SO_ZEROCOPY was accepted and a MSG_ZEROCOPY send completed
/// within `timeout` (without sleeping: it polls the socket for POLLERR); otherwise the
/// step that failed and its errno, in the Status and in `out->refusal`.
Status probe_msg_zerocopy(MsgZerocopyProbe* out, std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace remora::zerocopy
