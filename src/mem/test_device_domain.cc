// mem/test_device_domain.cc — the test double of a device's memory (see
// remora/testing/test_device.h).
//
// One memfd, mapped twice: the "device" view that pointers handed out point into,
// mapped PROT_NONE so that any direct access faults, and a read-write view only the
// copy engines use. Two engine threads, one per direction, each with its own queue;
// a copy's completion is published under its own mutex and then announced through
// on_done, outside every lock of the domain.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "remora/testing/test_device.h"

namespace remora::testing {
namespace {

using Clock = std::chrono::steady_clock;

/// The shared state of one copy: the engine completes it, the AsyncCopy handle waits.
struct CopyState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;      // test() sees the end
  bool reported = false;  // on_done's call (if any) has returned: wait() sees the end
  Status status;
  std::function<void()> on_done;

  void finish(Status s) {
    std::function<void()> fn;
    {
      std::lock_guard lock(mu);
      done = true;
      status = std::move(s);
      fn = std::move(on_done);
    }
    if (fn) fn();
    {
      std::lock_guard lock(mu);
      reported = true;  // after on_done's call: a waiter that returns sees its effects
    }
    cv.notify_all();
  }
};

class TestCopy final : public AsyncCopy {
 public:
  explicit TestCopy(std::shared_ptr<CopyState> state) : state_(std::move(state)) {}
  Status test() override {
    std::lock_guard lock(state_->mu);
    return state_->done ? state_->status : Status(StatusCode::kInProgress, "device copy in flight");
  }
  Status wait(Duration timeout) override {
    std::unique_lock lock(state_->mu);
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->reported; })) {
      return Status(StatusCode::kTimeout, "device copy still in flight");
    }
    return state_->status;
  }
  void on_done(std::function<void()> fn) override {
    {
      std::lock_guard lock(state_->mu);
      if (!state_->done) {
        state_->on_done = std::move(fn);
        return;
      }
    }
    fn();
  }

 private:
  std::shared_ptr<CopyState> state_;
};

struct Job {
  std::byte* dst;
  const std::byte* src;
  size_t len;
  bool fail;
  std::shared_ptr<CopyState> state;
  std::vector<ScatterEntry> pieces;  // a scatter: dst and src are bases, len the sum
};

}  // namespace

struct TestDeviceDomain::State {
  TestDeviceOptions options;
  int fd = -1;
  std::byte* device = nullptr;   // PROT_NONE: what owners of device pointers see
  std::byte* backing = nullptr;  // read-write: what the engines copy through
  std::atomic<size_t> used{0};
  std::atomic<double> rate{0};
  std::atomic<uint64_t> copies{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> prepared{0};

  std::mutex fail_mu;
  std::vector<std::pair<uintptr_t, uintptr_t>> fail_ranges;  // [begin, end) in device addresses

  /// export_areas_alone: each area from allocate_area, backed by a memfd of its own.
  struct Area {
    std::byte* device;
    size_t bytes;
    int fd;
  };
  std::mutex areas_mu;
  std::vector<Area> areas;

  struct Engine {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job> queue;
    bool stop = false;
    bool held = false;  // hold_copies: queued copies wait while set
    std::thread thread;
    Clock::time_point free_at{};  // when the engine's last copy ends, at the set rate
  };
  Engine engines[2];  // 0: to host, 1: from host

  bool in_device(const void* p, size_t len) const noexcept {
    const auto a = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(device);
    return a >= base && a - base <= options.capacity && len <= options.capacity - (a - base);
  }
  std::byte* backing_of(const void* p) const noexcept {
    return backing + (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(device));
  }
  bool fails(const void* p, size_t len) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard lock(fail_mu);
    return std::any_of(fail_ranges.begin(), fail_ranges.end(),
                       [&](const auto& r) { return a < r.second && a + len > r.first; });
  }

