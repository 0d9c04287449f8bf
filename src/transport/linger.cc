// transport/linger.cc — see linger.h.
#include "transport/linger.h"

#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "core/log.h"
#include "net/io.h"

namespace remora::detail {
namespace {
constexpr size_t kScratchBytes = size_t{64} << 10;
}  // namespace

LingeringClose::LingeringClose(std::shared_ptr<engine::ProgressEngine> engine, std::string peer, Socket control,
                               std::vector<Socket> data, std::vector<std::byte> queued, size_t sent,
                               std::function<void()> on_end, std::shared_ptr<ShmChannel> shm)
    : engine_(std::move(engine)),
      peer_(std::move(peer)),
      control_(std::move(control)),
      data_(std::move(data)),
      queued_(std::move(queued)),
      sent_(sent),
      on_end_(std::move(on_end)),
      shm_(std::move(shm)) {}

LingeringClose::~LingeringClose() { stop(); }

void LingeringClose::start() {
  // The control socket is watched for room now; the data streams still are. What a
  // data stream still had queued belonged to operations that have just failed, so it
  // is not sent: each one ends with FIN after the bytes already written, once the
  // control stream has handed GOODBYE to the kernel (see progress).
  if (!engine_->modify(control_.fd.get(), control_.hid, EPOLLIN | EPOLLOUT | EPOLLRDHUP).is_ok()) {
    finish();
    return;
  }
  last_progress_ = engine::Clock::now();
  arm_timer();
  progress();
}

void LingeringClose::arm_timer() {
  engine_->add_timer(last_progress_ + kPatience, [weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self || self->stopped_) return;
    if (engine::Clock::now() - self->last_progress_ < kPatience) {
      self->arm_timer();  // it moved since: wait a full period from there
      return;
    }
    REMORA_LOG(kInfo, "endpoint to {}: the peer took nothing for {} s after close; dropping what was still queued",
               self->peer_, kPatience.count());
    self->finish();
  });
}

void LingeringClose::progress() {
  if (stopped_) return;
  auto keep = shared_from_this();  // finish() may drop the endpoint's reference
  if (control_.fd.valid()) {
    while (sent_ < queued_.size()) {
      const net::IoResult r = shm_ != nullptr
                                  ? shm_->send(control_.fd.get(), queued_.data(), sent_, queued_.size())
                                  : net::send_some(control_.fd.get(), queued_.data() + sent_, queued_.size() - sent_);
      if (r.moved() && r.bytes > 0) {
        sent_ += r.bytes;
        last_progress_ = engine::Clock::now();
        continue;
      }
      if (r.would_block()) break;
      finish();  // the peer is gone: nothing more can be delivered
      return;
    }
    if (sent_ == queued_.size() && !shut_) {
      ::shutdown(control_.fd.get(), SHUT_WR);  // FIN behind the last byte
      shut_ = true;
    }
  }
  if ((shut_ || !control_.fd.valid()) && !data_shut_) {
    // Only now the data streams: a chunk cut short by close() then ends after the
    // GOODBYE is on its way, so the peer, reading its control stream when a data
    // stream ends mid-chunk, finds it there and sees an orderly close.
    for (Socket& d : data_) {
      if (d.fd.valid()) ::shutdown(d.fd.get(), SHUT_WR);
    }
    data_shut_ = true;
  }
  // Read and drop what the peer still sends (credits, replies, its data): closing a
  // socket with unread bytes resets the connection, and a reset discards what the
  // kernel has not sent yet. Each socket closes at the peer's EOF (it closes on ours).
  // A read budget per call keeps a peer that streams on from starving other work.
  if (scratch_.empty()) scratch_.resize(kScratchBytes);
  size_t budget = 16;
  bool more = false;
  auto drain = [&](Socket& sock) {
    while (sock.fd.valid()) {
      if (budget == 0) {
        more = true;
        return;
      }
      --budget;
      const net::IoResult r = net::recv_some(sock.fd.get(), scratch_.data(), scratch_.size());
      if (r.moved()) continue;
      if (r.would_block()) return;
      engine_->remove(sock.fd.get(), sock.hid);  // EOF or an error: done with it
      sock.fd.reset();
    }
  };
  drain(control_);
  for (Socket& d : data_) drain(d);
  while (shm_ != nullptr && shm_->rx_on() && control_.fd.valid()) {
    if (budget == 0) {
      more = true;
      break;
    }
    --budget;
    if (!shm_->recv(scratch_.data(), scratch_.size()).moved()) break;  // empty, or corrupt: nothing to drop
  }
  const bool open =
      control_.fd.valid() || std::any_of(data_.begin(), data_.end(), [](const Socket& d) { return d.fd.valid(); });
  if (!open) {
    finish();
    return;
  }
  if (more) {
    // Edge-triggered: nothing else may come to raise another edge, so go on later.
    engine_->add_timer(engine::Clock::now(), [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->progress();
    });
  }
}

void LingeringClose::stop() {
  if (stopped_) return;
  stopped_ = true;
  engine_->remove(control_.fd.get(), control_.hid);
  for (Socket& d : data_) engine_->remove(d.fd.get(), d.hid);
  control_.fd.reset();
  for (Socket& d : data_) d.fd.reset();
  if (shm_ != nullptr) {
    if (shm_->registered) engine_->remove(shm_->rx_wake_fd(), shm_->hid);
    shm_->registered = false;
    shm_.reset();
  }
}

void LingeringClose::finish() {
  stop();
  if (auto fn = std::exchange(on_end_, nullptr)) fn();
}

}  // namespace remora::detail
