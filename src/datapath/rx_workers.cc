// datapath/rx_workers.cc — see rx_workers.h.
#include "datapath/rx_workers.h"

#include <poll.h>

#include <algorithm>
#include <utility>

namespace remora::detail {

namespace {
/// How long a worker waits for more of a chunk on an empty socket before it hands the
/// stream back (the progress thread then reads it again at its next edge).
constexpr int kWaitMs = 1;
}  // namespace

RxWorkers::Result RxWorkers::Ticket::cancel() {
  std::unique_lock lock(mutex_);
  cancel_.store(true, std::memory_order_relaxed);
  finished_cv_.wait(lock, [this] { return finished_; });
  return result_;
}

RxWorkers::Result RxWorkers::Ticket::result() const {
  std::lock_guard lock(mutex_);
  return result_;
}

RxWorkers::RxWorkers(uint32_t threads) {
  workers_.reserve(std::max<uint32_t>(threads, 1));
  for (uint32_t i = 0; i < std::max<uint32_t>(threads, 1); ++i) {
    auto w = std::make_unique<Worker>();
    Worker* raw = w.get();
    w->thread = std::thread([raw] { run(*raw); });
    workers_.push_back(std::move(w));
  }
}

RxWorkers::~RxWorkers() {
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mutex);
      w->stop = true;
    }
    w->cv.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
}

std::shared_ptr<RxWorkers::Ticket> RxWorkers::submit(uint32_t worker, Job job) {
  auto ticket = std::make_shared<Ticket>();
  Worker& w = *workers_[worker % workers_.size()];
  {
    std::lock_guard lock(w.mutex);
    w.queue.emplace_back(std::move(job), ticket);
  }
  w.cv.notify_one();
  return ticket;
}

void RxWorkers::run(Worker& w) {
  for (;;) {
    std::pair<Job, std::shared_ptr<Ticket>> next;
    {
      std::unique_lock lock(w.mutex);
      w.cv.wait(lock, [&w] { return w.stop || !w.queue.empty(); });
      if (w.queue.empty()) return;  // stopping, nothing left
      next = std::move(w.queue.front());
      w.queue.pop_front();
    }
    auto& [job, ticket] = next;
    const Result result = work(job, *ticket);
    if (job.sink != nullptr) job.sink->release_destination();
    {
      std::lock_guard lock(ticket->mutex_);
      ticket->result_ = result;
    }
    // `done` first: a cancel() that returned lets the scheduler's owner go, which
    // `done` may use (it posts to the owner's engine).
    if (job.done) job.done();
    {
      std::lock_guard lock(ticket->mutex_);
      ticket->finished_ = true;
    }
    ticket->finished_cv_.notify_all();
  }
}

RxWorkers::Result RxWorkers::work(const Job& job, const Ticket& ticket) {
  Result out;
  out.last = net::IoResult{net::IoResult::Kind::kWouldBlock, 0, 0};
  bool waited = false;
  while (out.got < job.len && !ticket.cancel_.load(std::memory_order_relaxed)) {
    const uint64_t rest = job.len - out.got;
    const uint64_t ask = job.piece != 0 ? std::min(rest, job.piece) : rest;
    const net::IoResult r = job.in->recv_some(job.dst + out.got, static_cast<size_t>(ask));
    if (r.moved() && r.bytes > 0) {
      out.got += r.bytes;
      waited = false;
      continue;
    }
    if (!r.would_block()) {
      out.last = r;  // an error or the stream's end: the scheduler reports it
      break;
    }
    if (waited) break;  // empty for a whole wait: hand the stream back
    pollfd p{.fd = job.in->fd(), .events = POLLIN, .revents = 0};
    (void)::poll(&p, 1, kWaitMs);
    waited = (p.revents & POLLIN) == 0;
  }
  return out;
}

}  // namespace remora::detail
