// python/torch/csrc/window.h — WindowRemora: c10d's one-sided window (PyTorch 2.15,
// torch/csrc/distributed/c10d/Window.hpp) over remora's registered memory, puts and
// notifications. Built only where the installed PyTorch has windows (backend.h).
//
// A window is a communicator split from the process group's (its own notifications,
// which nothing else consumes) and, once a tensor is registered, a remora Region of
// that tensor with the remote-write right; every rank's RemoteKey, dtype, size and host
// are exchanged by an allgather at registration. Then, as with PyTorch's NCCL window:
//   put(t, dst, offset)  writes t into rank dst's tensor at element `offset` (a remora
//                        put with a notification: it also signals dst once, delivered
//                        after its bytes are in dst's tensor);
//   signal(peer)         one notification alone, posted once this window's earlier puts
//                        to that rank have completed (their bytes are there);
//   wait_signal(peer)    takes one notification from that rank (a put's or a signal's),
//                        so once it returns, the put it counted is visible here.
// Memory is never exposed beyond what was registered: the target checks every put
// against its key and bounds before a byte lands, and deregistration (tensor_deregister
// or freeing the window) revokes the key, waits until no put is writing into the tensor,
// and only then lets the tensor go; a put arriving after that fails at its initiator.
#pragma once

#include "backend.h"

#ifdef REMORA_TORCH_WINDOWS

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Window.hpp>

#include "remora/memory.h"

namespace remora_torch {

class WindowRemora : public c10d::Window {
 public:
  /// Collective over `pg` (as new_window is): splits the window's communicator off.
  explicit WindowRemora(c10::intrusive_ptr<ProcessGroupRemora> pg);
  /// Revokes the registration (waiting for puts writing into it), then lets go.
  ~WindowRemora() override;
  WindowRemora(const WindowRemora&) = delete;
  WindowRemora& operator=(const WindowRemora&) = delete;

  /// Collective. Registers `tensor` (dense, contiguous, CPU; CUDA through remora's
  /// CUDA domain where there is a driver) for peers' puts. The window holds the
  /// tensor while it is registered whatever `owning` says: remora writes into it.
  void tensor_register(const at::Tensor& tensor, bool owning = true) override;
  /// Collective: every rank deregisters, between two barriers.
  void tensor_deregister() override;
  c10::intrusive_ptr<c10d::Work> put(const at::Tensor& tensor, int64_t dst_rank, int64_t target_offset_nelems,
                                     bool async_op, const c10d::PutOptions& opts = c10d::PutOptions()) override;
  /// The registered tensor of this rank; a peer's memory cannot be mapped (it is in
  /// another process), which raises naming where it is.
  at::Tensor map_remote_tensor(int64_t rank) override;
  c10::intrusive_ptr<c10d::Work> signal(int64_t peer_rank, bool async_op,
                                        const c10d::SignalOptions& opts = c10d::SignalOptions()) override;
  c10::intrusive_ptr<c10d::Work> wait_signal(int64_t peer_rank, bool async_op,
                                             const c10d::WaitSignalOptions& opts = c10d::WaitSignalOptions()) override;
  /// UNIFIED for this rank (map_remote_tensor gives its tensor), SEPARATE for peers
  /// (reached over the network only).
  c10d::WindowAttr get_attr(int64_t peer_rank) override;

 private:
  /// What every rank publishes at registration.
  struct Peer {
    remora::RemoteKey key;
    at::ScalarType dtype = at::kByte;
    int64_t numel = 0;
    bool cuda = false;
    std::string host;
  };

  void check_registered(const char* what) const;
  void check_rank(const char* what, int64_t rank) const;
  void exchange(const at::Tensor& tensor);
  /// Waits (bounded) for this window's earlier puts to `peer`; their first failure.
  remora::Status settle_puts(int peer, std::chrono::milliseconds timeout);
  c10::intrusive_ptr<c10d::Work> finish(c10::intrusive_ptr<WorkRemora> work, bool async_op);
  c10::intrusive_ptr<c10d::Work> put_self(const at::Tensor& src, int64_t offset, bool async_op);

  c10::intrusive_ptr<ProcessGroupRemora> pg_;
  std::shared_ptr<remora::Communicator> comm_;
  const int rank_;
  const int size_;

  mutable std::mutex mu_;
  std::optional<at::Tensor> tensor_;  ///< registered (held while registered)
  remora::Region region_;
  std::vector<Peer> peers_;
  std::vector<std::vector<remora::Request>> puts_;  ///< per peer: puts not yet known complete
  /// This rank's puts and signals to itself: counted here, no network (shared with
  /// the works that wait on them).
  struct SelfSignals;
  std::shared_ptr<SelfSignals> self_;
};

}  // namespace remora_torch

#endif  // REMORA_TORCH_WINDOWS
