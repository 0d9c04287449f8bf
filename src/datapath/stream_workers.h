// datapath/stream_workers.h — threads that move data-stream chunks beside the progress
// thread (REMORA_PROGRESS_THREADS), so that one core's copies do not cap a context.
//
// A job is the rest of one chunk, in one direction, without the progress lock:
// - receiving: a worker takes the stream's bytes into the chunk's host memory with
//   recv(2) (through the stream's StreamIn: plain or sealed), until the chunk is whole,
//   the socket has had nothing for a millisecond, the stream failed or ended, or the job
//   is cancelled;
// - sending: a worker puts the chunk's host memory on the stream with send(2) (through
//   net::send_some: plain or sealed), until the chunk is in the kernel, the socket has
//   had no room for a millisecond, the send failed, or the job is cancelled.
// The scheduler (chunk_scheduler.h) hands each direction of a stream to at most one job
// at a time and does not use that direction meanwhile; it learns the result through the
// job's `done` callback (which must not block: the endpoint posts it to its progress
// engine), or at once through cancel(), which waits for the worker to let go of the
// stream (bounded: a worker looks at the cancel flag after every system call and every
// millisecond it waits).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "datapath/chunk_io.h"
#include "net/io.h"

namespace remora::detail {

class StreamWorkers {
 public:
  /// What a job came to: `got` bytes moved, and why it stopped (`last`: the system call
  /// that ended it; kWouldBlock when the socket stayed empty (receiving) or full
  /// (sending), or when the job was whole or cancelled).
  struct Result {
    uint64_t got = 0;
    net::IoResult last{};
  };
  /// One job's shared state: the scheduler keeps it while the job has its stream.
  class Ticket {
   public:
    /// Asks the worker to stop and waits until it no longer touches the stream or the
    /// memory; returns what it did. Call at most once, instead of using `done`'s result.
    Result cancel();
    /// The result, stored before `done` is called (the scheduler's callback reads it).
    Result result() const;
    /// Bytes moved so far (statistics while the job runs; result() is the count to act on).
    uint64_t moved() const noexcept { return moved_.load(std::memory_order_relaxed); }

   private:
    friend class StreamWorkers;
    mutable std::mutex mutex_;
    std::condition_variable finished_cv_;
    bool finished_ = false;
    std::atomic<bool> cancel_{false};
    std::atomic<uint64_t> moved_{0};
    Result result_;
  };
  /// The rest of a chunk to receive: `len` bytes of the stream read through `in` (its
  /// socket: in->fd()) into `dst`, at most `piece` per recv (0: all that is left).
  /// `sink` (whose host_destination `dst` is) is released on the worker.
  struct RxJob {
    StreamIn* in = nullptr;
    std::byte* dst = nullptr;
    uint64_t len = 0;
    uint64_t piece = 0;
    ChunkSink* sink = nullptr;
    std::function<void()> done;  // on the worker, once the result is stored; must not block
  };
  /// The rest of a chunk to send: `len` bytes at `src` onto the socket `fd`. `source`
  /// (whose gather_begin held `src`) ends its hold (gather_end) on the worker.
  struct TxJob {
    int fd = -1;
    const std::byte* src = nullptr;
    uint64_t len = 0;
    ChunkSource* source = nullptr;
    std::function<void()> done;  // as RxJob's
  };

  /// `threads` workers (at least 1).
  explicit StreamWorkers(uint32_t threads);
  ~StreamWorkers();
  StreamWorkers(const StreamWorkers&) = delete;
  StreamWorkers& operator=(const StreamWorkers&) = delete;

  uint32_t threads() const noexcept { return static_cast<uint32_t>(workers_.size()); }
  /// Queues `job` on worker `worker % threads()`.
  std::shared_ptr<Ticket> submit(uint32_t worker, RxJob job);
  std::shared_ptr<Ticket> submit(uint32_t worker, TxJob job);

 private:
  struct Queued {
    std::variant<RxJob, TxJob> job;
    std::shared_ptr<Ticket> ticket;
  };
  struct Worker {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Queued> queue;
    bool stop = false;
    std::thread thread;
  };
  std::shared_ptr<Ticket> enqueue(uint32_t worker, Queued q);
  static void run(Worker& w);
  static Result receive(const RxJob& job, Ticket& ticket);
  static Result send(const TxJob& job, Ticket& ticket);
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace remora::detail
