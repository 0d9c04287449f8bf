// python/torch/csrc/backend.h — ProcessGroupRemora: a c10d::Backend (torch.distributed)
// whose collectives and point-to-point messages run on a remora::Communicator.
//
// Bootstrap: the communicator's ranks meet through the c10d::Store that
// init_process_group hands the backend (torchrun's rendezvous), via
// remora::init_communicator (include/remora/external_store.h).
//
// Execution: every operation is posted to the communicator at once (its i-form, run by
// the communicator's worker thread in call order; send/recv go straight to the
// endpoint) and returns a WorkRemora holding the tensors. A completion thread waits
// for posted works in order, finishes them (copies out of staging buffers) and
// completes their futures; Work::wait finishes a work itself without waiting for that
// thread. Each operation is bounded by the process group's timeout; a failure (a dead
// rank, the timeout) breaks the communicator, so every rank's outstanding and later
// works fail with a DistBackendError instead of hanging.
//
// One-sided windows (window.h) where PyTorch has them (C10D_BACKEND_HAS_WINDOW, 2.15):
// new_window returns a WindowRemora; against older headers the backend builds without.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "remora/communicator.h"
#include "remora/context.h"
#include "remora/request.h"

// Windows are built where the installed PyTorch declares them (tests/torch compiles
// every source against its headers with the window section taken out as well).
#ifdef C10D_BACKEND_HAS_WINDOW
#define REMORA_TORCH_WINDOWS 1
#endif

namespace remora_torch {

/// One posted operation: the remora requests it waits for, the tensors it keeps alive,
/// and what runs once they are done (copies out of staging buffers).
class WorkRemora : public c10d::Work {
 public:
  WorkRemora(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
             std::chrono::milliseconds timeout, std::shared_ptr<remora::Communicator> comm);
  ~WorkRemora() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  /// The sender of a receive from any rank (recvAnysource); c10d's refusal otherwise.
  int sourceRank() const override;
  // Overrides c10d::Work::getTimeout where PyTorch has it (2.15 does, 2.11 does not), so
  // no `override`: the same source builds against both.
  std::chrono::milliseconds getTimeout() const { return timeout_; }

  /// Filled by the backend before the work is handed out.
  std::vector<remora::Request> requests;
  std::vector<at::Tensor> keep_alive;  ///< inputs and staging buffers
  std::function<void()> on_success;    ///< copies results into the caller's tensors
  bool is_p2p = false;                 ///< send/recv: unbounded by remora, bounded here
  /// Set by a receive from any rank before it completes (the sender's rank).
  std::shared_ptr<int> any_source;
  /// Instead of `requests`: a wait that takes what it waits for (a window's signal).
  /// Called with a slice of time; kTimeout: nothing yet, anything else ends the work.
  /// One caller at a time; the work's timeout ends it with kTimeout, breaking nothing.
  std::function<remora::Status(std::chrono::milliseconds)> step;

  /// Waits for the requests up to `timeout` (false: not done yet), then finishes once.
  bool drive(std::chrono::milliseconds timeout);

 private:
  void finish_once(const remora::Status& status);
  bool drive_step(std::chrono::steady_clock::time_point deadline);

  const char* name_;
  std::vector<at::Tensor> outputs_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point started_;
  std::shared_ptr<remora::Communicator> comm_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> timed_out_{false};  ///< a send/recv went past the group's timeout
  std::mutex finish_mu_;
  bool finished_ = false;
  std::mutex step_mu_;  ///< one thread in `step` at a time
};

class ProcessGroupRemora : public c10d::Backend {
 public:
  /// Meets the other ranks through `store`; throws DistBackendError on failure.
  ProcessGroupRemora(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout, const std::string& host, int local_size);
  ~ProcessGroupRemora() override;

  const std::string getBackendName() const override { return "remora"; }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

#ifdef REMORA_TORCH_WINDOWS
  bool supportsWindow() const override { return true; }
  /// Collective: a WindowRemora over a communicator split from this group's.
  c10::intrusive_ptr<c10d::Window> new_window(const std::optional<at::Tensor>& tensor = std::nullopt) override;
#endif

  void abort() override;
  void shutdown() override;
  /// Collectives issued on this group so far (as gloo counts them): equal on every rank
  /// while they agree, which TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper checks.
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  /// The algorithm remora runs for an allreduce of `bytes` (for benchmarks and tests).
  std::string allreduce_algorithm(size_t bytes) const;
  /// What this rank holds to reach the others (remora::Communicator::connections).
  remora::ConnectionStats connections() const;

  // For windows (window.cc): works of this group, its context and communicator.
  c10::intrusive_ptr<WorkRemora> make_work(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                           std::shared_ptr<remora::Communicator> comm = nullptr,
                                           std::chrono::milliseconds timeout = c10d::kUnsetTimeout);
  c10::intrusive_ptr<c10d::Work> enqueue(c10::intrusive_ptr<WorkRemora> work);
  /// A call's own timeout if set (> 0), else the group's.
  std::chrono::milliseconds op_timeout(std::chrono::milliseconds requested) const;
  const std::shared_ptr<remora::Context>& context() const noexcept { return ctx_; }
  const std::shared_ptr<remora::Communicator>& communicator() const noexcept { return comm_; }

 private:
  remora::CollectiveOptions coll_options(std::chrono::milliseconds op_timeout) const;
  void completion_loop();

  std::chrono::milliseconds timeout_;
  std::atomic<uint64_t> seq_{0};
  std::shared_ptr<remora::Context> ctx_;
  std::shared_ptr<remora::Communicator> comm_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkRemora>> queue_;
  bool stop_ = false;
  std::thread completer_;
};

}  // namespace remora_torch
