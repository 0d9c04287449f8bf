// datapath/devmem_path.cc — see devmem_path.h.
#include "datapath/devmem_path.h"

#include <linux/dma-buf.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "zerocopy/kernel_error.h"
#include "zerocopy/uapi.h"

namespace remora::detail {

ssize_t system_recvmsg(int fd, msghdr* msg, int flags) { return ::recvmsg(fd, msg, flags); }

// --- one stream's receive loop ----------------------------------------------------

DevmemReceiver::DevmemReceiver(int fd, DevmemRxBinding binding, RecvmsgFn recvmsg, zerocopy::DontneedFn dontneed,
                               std::shared_ptr<const void> hold)
    : fd_(fd),
      binding_(binding),
      hold_(std::move(hold)),
      recvmsg_(std::move(recvmsg)),
      returner_(fd, std::move(dontneed)),
      control_(zerocopy::devmem_control_bytes(kMaxFragments)) {
  if (binding_.allow_linear) linear_.resize(kMaxReadBytes);
}

DevmemReceiver::DevmemReceiver(int fd, DevmemRxBinding binding, std::shared_ptr<const void> hold)
    : fd_(fd), binding_(binding), hold_(std::move(hold)), returner_(fd) {}

Status DevmemReceiver::wait_readable(net::Clock::time_point deadline) { return net::wait_readable(fd_, deadline); }

void DevmemReceiver::give_back(std::vector<uint32_t>& tokens) {
  if (tokens.empty()) return;
  outstanding_ -= std::min<uint64_t>(outstanding_, tokens.size());
  if (fd_ >= 0) {
    for (const uint32_t token : tokens) returner_.add(token);
    // A refusal here strands nothing more than the kernel already holds (the socket's
    // close frees the rest); the data placed is intact either way.
    (void)returner_.flush();
  }
  tokens.clear();
  close_retired_when_done();
}

void DevmemReceiver::retire(net::Fd socket) {
  if (outstanding_ == 0 || !socket.valid()) return;
  // The peer hears the stream end now; the tokens stay the socket's until they go back.
  (void)::shutdown(socket.get(), SHUT_RDWR);
  kept_ = std::move(socket);
}

void DevmemReceiver::close_retired_when_done() noexcept {
  if (!kept_.valid() || outstanding_ > 0) return;
  fd_ = -1;
  kept_.reset();
}

Status DevmemReceiver::release(DevmemRead& read) {
  const size_t n = read.tokens.size();
  if (n == 0 || fd_ < 0) {
    outstanding_ -= std::min<uint64_t>(outstanding_, n);
    read.tokens.clear();
    return Status::ok();
  }
  outstanding_ -= std::min<uint64_t>(outstanding_, n);
  for (const uint32_t token : read.tokens) returner_.add(token);
  read.tokens.clear();
  Status flushed = returner_.flush();
  close_retired_when_done();
  return flushed;
}

Result<net::IoResult> DevmemReceiver::receive(MemoryDomain* dst_domain, std::byte* dst, uint64_t len,
                                              DevmemRead* read) {
  *read = DevmemRead{};
  len = std::min<uint64_t>(len, kMaxReadBytes);
  iovec iov{};
  iov.iov_base = binding_.allow_linear ? linear_.data() : nullptr;
  iov.iov_len = len;
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control_.data();
  msg.msg_controllen = control_.size();

  ssize_t got;
  do {
    got = recvmsg_(fd_, &msg, zerocopy::uapi::kMsgSockDevmem | MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) return net::IoResult{.kind = net::IoResult::Kind::kWouldBlock};
    if (err == EFAULT && !binding_.allow_linear) {
      return Status(StatusCode::kProtocol,
                    "recvmsg(MSG_SOCK_DEVMEM): EFAULT: readable payload on a devmem stream that takes device memory "
                    "only (no iov given): a misrouted flow, from a queue with no dmabuf bound (check the ntuple rule "
                    "that steers this connection to the bound queues)");
    }
    return net::IoResult{.kind = net::IoResult::Kind::kError, .err = err};
  }
  if (got == 0) return net::IoResult{.kind = net::IoResult::Kind::kEof};

  read->bytes = static_cast<uint64_t>(got);
  fragments_.clear();
  const uint32_t bindings[] = {binding_.id};
  const zerocopy::DevmemRxPolicy policy{.bindings = bindings, .allow_linear = binding_.allow_linear};
  Status parsed = zerocopy::parse_devmem_rx(msg, read->bytes, policy, &fragments_);
  for (const zerocopy::DevmemFragment& f : fragments_) {
    if (f.kind == zerocopy::FragmentKind::kDmabuf) read->tokens.push_back(f.token);
  }
  outstanding_ += read->tokens.size();
  if (parsed.is_ok()) {
    for (const zerocopy::DevmemFragment& f : fragments_) {
      if (f.kind == zerocopy::FragmentKind::kDmabuf && (f.offset > binding_.size || f.size > binding_.size - f.offset)) {
        parsed = Status(StatusCode::kProtocol,
                        fmt::format("devmem fragment [{}, {}+{}) lies outside the {}-byte dmabuf of binding {}",
                                    f.offset, f.offset, f.size, binding_.size, binding_.id));
        break;
      }
    }
  }
  if (parsed.is_ok() && dst == nullptr) {
    give_back(read->tokens);  // dropped: nothing reads the dmabuf
    return net::IoResult{.kind = net::IoResult::Kind::kBytes, .bytes = read->bytes};
  }
  if (parsed.is_ok()) parsed = place(dst_domain, dst, read);
  if (!parsed.is_ok()) {
    // Nothing of this read is used: its tokens go back now (copies that did start
    // read the dmabuf, so wait for them first).
    for (auto& copy : read->copies) (void)copy->wait(std::chrono::seconds(60));
    read->copies.clear();
    give_back(read->tokens);
    return parsed;
  }
  return net::IoResult{.kind = net::IoResult::Kind::kBytes, .bytes = read->bytes};
}

namespace {

/// DMA_BUF_IOCTL_SYNC of `fd` (a dmabuf the CPU reads); a refusal changes nothing the
/// copy needs on a cache-coherent host, so it is not an error.
void cpu_sync(int fd, uint64_t flags) {
  if (fd < 0) return;
  dma_buf_sync sync{.flags = flags | DMA_BUF_SYNC_READ};
  int r;
  do {
    r = ::ioctl(fd, DMA_BUF_IOCTL_SYNC, &sync);
  } while (r != 0 && (errno == EINTR || errno == EAGAIN));
}

}  // namespace

Status DevmemReceiver::place(MemoryDomain* dst_domain, std::byte* dst, DevmemRead* read) {
  MemoryDomain* pool = binding_.domain != nullptr ? binding_.domain : &host_domain();
  const bool host_dst = dst_domain == nullptr || dst_domain == &host_domain();
  const bool cpu_reads = host_dst && pool == &host_domain();
  if (cpu_reads) cpu_sync(binding_.cpu_sync_fd, DMA_BUF_SYNC_START);
  Status placed = place_fragments(pool, dst_domain, host_dst, dst, read);
  if (cpu_reads) cpu_sync(binding_.cpu_sync_fd, DMA_BUF_SYNC_END);
  return placed;
}

Status DevmemReceiver::place_fragments(MemoryDomain* pool, MemoryDomain* dst_domain, bool host_dst, std::byte* dst,
                                       DevmemRead* read) {
  std::vector<ScatterEntry> scatter;
  uint64_t at = 0;  // where the next fragment goes, from dst
  for (const zerocopy::DevmemFragment& f : fragments_) {
    if (f.kind == zerocopy::FragmentKind::kLinear) {
      if (host_dst) {
        std::memcpy(dst + at, linear_.data() + f.offset, f.size);
      } else {
        if (!read->linear) read->linear = std::make_shared<std::vector<std::byte>>();
        // The iov is reused by the next recvmsg: the copy reads from bytes of its own.
        auto& held = *read->linear;
        if (held.capacity() < read->bytes) held.reserve(read->bytes);
        const size_t from = held.size();
        held.insert(held.end(), linear_.begin() + static_cast<ptrdiff_t>(f.offset),
                    linear_.begin() + static_cast<ptrdiff_t>(f.offset + f.size));
        REMORA_ASSIGN_OR_RETURN(auto copy, dst_domain->copy_from_host(dst + at, held.data() + from, f.size));
        read->copies.push_back(std::move(copy));
      }
    } else if (host_dst) {
      REMORA_ASSIGN_OR_RETURN(auto copy, pool->copy_to_host(dst + at, binding_.base + f.offset, f.size));
      read->copies.push_back(std::move(copy));
    } else if (pool == &host_domain()) {
      // A host buffer (udmabuf) bound, device memory the destination: one copy to the
      // device per fragment, straight from where the NIC left it.
      REMORA_ASSIGN_OR_RETURN(auto copy, dst_domain->copy_from_host(dst + at, binding_.base + f.offset, f.size));
      read->copies.push_back(std::move(copy));
    } else {
      scatter.push_back(ScatterEntry{.src_offset = f.offset, .length = f.size, .dst_offset = at});
    }
    at += f.size;
  }
  if (!scatter.empty()) {
    if (dst_domain != pool) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("devmem receive into {} memory from a dmabuf of {} memory: the scatter runs within one "
                                "domain (bind a dmabuf of the destination's device)",
                                dst_domain->name(), pool->name()));
    }
    REMORA_ASSIGN_OR_RETURN(auto copy, dst_domain->scatter(dst, binding_.base, scatter));
    read->copies.push_back(std::move(copy));
  }
  return Status::ok();
}

