// device/cuda_copy.h — how a CUDA copy ends: an event recorded after it on its stream,
// and a host function behind the event (on a stream of its own, so that it holds up no
// copy) that ends it for test(), wait() and on_done(); a small copy is polled for first;
// where the driver drops the host function (after a context-wide error), a process-wide
// watcher thread ends it from the event. The domain (device/cuda_domain.h) enqueues the
// copy; this tracks its end.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "device/cuda_driver.h"
#include "remora/memory.h"

namespace remora::device {

/// Call with `ctx` current right after enqueuing a copy (or a scatter) on `stream`, with
/// nothing else enqueued there in between: records an event there, and enqueues on
/// `notify` a wait for that event and the host function behind it (so that the host
/// function holds up no copy), and returns the copy's AsyncCopy, whose on_done is
/// called exactly once.
/// On an error nothing is tracked and the work already enqueued may still run: the
/// caller waits for the stream before it returns the error. `context_hold`, where
/// given, keeps `ctx` alive (the domain's retain of a primary context) until the event
/// is destroyed, which may be after the domain that enqueued the copy is gone: an event
/// must be destroyed in a live context.
///
/// `spin`: how long on_done may poll the event before it leaves the copy to the host
/// function. A small copy ends within microseconds of its launch, and the driver's host
/// function reports it far later (about 150 µs per copy measured on an H100 in a VM);
/// polling for it briefly keeps small device transfers from paying that. 0: no polling.
Result<std::unique_ptr<AsyncCopy>> track_copy_end(const CudaDriver& driver, cu::CUcontext ctx, cu::CUstream stream,
                                                  cu::CUstream notify, std::string what,
                                                  std::shared_ptr<const void> context_hold = nullptr,
                                                  std::chrono::microseconds spin = std::chrono::microseconds(0));

/// An AsyncCopy that has already ended (a copy of 0 bytes, an empty scatter).
std::unique_ptr<AsyncCopy> completed_copy();

}  // namespace remora::device
