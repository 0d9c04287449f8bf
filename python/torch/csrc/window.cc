// python/torch/csrc/window.cc — WindowRemora (see window.h): registration and its
// exchange, puts, signals and their waits as WorkRemora works of the process group,
// and the refusals for what a remora window cannot do.
#include "window.h"

#ifdef REMORA_TORCH_WINDOWS

#include <unistd.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <utility>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "remora/cuda.h"

namespace remora_torch {
namespace {

using remora::Status;
using remora::StatusCode;

// Notification values (the target counts them; the value says which call sent it).
constexpr uint32_t kPutNotification = 1;
constexpr uint32_t kSignalNotification = 2;

[[noreturn]] void raise(const std::string& msg) { C10_THROW_ERROR(DistBackendError, "remora window: " + msg); }

size_t nbytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

std::string this_host() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "?";
  return name.data();
}

/// Lets the context move CUDA memory (remora's CUDA domain, its driver loaded at run
/// time); raises with remora's reason where there is no usable driver.
void use_cuda_memory(remora::Context& ctx) {
  auto domain = remora::cuda_domain();
  if (!domain) raise("a CUDA tensor, but remora has no CUDA here: " + domain.status().to_string());
  Status s = ctx.add_memory_domain(**domain);
  // kInvalidArgument: added before (by an earlier window of this context).
  if (!s.is_ok() && s.code() != StatusCode::kInvalidArgument) raise("CUDA memory: " + s.to_string());
}

/// Waits for the work queued on `t`'s current stream, so that remora reads its bytes
/// as the program ordered them (remora's copies run on their own streams).
void sync_with_current_stream(const at::Tensor& t) {
  if (!t.device().is_cuda()) return;
  c10::impl::VirtualGuardImpl impl(t.device().type());
  impl.getStream(t.device()).synchronize();
}

void check_device(const char* what, const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "remora window: ", what,
              " takes CPU tensors (CUDA tensors where remora finds a CUDA driver), got one on ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "remora window: ", what, " takes dense tensors (got ", t.layout(), ")");
}

// --- what each rank publishes at registration: fixed layout, little-endian hosts --------

constexpr size_t kHostBytes = 64;
struct WireInfo {
  std::array<std::byte, remora::RemoteKey::kSerializedSize> key{};
  int64_t numel = 0;
  int32_t dtype = 0;
  uint8_t cuda = 0;
  uint8_t ok = 0;  ///< 0: this rank refused its tensor (every rank then raises)
  std::array<char, 2> reserved{};
  std::array<char, kHostBytes> host{};
};
static_assert(sizeof(WireInfo) == 120, "WireInfo is exchanged as raw bytes");

}  // namespace

struct WindowRemora::SelfSignals {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t count = 0;
};

WindowRemora::WindowRemora(c10::intrusive_ptr<ProcessGroupRemora> pg)
    : pg_(std::move(pg)), rank_(pg_->getRank()), size_(pg_->getSize()) {
  // Its own communicator: the window's notifications are nobody else's.
  auto sub = pg_->communicator()->split(0, rank_);
  if (!sub) raise("new_window: " + sub.status().to_string());
  comm_ = std::shared_ptr<remora::Communicator>(std::move(*sub));
  puts_.resize(static_cast<size_t>(size_));
  self_ = std::make_shared<SelfSignals>();
}

WindowRemora::~WindowRemora() {
  std::lock_guard lock(mu_);
  region_.deregister();  // revokes the key, waits for puts writing into the tensor
  tensor_.reset();
}

void WindowRemora::check_registered(const char* what) const {
  std::lock_guard lock(mu_);
  TORCH_CHECK(tensor_.has_value(), "remora window: ", what, " before tensor_register (new_window(tensor) or ",
              "window.tensor_register(tensor) registers this rank's tensor)");
}