// --- a devmem stream as host sinks read it -------------------------------------------

DevmemStreamIn::DevmemStreamIn(std::shared_ptr<DevmemReceiver> receiver)
    : StreamIn(receiver->fd()), receiver_(std::move(receiver)) {}

// The socket goes on to be closed (or to the lingering close): its tokens go with it.
DevmemStreamIn::~DevmemStreamIn() { receiver_->detach(); }

net::IoResult DevmemStreamIn::recv_some(std::byte* dst, size_t len) {
  DevmemRead read;
  Result<net::IoResult> got = receiver_->receive(&host_domain(), dst, len, &read);
  if (!got) {
    set_failure(got.status());
    return net::IoResult{.kind = net::IoResult::Kind::kError, .err = EPROTO};
  }
  // Copies out of a host buffer have ended (memcpy). Out of a device one (an endpoint's
  // own receive area) they are the device's: this read waits for them, so that the
  // bytes are in place and the tokens go back before it returns.
  for (auto& copy : read.copies) {
    if (Status s = copy->wait(kDeviceReadBound); !s.is_ok()) {
      (void)receiver_->release(read);
      set_failure(s.with_context("devmem receive into host memory from device memory"));
      return net::IoResult{.kind = net::IoResult::Kind::kError, .err = EPROTO};
    }
  }
  read.copies.clear();
  if (Status s = receiver_->release(read); !s.is_ok()) {
    set_failure(s.with_context("SO_DEVMEM_DONTNEED"));
    return net::IoResult{.kind = net::IoResult::Kind::kError, .err = EPROTO};
  }
  return *got;
}

