// datapath/rx_workers.h — threads that receive data-stream chunks beside the progress
// thread (REMORA_PROGRESS_THREADS), so that one core's copies do not cap a context.
//
// A job is the rest of one chunk: a worker takes the stream's bytes into the chunk's
// host memory with recv(2) (through the stream's StreamIn: plain or sealed), without
// the progress lock, until the chunk is whole, the socket has had nothing for a
// millisecond, the stream failed or ended, or the job is cancelled. The scheduler
// (chunk_scheduler.h) hands a stream to at most one job at a time and does not read it
// meanwhile; it learns the result through the job's `done` callback (which must not
// block: the endpoint posts it to its progress engine), or at once through cancel(),
// which waits for the worker to let go of the stream (bounded: a worker looks at the
// cancel flag after every recv and every millisecond it waits).
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
#include <vector>

#include "datapath/chunk_io.h"
#include "net/io.h"

namespace remora::detail {

class RxWorkers {
 public:
  /// What a job came to: `got` bytes into its memory, and why it stopped (`last`: the
  /// recv that ended it; kWouldBlock when the socket stayed empty, or when the job was
  /// whole or cancelled).
  struct Result {
    uint64_t got = 0;
    net::IoResult last{};
  };
  /// One job's shared state: the scheduler keeps it while the job is its stream's.
  class Ticket {
   public:
    /// Asks the worker to stop and waits until it no longer touches the stream or the
    /// memory; returns what it did. Call at most once, instead of using `done`'s result.
    Result cancel();
    /// The result, stored before `done` is called (the scheduler's callback reads it).
    Result result() const;

   private:
    friend class RxWorkers;
    mutable std::mutex mutex_;
    std::condition_variable finished_cv_;
    bool finished_ = false;
    std::atomic<bool> cancel_{false};
    Result result_;
  };
  struct Job {
    StreamIn* in = nullptr;  // how the stream is read (its socket: in->fd())
    std::byte* dst = nullptr;
    uint64_t len = 0;
    uint64_t piece = 0;          // bytes per recv (0: all that is left)
    ChunkSink* sink = nullptr;   // whose host_destination `dst` is: released on the worker
    std::function<void()> done;  // on the worker, once the result is stored; must not block
  };

  /// `threads` workers (at least 1).
  explicit RxWorkers(uint32_t threads);
  ~RxWorkers();
  RxWorkers(const RxWorkers&) = delete;
  RxWorkers& operator=(const RxWorkers&) = delete;

  uint32_t threads() const noexcept { return static_cast<uint32_t>(workers_.size()); }
  /// Queues `job` on worker `worker % threads()`.
  std::shared_ptr<Ticket> submit(uint32_t worker, Job job);

 private:
  struct Worker {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::pair<Job, std::shared_ptr<Ticket>>> queue;
    bool stop = false;
    std::thread thread;
  };
  static void run(Worker& w);
  static Result work(const Job& job, const Ticket& ticket);
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace remora::detail