  void run(Engine& e) {
    for (;;) {
      Job job;
      bool was_idle = false;  // no copy was waiting when the last one ended
      {
        std::unique_lock lock(e.mu);
        const auto ready = [&] { return e.stop || (!e.queue.empty() && !e.held); };
        was_idle = !ready();
        e.cv.wait(lock, ready);
        if (e.queue.empty()) return;  // stopping, and nothing left in flight
        if (options.newest_first) {
          job = std::move(e.queue.back());
          e.queue.pop_back();
        } else {
          job = std::move(e.queue.front());
          e.queue.pop_front();
        }
      }
      const double r = rate.load(std::memory_order_relaxed);
      if (r > 0) {
        // A copy engine of bounded bandwidth: this copy ends len/rate after the
        // previous one did (or after now, if the engine was idle). An engine that is
        // never idle moves `rate` bytes per second, not less: the memcpy below happens
        // within a copy's time, not after it, and a wake-up later than the previous
        // end does not push this one back.
        const auto start = was_idle || e.free_at == Clock::time_point{} ? Clock::now() : e.free_at;
        e.free_at =
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(double(job.len) / r));
      } else {
        e.free_at = {};  // unlimited: a copy at a rate after this one starts the clock afresh
      }
      if (!job.fail && !job.pieces.empty()) {
        for (const ScatterEntry& p : job.pieces) {
          if (p.length > 0) std::memcpy(job.dst + p.dst_offset, job.src + p.src_offset, p.length);
        }
      } else if (!job.fail && job.len > 0) {
        std::memcpy(job.dst, job.src, job.len);  // a 0-byte copy may name null
      }
      if (r > 0) std::this_thread::sleep_until(e.free_at);
      if (job.fail) {
        failed.fetch_add(1, std::memory_order_relaxed);
        job.state->finish(Status(StatusCode::kDeviceFailed, fmt::format("test device: injected failure of a {}-byte copy "
                                                                    "(TestDeviceDomain::fail_copies)",
                                                                    job.len)));
        continue;
      }
      job.state->finish(Status::ok());
    }
  }

  Result<std::unique_ptr<AsyncCopy>> submit(int engine, std::byte* dst, const std::byte* src, size_t len,
                                            const void* device_ptr) {
    if (len > 0 && (dst == nullptr || src == nullptr)) {
      return Status(StatusCode::kInvalidArgument, "test device: copy with a null pointer");
    }
    if (len > 0 && !in_device(device_ptr, len)) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("test device: {} + {} bytes is not this device's memory", device_ptr, len));
    }
    copies.fetch_add(1, std::memory_order_relaxed);
    auto state = std::make_shared<CopyState>();
    Engine& e = engines[engine];
    {
      std::lock_guard lock(e.mu);
      e.queue.push_back(Job{dst, src, len, len > 0 && fails(device_ptr, len), state, {}});
    }
    e.cv.notify_one();
    return std::unique_ptr<AsyncCopy>(std::make_unique<TestCopy>(std::move(state)));
  }
};

Result<std::unique_ptr<TestDeviceDomain>> TestDeviceDomain::create(const TestDeviceOptions& options) {
  auto st = std::make_unique<State>();
  st->options = options;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  st->options.capacity = (std::max<size_t>(options.capacity, page) + page - 1) / page * page;
  st->rate.store(options.copy_bytes_per_second);
  st->fd = memfd_create("remora-test-device", MFD_CLOEXEC);
  if (st->fd < 0) return Status(StatusCode::kNoResource, fmt::format("test device: memfd_create: {}", std::strerror(errno)));
  if (ftruncate(st->fd, static_cast<off_t>(st->options.capacity)) != 0) {
    const int err = errno;
    ::close(st->fd);
    return Status(StatusCode::kNoResource, fmt::format("test device: ftruncate: {}", std::strerror(err)));
  }
  void* dev = mmap(nullptr, st->options.capacity, PROT_NONE, MAP_SHARED | MAP_NORESERVE, st->fd, 0);
  void* back = mmap(nullptr, st->options.capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, st->fd, 0);
  if (dev == MAP_FAILED || back == MAP_FAILED) {
    const int err = errno;
    if (dev != MAP_FAILED) munmap(dev, st->options.capacity);
    if (back != MAP_FAILED) munmap(back, st->options.capacity);
    ::close(st->fd);
    return Status(StatusCode::kNoResource, fmt::format("test device: mmap: {}", std::strerror(err)));
  }
  st->device = static_cast<std::byte*>(dev);
  st->backing = static_cast<std::byte*>(back);
  State* raw = st.get();
  for (auto& e : st->engines) e.thread = std::thread([raw, &e] { raw->run(e); });
  return std::unique_ptr<TestDeviceDomain>(new TestDeviceDomain(std::move(st)));
}