// --- the sink -----------------------------------------------------------------------

DevmemSink::DevmemSink(std::shared_ptr<DevmemRxContext> ctx, MemoryDomain* domain, std::byte* dst, RxTransfer* t,
                       std::shared_ptr<const RegionAccess> access)
    : PlacingSink(ctx->engine, *domain, dst, t, access),
      ctx_(std::move(ctx)),
      domain_(domain),
      dst_(dst),
      access_(std::move(access)),
      self_(std::make_shared<DevmemSink*>(this)) {}

DevmemSink::~DevmemSink() { self_.reset(); }

DevmemSink::Chunk* DevmemSink::chunk(uint64_t offset) {
  for (Chunk& c : chunks_) {
    if (offset >= c.offset && offset - c.offset < c.length) return &c;
  }
  return nullptr;
}

bool DevmemSink::begin_chunk(uint64_t offset, uint64_t length) {
  if (Chunk* c = chunk(offset); c != nullptr && c->offset == offset && c->length == length) {
    // Read again from its start after its stream broke: the broken stream's placements
    // still in flight place the same bytes and count against it as before, and what
    // failed of the reads before is read again.
    c->arrived = false;
    c->status = Status::ok();
    return true;
  }
  Chunk c;
  c.offset = offset;
  c.length = length;
  chunks_.push_back(std::move(c));
  return true;
}

std::shared_ptr<const RegionAccess> DevmemSink::open_bracket() {
  if (!access_ || revoked_) return nullptr;
  if (access_->begin()) return access_;
  revoked_ = true;
  return nullptr;
}

net::IoResult DevmemSink::read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) {
  Chunk* c = chunk(offset);  // begin_chunk took it
  auto* devmem_in = dynamic_cast<DevmemStreamIn*>(&in);
  if (devmem_in == nullptr) {
    *asked = in.read_limit() > 0 ? std::min(len, in.read_limit()) : len;
    return read_unsteered(in, c, offset, *asked);
  }
  *asked = std::min<uint64_t>(len, DevmemReceiver::kMaxReadBytes);
  const std::shared_ptr<DevmemReceiver> receiver = devmem_in->receiver();
  // A served put's region: each read's placement is bracketed; a deregistered one's
  // bytes are dropped (the RESP says revoked).
  std::shared_ptr<const RegionAccess> bracket = open_bracket();
  DevmemRead r;
  Result<net::IoResult> got = receiver->receive(domain_, revoked_ ? nullptr : dst_ + offset, *asked, &r);
  if (bracket && (!got || !got->moved() || r.copies.empty())) bracket->end();
  if (!got) {
    // The bytes are off the stream, unusable: the chunk (so the transfer) fails with
    // why, and the stream stays in step. No bytes taken (EFAULT): the stream cannot go on.
    if (c != nullptr && c->status.is_ok()) c->status = got.status();
    if (r.bytes == 0) {
      in.set_failure(got.status());
      return net::IoResult{.kind = net::IoResult::Kind::kError, .err = EPROTO};
    }
    return net::IoResult{.kind = net::IoResult::Kind::kBytes, .bytes = r.bytes};
  }
  if (!got->moved()) return *got;
  if (r.copies.empty()) {
    (void)receiver->release(r);
    return *got;
  }
  // The last copy's end gives the tokens back.
  auto held = std::make_shared<DevmemRead>(std::move(r));
  std::vector<std::unique_ptr<AsyncCopy>> copies = std::move(held->copies);
  track(*c, std::move(copies), std::move(bracket), [receiver, held] { return receiver->release(*held); });
  return *got;
}