void WindowRemora::check_rank(const char* what, int64_t rank) const {
  TORCH_CHECK(rank >= 0 && rank < size_, "remora window: ", what, ": rank ", rank, " is not in the group (size ", size_,
              ")");
}

void WindowRemora::tensor_register(const at::Tensor& tensor, bool /*owning*/) {
  // Local checks first, then the exchange: a rank that refuses tells the others, so
  // that every rank raises instead of some waiting for it.
  std::string refusal;
  if (!tensor.defined()) {
    refusal = "tensor_register needs a tensor";
  } else if (!(tensor.device().is_cpu() || tensor.device().is_cuda()) || tensor.layout() != at::kStrided) {
    refusal = c10::str("tensor_register takes a dense CPU tensor (CUDA where remora finds a driver), got ",
                       tensor.layout(), " on ", tensor.device());
  } else if (!tensor.is_contiguous()) {
    refusal = "tensor_register takes a contiguous tensor (puts land in its memory; a copy would hide them)";
  } else if (tensor.numel() == 0) {
    refusal = "tensor_register takes a tensor of at least one element";
  } else {
    std::lock_guard lock(mu_);
    if (tensor_.has_value()) refusal = "tensor_register: a tensor is registered already (tensor_deregister first)";
  }
  remora::Region region;
  if (refusal.empty()) {
    try {
      if (tensor.device().is_cuda()) {
        use_cuda_memory(*pg_->context());
        sync_with_current_stream(tensor);
      }
    } catch (const std::exception& e) {
      refusal = e.what();
    }
  }
  if (refusal.empty()) {
    auto reg = pg_->context()->register_memory(tensor.data_ptr(), nbytes(tensor),
                                               remora::Access::kLocalWrite | remora::Access::kRemoteWrite);
    if (reg) {
      region = std::move(*reg);
    } else {
      refusal = "registering the tensor: " + reg.status().to_string();
    }
  }

  WireInfo mine;
  mine.ok = refusal.empty() ? 1 : 0;
  if (refusal.empty()) {
    const auto key = region.remote_key().serialize();
    std::memcpy(mine.key.data(), key.data(), key.size());
    mine.numel = tensor.numel();
    mine.dtype = static_cast<int32_t>(tensor.scalar_type());
    mine.cuda = tensor.device().is_cuda() ? 1 : 0;
  }
  const std::string host = this_host();
  std::memcpy(mine.host.data(), host.data(), std::min(host.size(), kHostBytes - 1));
  std::vector<WireInfo> all(static_cast<size_t>(size_));
  Status s = comm_->allgather(&mine, all.data(), sizeof(WireInfo), remora::DataType::kUint8);
  if (!s.is_ok()) raise("tensor_register: exchanging registrations: " + s.to_string());
  TORCH_CHECK(refusal.empty(), "remora window: ", refusal);
  std::vector<Peer> peers(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    const WireInfo& w = all[static_cast<size_t>(r)];
    if (w.ok == 0) raise(c10::str("tensor_register: rank ", r, " could not register its tensor (see its error)"));
    auto key = remora::RemoteKey::deserialize(w.key);
    if (!key || w.numel <= 0 || w.dtype < 0 || w.dtype >= static_cast<int32_t>(at::ScalarType::NumOptions)) {
      raise(c10::str("tensor_register: rank ", r, " published a malformed registration"));
    }
    Peer& p = peers[static_cast<size_t>(r)];
    p.key = *key;
    p.numel = w.numel;
    p.dtype = static_cast<at::ScalarType>(w.dtype);
    p.cuda = w.cuda != 0;
    p.host.assign(w.host.data(), strnlen(w.host.data(), kHostBytes));
  }
  std::lock_guard lock(mu_);
  region_ = std::move(region);
  tensor_ = tensor;
  peers_ = std::move(peers);
}

