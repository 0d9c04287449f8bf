// datapath/stream_workers.cc — see stream_workers.h.
#include "datapath/stream_workers.h"

#include <poll.h>

#include <algorithm>
#include <utility>

namespace remora::detail {

namespace {
/// How long a worker waits on an empty (receiving) or full (sending) socket before it
/// hands the stream back (the progress thread then goes on at its next edge).
constexpr int kWaitMs = 1;

/// Moves up to `len` bytes with `io(offset, ask)` (one non-blocking system call each)
/// until all are moved, the socket stays not ready (`events`) for a whole wait, `io`
/// fails or ends, or the ticket's cancel flag is set.
template <typename Io>
StreamWorkers::Result move_bytes(int fd, short events, uint64_t len, const std::atomic<bool>& cancel,
                                 std::atomic<uint64_t>& moved, Io&& io) {
  StreamWorkers::Result out;
  out.last = net::IoResult{net::IoResult::Kind::kWouldBlock, 0, 0};
  bool waited = false;
  while (out.got < len && !cancel.load(std::memory_order_relaxed)) {
    const net::IoResult r = io(out.got, len - out.got);
    if (r.moved() && r.bytes > 0) {
      out.got += r.bytes;
      moved.store(out.got, std::memory_order_relaxed);
      waited = false;
      continue;
    }
    if (!r.would_block()) {
      out.last = r;  // an error or the stream's end: the scheduler reports it
      break;
    }
    if (waited) break;  // not ready for a whole wait: hand the stream back
    pollfd p{.fd = fd, .events = events, .revents = 0};
    (void)::poll(&p, 1, kWaitMs);
    waited = (p.revents & (events | POLLERR | POLLHUP)) == 0;
  }
  return out;
}
}  // namespace

StreamWorkers::Result StreamWorkers::Ticket::cancel() {
  std::unique_lock lock(mutex_);
  cancel_.store(true, std::memory_order_relaxed);
  finished_cv_.wait(lock, [this] { return finished_; });
  return result_;
}

StreamWorkers::Result StreamWorkers::Ticket::result() const {
  std::lock_guard lock(mutex_);
  return result_;
}

StreamWorkers::StreamWorkers(uint32_t threads) {
  workers_.reserve(std::max<uint32_t>(threads, 1));
  for (uint32_t i = 0; i < std::max<uint32_t>(threads, 1); ++i) {
    auto w = std::make_unique<Worker>();
    Worker* raw = w.get();
    w->thread = std::thread([raw] { run(*raw); });
    workers_.push_back(std::move(w));
  }
}

StreamWorkers::~StreamWorkers() {
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mutex);
      w->stop = true;
    }
    w->cv.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
}

std::shared_ptr<StreamWorkers::Ticket> StreamWorkers::submit(uint32_t worker, RxJob job) {
  return enqueue(worker, Queued{.job = std::move(job), .ticket = nullptr});
}

std::shared_ptr<StreamWorkers::Ticket> StreamWorkers::submit(uint32_t worker, TxJob job) {
  return enqueue(worker, Queued{.job = std::move(job), .ticket = nullptr});
}

std::shared_ptr<StreamWorkers::Ticket> StreamWorkers::enqueue(uint32_t worker, Queued q) {
  auto ticket = std::make_shared<Ticket>();
  q.ticket = ticket;
  Worker& w = *workers_[worker % workers_.size()];
  {
    std::lock_guard lock(w.mutex);
    w.queue.push_back(std::move(q));
  }
  w.cv.notify_one();
  return ticket;
}

void StreamWorkers::run(Worker& w) {
  for (;;) {
    std::unique_lock queue_lock(w.mutex);
    w.cv.wait(queue_lock, [&w] { return w.stop || !w.queue.empty(); });
    if (w.queue.empty()) return;  // stopping, nothing left
    Queued next = std::move(w.queue.front());
    w.queue.pop_front();
    queue_lock.unlock();
    Ticket& ticket = *next.ticket;
    Result result;
    std::function<void()> done;
    if (auto* tx = std::get_if<TxJob>(&next.job)) {
      result = send(*tx, ticket);
      if (tx->source != nullptr) tx->source->gather_end();
      done = std::move(tx->done);
    } else {
      auto& rx = std::get<RxJob>(next.job);
      result = receive(rx, ticket);
      if (rx.sink != nullptr) rx.sink->release_destination();
      done = std::move(rx.done);
    }
    {
      std::lock_guard lock(ticket.mutex_);
      ticket.result_ = result;
    }
    // `done` first: a cancel() that returned lets the scheduler's owner go, which
    // `done` may use (it posts to the owner's engine).
    if (done) done();
    {
      std::lock_guard lock(ticket.mutex_);
      ticket.finished_ = true;
    }
    ticket.finished_cv_.notify_all();
  }
}

StreamWorkers::Result StreamWorkers::receive(const RxJob& job, Ticket& ticket) {
  return move_bytes(job.in->fd(), POLLIN, job.len, ticket.cancel_, ticket.moved_, [&job](uint64_t at, uint64_t rest) {
    const uint64_t ask = job.piece != 0 ? std::min(rest, job.piece) : rest;
    return job.in->recv_some(job.dst + at, static_cast<size_t>(ask));
  });
}

StreamWorkers::Result StreamWorkers::send(const TxJob& job, Ticket& ticket) {
  return move_bytes(job.fd, POLLOUT, job.len, ticket.cancel_, ticket.moved_, [&job](uint64_t at, uint64_t rest) {
    return net::send_some(job.fd, job.src + at, static_cast<size_t>(rest));
  });
}

}  // namespace remora::detail