TestDeviceDomain::TestDeviceDomain(std::unique_ptr<State> state) : state_(std::move(state)) {}

TestDeviceDomain::~TestDeviceDomain() {
  for (auto& e : state_->engines) {
    {
      std::lock_guard lock(e.mu);
      e.stop = true;
    }
    e.cv.notify_all();
    e.thread.join();  // runs what is queued first: nothing still copies into unmapped memory
  }
  munmap(state_->device, state_->options.capacity);
  munmap(state_->backing, state_->options.capacity);
  ::close(state_->fd);
  for (const State::Area& a : state_->areas) ::close(a.fd);
}

Result<std::byte*> TestDeviceDomain::allocate(size_t len) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (std::max<size_t>(len, 1) + page - 1) / page * page;
  size_t at = state_->used.load();
  do {
    if (rounded > state_->options.capacity - at) {
      return Status(StatusCode::kNoResource, fmt::format("test device: {} bytes asked, {} of {} left", len,
                                                         state_->options.capacity - at, state_->options.capacity));
    }
  } while (!state_->used.compare_exchange_weak(at, at + rounded));
  return state_->device + at;
}

Result<void*> TestDeviceDomain::allocate_area(size_t len) {
  REMORA_ASSIGN_OR_RETURN(std::byte * p, allocate(len));
  if (!state_->options.export_areas_alone) return static_cast<void*>(p);
  // A memfd of the area's own, mapped over its pages in both views.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (std::max<size_t>(len, 1) + page - 1) / page * page;
  const int fd = memfd_create("remora-test-device-area", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      mmap(p, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED ||
      mmap(state_->backing_of(p), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return Status(StatusCode::kNoResource, fmt::format("test device: an area's own memfd: {}", std::strerror(err)));
  }
  std::lock_guard lock(state_->areas_mu);
  state_->areas.push_back(State::Area{.device = p, .bytes = bytes, .fd = fd});
  return static_cast<void*>(p);
}

void TestDeviceDomain::fail_copies(const void* ptr, size_t len) {
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(state_->fail_mu);
  state_->fail_ranges.emplace_back(a, a + len);
}

void TestDeviceDomain::clear_failures() {
  std::lock_guard lock(state_->fail_mu);
  state_->fail_ranges.clear();
}

void TestDeviceDomain::hold_copies(bool held) {
  for (auto& e : state_->engines) {
    {
      std::lock_guard lock(e.mu);
      e.held = held;
    }
    e.cv.notify_all();
  }
}

void TestDeviceDomain::set_copy_rate(double bytes_per_second) { state_->rate.store(bytes_per_second); }
uint64_t TestDeviceDomain::copies() const noexcept { return state_->copies.load(); }
uint64_t TestDeviceDomain::failed_copies() const noexcept { return state_->failed.load(); }
uint64_t TestDeviceDomain::prepared_staging() const noexcept { return state_->prepared.load(); }

Status TestDeviceDomain::write(void* device_dst, const void* host_src, size_t len) {
  auto copy = copy_from_host(device_dst, host_src, len);
  return copy ? (*copy)->wait(std::chrono::seconds(60)) : copy.status();
}

Status TestDeviceDomain::read(void* host_dst, const void* device_src, size_t len) {
  auto copy = copy_to_host(host_dst, device_src, len);
  return copy ? (*copy)->wait(std::chrono::seconds(60)) : copy.status();
}

Result<DmabufExport> TestDeviceDomain::export_dmabuf(const void* ptr, size_t len) {
  if (!state_->options.export_memfd) return MemoryDomain::export_dmabuf(ptr, len);
  if (len == 0 || !owns(ptr, len)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("test device: {} + {} bytes is not this device's memory",
                                                            ptr, len));
  }
  const auto* p = static_cast<const std::byte*>(ptr);
  if (state_->options.export_areas_alone) {
    std::lock_guard lock(state_->areas_mu);
    for (const State::Area& a : state_->areas) {
      if (p >= a.device && static_cast<size_t>(p - a.device) <= a.bytes &&
          len <= a.bytes - static_cast<size_t>(p - a.device)) {
        const int fd = ::fcntl(a.fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) return Status(StatusCode::kNoResource, fmt::format("test device: dup: {}", std::strerror(errno)));
        return DmabufExport{.fd = fd, .offset = static_cast<uint64_t>(p - a.device), .length = len};
      }
    }
  }
  const int fd = ::fcntl(state_->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return Status(StatusCode::kNoResource, fmt::format("test device: dup of its memfd: {}", std::strerror(errno)));
  return DmabufExport{.fd = fd, .offset = static_cast<uint64_t>(p - state_->device), .length = len};
}

bool TestDeviceDomain::owns(const void* ptr, size_t len) const {
  return ptr != nullptr && state_->in_device(ptr, len);
}

Result<DomainRegistration> TestDeviceDomain::register_range(void* ptr, size_t len, PinMode /*mode*/) {
  if (len == 0) return Status(StatusCode::kInvalidArgument, "cannot register an empty range (length 0)");
  if (!owns(ptr, len)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{} + {} bytes is not test-device memory", ptr, len));
  }
  return DomainRegistration{.pinned = true, .cookie = 0};  // device memory does not move
}

void TestDeviceDomain::deregister_range(void*, size_t, const DomainRegistration&) noexcept {}

Result<std::unique_ptr<AsyncCopy>> TestDeviceDomain::copy_to_host(void* host_dst, const void* src, size_t len) {
  return state_->submit(0, static_cast<std::byte*>(host_dst), state_->backing_of(src), len, src);
}

Result<std::unique_ptr<AsyncCopy>> TestDeviceDomain::scatter(void* dst_base, const void* src_base,
                                                             std::span<const ScatterEntry> entries) {
  State& st = *state_;
  size_t total = 0;
  bool fail = false;
  std::vector<ScatterEntry> pieces;
  pieces.reserve(entries.size());
  for (const ScatterEntry& e : entries) {
    if (e.length == 0) continue;
    const auto* src = static_cast<const std::byte*>(src_base);
    auto* dst = static_cast<std::byte*>(dst_base);
    if (src_base == nullptr || dst_base == nullptr || e.src_offset > st.options.capacity ||
        e.dst_offset > st.options.capacity || !st.in_device(src + e.src_offset, e.length) ||
        !st.in_device(dst + e.dst_offset, e.length)) {
      return Status(StatusCode::kOutOfRange,
                    fmt::format("test device: scatter entry {}+{} -> {}+{} ({} bytes) is not this device's memory",
                                src_base, e.src_offset, dst_base, e.dst_offset, e.length));
    }
    fail = fail || st.fails(src + e.src_offset, e.length) || st.fails(dst + e.dst_offset, e.length);
    total += e.length;
    pieces.push_back(e);
  }
  st.copies.fetch_add(1, std::memory_order_relaxed);
  auto state = std::make_shared<CopyState>();
  if (pieces.empty()) {
    state->finish(Status::ok());
    return std::unique_ptr<AsyncCopy>(std::make_unique<TestCopy>(std::move(state)));
  }
  State::Engine& e = st.engines[1];
  {
    std::lock_guard lock(e.mu);
    e.queue.push_back(Job{st.backing_of(dst_base), st.backing_of(src_base), total, fail, state, std::move(pieces)});
  }
  e.cv.notify_one();
  return std::unique_ptr<AsyncCopy>(std::make_unique<TestCopy>(std::move(state)));
}

Result<std::unique_ptr<AsyncCopy>> TestDeviceDomain::copy_from_host(void* dst, const void* host_src, size_t len) {
  return state_->submit(1, state_->backing_of(dst), static_cast<const std::byte*>(host_src), len, dst);
}

Status TestDeviceDomain::prepare_staging(void* host, size_t len) {
  if (host == nullptr || len == 0) return Status(StatusCode::kInvalidArgument, "test device: empty staging buffer");
  state_->prepared.fetch_add(1);
  return Status::ok();
}

void TestDeviceDomain::release_staging(void*, size_t) noexcept { state_->prepared.fetch_sub(1); }

}  // namespace remora::testing