void WindowRemora::tensor_deregister() {
  check_registered("tensor_deregister");
  // Between two barriers, as PyTorch's own windows do: every rank arrives before any
  // key dies, and none goes on before every key is dead.
  if (Status s = comm_->barrier(); !s.is_ok()) raise("tensor_deregister: " + s.to_string());
  {
    std::lock_guard lock(mu_);
    region_.deregister();  // waits for puts writing into the tensor
    region_ = remora::Region();
    tensor_.reset();
    peers_.clear();
  }
  if (Status s = comm_->barrier(); !s.is_ok()) raise("tensor_deregister: " + s.to_string());
}

c10::intrusive_ptr<c10d::Work> WindowRemora::finish(c10::intrusive_ptr<WorkRemora> work, bool async_op) {
  pg_->enqueue(work);
  if (!async_op) work->wait();
  return work;
}

c10::intrusive_ptr<c10d::Work> WindowRemora::put(const at::Tensor& tensor, int64_t dst_rank,
                                                 int64_t target_offset_nelems, bool async_op,
                                                 const c10d::PutOptions& opts) {
  check_registered("put");
  check_rank("put", dst_rank);
  check_device("put", tensor);
  Peer peer;
  {
    std::lock_guard lock(mu_);
    peer = peers_[static_cast<size_t>(dst_rank)];
  }
  TORCH_CHECK(tensor.scalar_type() == peer.dtype, "remora window: put of ", tensor.scalar_type(), " into rank ",
              dst_rank, "'s window of ", peer.dtype);
  const int64_t n = tensor.numel();
  TORCH_CHECK(target_offset_nelems >= 0 && target_offset_nelems <= peer.numel && n <= peer.numel - target_offset_nelems,
              "remora window: put of ", n, " elements at offset ", target_offset_nelems, " does not fit rank ",
              dst_rank, "'s window of ", peer.numel, " elements");
  if (tensor.device().is_cuda()) use_cuda_memory(*pg_->context());
  at::Tensor src = tensor.is_contiguous() ? tensor : tensor.contiguous();
  sync_with_current_stream(src);
  if (dst_rank == rank_) return put_self(src, target_offset_nelems, async_op);
  const auto offset = static_cast<uint64_t>(target_offset_nelems) * static_cast<uint64_t>(src.element_size());
  remora::Request r =
      comm_->put(static_cast<int>(dst_rank), std::span(static_cast<const std::byte*>(src.data_ptr()), nbytes(src)),
                 peer.key, offset, kPutNotification);
  {
    std::lock_guard lock(mu_);
    auto& pending = puts_[static_cast<size_t>(dst_rank)];
    std::erase_if(pending, [](const remora::Request& p) { return p.done(); });
    pending.push_back(r);
  }
  auto work = pg_->make_work(c10d::OpType::UNKNOWN, "window put", {tensor}, comm_, opts.timeout);
  work->is_p2p = true;  // past its timeout it breaks the group, which releases `src`
  work->requests.push_back(r);
  work->keep_alive = {src};
  return finish(work, async_op);
}

c10::intrusive_ptr<c10d::Work> WindowRemora::put_self(const at::Tensor& src, int64_t offset, bool async_op) {
  {
    std::lock_guard lock(mu_);
    tensor_->view({-1}).narrow(0, offset, src.numel()).copy_(src.view({-1}));
  }
  {
    std::lock_guard lock(self_->mu);
    ++self_->count;
  }
  self_->cv.notify_all();
  return finish(pg_->make_work(c10d::OpType::UNKNOWN, "window put", {src}, comm_), async_op);
}