net::IoResult DevmemSink::read_unsteered(StreamIn& in, Chunk* c, uint64_t offset, uint64_t len) {
  std::shared_ptr<std::byte[]> bytes = std::make_shared_for_overwrite<std::byte[]>(len);
  const net::IoResult got = in.recv_some(bytes.get(), len);
  if (!got.moved() || got.bytes == 0 || c == nullptr) return got;
  std::shared_ptr<const RegionAccess> bracket = open_bracket();
  if (revoked_) return got;  // dropped
  Result<std::unique_ptr<AsyncCopy>> copy = domain_->copy_from_host(dst_ + offset, bytes.get(), got.bytes);
  if (!copy) {
    if (bracket) bracket->end();
    if (c->status.is_ok()) c->status = copy.status().with_context("a chunk read off a stream not steered");
    return got;
  }
  std::vector<std::unique_ptr<AsyncCopy>> copies;
  copies.push_back(std::move(copy).value());
  track(*c, std::move(copies), std::move(bracket), [bytes] { return Status::ok(); });
  return got;
}

void DevmemSink::track(Chunk& c, std::vector<std::unique_ptr<AsyncCopy>> copies,
                       std::shared_ptr<const RegionAccess> bracket, std::function<Status()> ended) {
  // Each copy's end is posted to the engine; the last one runs `ended` and counts the
  // placement ended.
  const uint64_t chunk_offset = c.offset;
  ++c.pending;
  ++in_flight_;
  auto left = std::make_shared<size_t>(copies.size());
  auto first_error = std::make_shared<Status>();
  std::weak_ptr<DevmemSink*> self = self_;
  // A served put's bracket closes on the thread that ends the read's last copy (a
  // deregistration waiting for it must not wait for a progress round).
  std::function<void()> close_bracket;
  if (bracket) {
    auto copying = std::make_shared<std::atomic<size_t>>(copies.size());
    close_bracket = [bracket, copying] {
      if (copying->fetch_sub(1, std::memory_order_acq_rel) == 1) bracket->end();
    };
  }
  auto done = std::make_shared<std::function<Status()>>(std::move(ended));
  for (auto& copy : copies) {
    when_copied(
        ctx_->engine, std::move(copy),
        [self, left, first_error, done, chunk_offset, host = ctx_->host](const Status& status) {
          if (!status.is_ok() && first_error->is_ok()) *first_error = status;
          if (--*left > 0) return;
          const Status returned = (*done)();
          Status outcome = *first_error;
          if (outcome.is_ok() && !returned.is_ok()) outcome = returned;
          if (auto s = self.lock()) (*s)->placement_ended(chunk_offset, outcome);
          if (auto h = host.lock()) (*h)->staging_progressed();
        },
        close_bracket);
  }
}

void DevmemSink::placement_ended(uint64_t chunk_offset, const Status& status) {
  --in_flight_;
  Chunk* c = chunk(chunk_offset);
  if (c == nullptr) return;
  if (!status.is_ok() && c->status.is_ok()) c->status = status;
  if (--c->pending > 0 || !c->arrived) return;
  const uint64_t length = c->length;
  const Status outcome = c->status;
  chunks_.erase(chunks_.begin() + (c - chunks_.data()));
  if (auto h = ctx_->host.lock()) (*h)->staged_chunk_placed(*t_, length, outcome);
}

Status DevmemSink::chunk_arrived(uint64_t offset, uint64_t /*length*/) {
  Chunk* c = chunk(offset);
  if (c == nullptr) return Status(StatusCode::kInternal, "devmem sink: a chunk that did not begin");
  if (c->pending > 0) {
    c->arrived = true;
    return Status(StatusCode::kInProgress, "scattering from the dmabuf");
  }
  const Status outcome = c->status;
  chunks_.erase(chunks_.begin() + (c - chunks_.data()));
  return outcome;
}

}  // namespace remora::detail