Status WindowRemora::settle_puts(int peer, std::chrono::milliseconds timeout) {
  std::vector<remora::Request> pending;
  {
    std::lock_guard lock(mu_);
    pending = puts_[static_cast<size_t>(peer)];
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Status first;
  for (const auto& r : pending) {
    const auto left =
        std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero());
    Status s = r.wait(std::chrono::duration_cast<remora::Duration>(left));
    if (s.code() == StatusCode::kTimeout) {
      if (!r.done()) {
        return Status(StatusCode::kTimeout,
                      c10::str("an earlier put to rank ", peer, " did not complete within ", timeout.count(), " ms"));
      }
      s = r.test();  // it completed just after the wait gave up: its own status
    }
    if (first.is_ok() && !s.is_ok()) first = s;
  }
  std::lock_guard lock(mu_);
  std::erase_if(puts_[static_cast<size_t>(peer)], [](const remora::Request& p) { return p.done(); });
  return first;
}

c10::intrusive_ptr<c10d::Work> WindowRemora::signal(int64_t peer_rank, bool async_op, const c10d::SignalOptions& opts) {
  check_registered("signal");
  check_rank("signal", peer_rank);
  if (peer_rank == rank_) {
    {
      std::lock_guard lock(self_->mu);
      ++self_->count;
    }
    self_->cv.notify_all();
    return finish(pg_->make_work(c10d::OpType::UNKNOWN, "window signal", {}, comm_), async_op);
  }
  const int peer = static_cast<int>(peer_rank);
  // A signal says "my puts to you are there": it goes once they have completed.
  if (Status s = settle_puts(peer, pg_->op_timeout(opts.timeout)); !s.is_ok()) {
    raise(c10::str("signal to rank ", peer, ": ", s.to_string()));
  }
  remora::RemoteKey key;
  {
    std::lock_guard lock(mu_);
    key = peers_[static_cast<size_t>(peer)].key;
  }
  remora::Request r = comm_->put(peer, {}, key, 0, kSignalNotification);
  auto work = pg_->make_work(c10d::OpType::UNKNOWN, "window signal", {}, comm_, opts.timeout);
  work->is_p2p = true;
  work->requests.push_back(r);
  return finish(work, async_op);
}

c10::intrusive_ptr<c10d::Work> WindowRemora::wait_signal(int64_t peer_rank, bool async_op,
                                                         const c10d::WaitSignalOptions& opts) {
  check_registered("wait_signal");
  check_rank("wait_signal", peer_rank);
  auto work = pg_->make_work(c10d::OpType::UNKNOWN, "window wait_signal", {}, comm_, opts.timeout);
  if (peer_rank == rank_) {
    work->step = [self = self_](std::chrono::milliseconds slice) {
      std::unique_lock lock(self->mu);
      if (!self->cv.wait_for(lock, slice, [&] { return self->count > 0; })) {
        return Status(StatusCode::kTimeout, "no signal yet");
      }
      --self->count;
      return Status::ok();
    };
  } else {
    work->step = [comm = comm_, peer = static_cast<int>(peer_rank)](std::chrono::milliseconds slice) {
      return comm->wait_notification(peer, slice).status();
    };
  }
  return finish(work, async_op);
}

at::Tensor WindowRemora::map_remote_tensor(int64_t rank) {
  check_registered("map_remote_tensor");
  check_rank("map_remote_tensor", rank);
  std::lock_guard lock(mu_);
  if (rank == rank_) return *tensor_;
  const Peer& p = peers_[static_cast<size_t>(rank)];
  const std::string where =
      p.host == this_host() ? "in another process on this host (" + p.host + ")" : "on another host (" + p.host + ")";
  TORCH_CHECK(false, "remora window: map_remote_tensor(", rank, "): rank ", rank, "'s window memory is ", where,
              ", which remora cannot map into this process; reach it with put and signal (get_attr(", rank,
              ") is SEPARATE)");
}

c10d::WindowAttr WindowRemora::get_attr(int64_t peer_rank) {
  check_rank("get_attr", peer_rank);
  return c10d::WindowAttr{.access_type =
                              peer_rank == rank_ ? c10d::WindowAccessType::UNIFIED : c10d::WindowAccessType::SEPARATE};
}

}  // namespace remora_torch

#endif  // REMORA_TORCH_WINDOWS
