// net/shm_ring.cc — see shm_ring.h.
#include "net/shm_ring.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace remora::net {
namespace {


static_assert(sizeof(ShmRingMemory::Header) <= ShmRingMemory::kHeaderBytes);
static_assert(offsetof(ShmRingMemory::Header, tail) == 64, "the copy shares head's line (docs/protocol.md)");
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the ring's counters are shared between processes: they must be lock-free");

Status corrupt(std::string what) {
  return Status(StatusCode::kProtocol, "shared-memory ring corrupt: " + std::move(what));
}

/// Copies `n` bytes into the ring's data at position `pos`, wrapping.
void to_ring(std::byte* data, size_t capacity, uint64_t pos, const std::byte* bytes, size_t n) noexcept {
  if (n == 0) return;  // an empty span may have no address at all
  const size_t at = static_cast<size_t>(pos & (capacity - 1));
  const size_t first = std::min(n, capacity - at);
  std::memcpy(data + at, bytes, first);
  std::memcpy(data, bytes + first, n - first);
}

/// Copies `n` bytes out of the ring's data at position `pos`, wrapping.
void from_ring(const std::byte* data, size_t capacity, uint64_t pos, std::byte* bytes, size_t n) noexcept {
  if (n == 0) return;  // an empty span may have no address at all
  const size_t at = static_cast<size_t>(pos & (capacity - 1));
  const size_t first = std::min(n, capacity - at);
  std::memcpy(bytes, data + at, first);
  std::memcpy(bytes + first, data, n - first);
}

}  // namespace

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

Result<ShmRingMemory> ShmRingMemory::create(size_t capacity) {
  if (!std::has_single_bit(capacity) || capacity < kMinCapacity || capacity > kMaxCapacity) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("shared-memory ring of {} bytes: the capacity must be a power of two in [{}, {}]",
                              capacity, kMinCapacity, kMaxCapacity));
  }
  ShmRingMemory m;
  REMORA_ASSIGN_OR_RETURN(m.memory_, SharedMemory::create("remora-shm-ring", kHeaderBytes + capacity));
  m.capacity_ = capacity;
  // A fresh memfd reads as zeros: head = tail = 0, producer not waiting.
  m.header().consumer_sleeping.store(1, std::memory_order_release);
  return m;
}

Result<ShmRingMemory> ShmRingMemory::adopt(Fd fd) {
  ShmRingMemory m;
  REMORA_ASSIGN_OR_RETURN(m.memory_, SharedMemory::adopt(std::move(fd), "shared-memory ring"));
  const size_t size = m.memory_.size();
  const size_t capacity = size > kHeaderBytes ? size - kHeaderBytes : 0;
  if (!std::has_single_bit(capacity) || capacity < kMinCapacity || capacity > kMaxCapacity) {
    return Status(StatusCode::kProtocol,
                  fmt::format("the peer's shared-memory ring has {} bytes: not a header and a power-of-two capacity "
                              "in [{}, {}]",
                              size, kMinCapacity, kMaxCapacity));
  }
  m.capacity_ = capacity;
  return m;
}

// ---------------------------------------------------------------------------
// Consumer
// ---------------------------------------------------------------------------

size_t ShmRingReader::readable() const noexcept {
  const uint64_t head = memory_.header().head.load(std::memory_order_acquire);
  const uint64_t avail = head - tail_;
  return head >= seen_head_ && avail <= memory_.capacity() ? static_cast<size_t>(avail) : 0;
}

bool ShmRingReader::take_copy(std::byte* dst, size_t n) const noexcept {
  if (n > ShmRingMemory::kCopyBytes) return false;
  const ShmRingMemory::Header& h = memory_.header();
  // A sequence lock without fences (ThreadSanitizer has none): the copy's fields are
  // loaded with acquire, so a field the producer stored after making the sequence odd
  // makes the second load of the sequence see that (or later). Plain loads on x86.
  const uint32_t seq = h.copy_seq.load(std::memory_order_acquire);
  if ((seq & 1) != 0 || h.copy_at.load(std::memory_order_acquire) != tail_ ||
      h.copy_len.load(std::memory_order_acquire) != n) {
    return false;
  }
  uint64_t words[ShmRingMemory::kCopyBytes / 8];
  for (size_t i = 0; i < (n + 7) / 8; ++i) words[i] = h.copy[i].load(std::memory_order_acquire);
  if (h.copy_seq.load(std::memory_order_relaxed) != seq) return false;  // changed meanwhile
  std::memcpy(dst, words, n);
  return true;
}

Result<ShmRingReader::Read> ShmRingReader::read(std::span<std::byte> dst, bool arm) noexcept {
  ShmRingMemory::Header& h = memory_.header();
  const size_t capacity = memory_.capacity();
  Read out;
  for (int pass = 0; pass < 2; ++pass) {
    const uint64_t head = h.head.load(std::memory_order_seq_cst);
    if (head < seen_head_) return corrupt(fmt::format("the head went back from {} to {}", seen_head_, head));
    const uint64_t avail = head - tail_;
    if (avail > capacity) {
      return corrupt(fmt::format("the head is {} bytes ahead of the tail, beyond the ring's {}", avail, capacity));
    }
    seen_head_ = head;
    if (avail > 0) {
      sync_acquire(memory_.sync_key());  // the producer's bytes before its head
      const size_t n = static_cast<size_t>(std::min<uint64_t>(avail, dst.size()));
      if (n != avail || !take_copy(dst.data(), n)) from_ring(memory_.data(), capacity, tail_, dst.data(), n);
      tail_ += n;
      sync_release(memory_.sync_key());
      h.tail.store(tail_, std::memory_order_seq_cst);
      // Store the tail before looking at the flag, as the producer sets the flag before
      // it looks at the tail once more: one of the two sees the other (the four
      // accesses are sequentially consistent, so both cannot read the old value).
      if (h.producer_waiting.load(std::memory_order_seq_cst) != 0) {
        out.wake_producer = h.producer_waiting.exchange(0, std::memory_order_acq_rel) != 0;
      }
      out.bytes = n;
      return out;
    }
    if (!arm || pass == 1) break;
    // Empty: say this side may sleep, then look once more (a write that came in
    // between saw no flag and woke nobody).
    if (h.consumer_sleeping.load(std::memory_order_relaxed) == 0)
      h.consumer_sleeping.store(1, std::memory_order_seq_cst);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Producer
// ---------------------------------------------------------------------------

Result<uint64_t> ShmRingWriter::room() noexcept {
  const uint64_t tail = memory_.header().tail.load(std::memory_order_seq_cst);
  if (tail < seen_tail_) return corrupt(fmt::format("the tail went back from {} to {}", seen_tail_, tail));
  if (tail > head_) return corrupt(fmt::format("the tail {} is ahead of the head {}", tail, head_));
  seen_tail_ = tail;
  sync_acquire(memory_.sync_key());            // the consumer is done with the bytes before its tail
  return memory_.capacity() - (head_ - tail);  // head_ - tail <= capacity: this side wrote no more
}

void ShmRingWriter::copy_beside_head(uint64_t at, std::span<const std::byte> bytes) noexcept {
  ShmRingMemory::Header& h = memory_.header();
  uint64_t words[ShmRingMemory::kCopyBytes / 8] = {};
  std::memcpy(words, bytes.data(), bytes.size());
  // The fields are stored with release after the sequence is made odd (see take_copy).
  h.copy_seq.store(++copy_seq_, std::memory_order_relaxed);  // odd: changing
  h.copy_at.store(at, std::memory_order_release);
  h.copy_len.store(static_cast<uint32_t>(bytes.size()), std::memory_order_release);
  for (size_t i = 0; i < (bytes.size() + 7) / 8; ++i) h.copy[i].store(words[i], std::memory_order_release);
  h.copy_seq.store(++copy_seq_, std::memory_order_release);  // even: whole
}

Result<ShmRingWriter::Wrote> ShmRingWriter::write(std::span<const std::byte> src) noexcept {
  ShmRingMemory::Header& h = memory_.header();
  Wrote out;
  for (int pass = 0; pass < 2 && out.bytes < src.size(); ++pass) {
    // Room by the tail seen last (the tail only grows, so at least that much is free);
    // the shared tail is read only when that is not enough. The consumer stores it
    // after every read, so reading it each time would miss the cache on every write.
    uint64_t free = memory_.capacity() - (head_ - seen_tail_);
    if (free < src.size() - out.bytes) {
      REMORA_ASSIGN_OR_RETURN(free, room());
    }
    if (free == 0) {
      if (pass == 1) break;
      // Full: ask to be woken once the consumer read, then look once more.
      h.producer_waiting.store(1, std::memory_order_seq_cst);
      continue;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(free, src.size() - out.bytes));
    to_ring(memory_.data(), memory_.capacity(), head_, src.data() + out.bytes, n);
    if (n == src.size() && n <= ShmRingMemory::kCopyBytes) copy_beside_head(head_, src);
    head_ += n;
    out.bytes += n;
    sync_release(memory_.sync_key());
    h.head.store(head_, std::memory_order_seq_cst);
    if (out.bytes < src.size() && pass == 0) {
      h.producer_waiting.store(1, std::memory_order_seq_cst);
    }
  }
  if (out.bytes > 0) {
    // The head is stored before the flag is read, as the consumer sets the flag before
    // it reads the head once more.
    if (h.consumer_sleeping.load(std::memory_order_seq_cst) != 0) {
      out.wake_consumer = h.consumer_sleeping.exchange(0, std::memory_order_acq_rel) != 0;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Descriptors
// ---------------------------------------------------------------------------

Result<Fd> make_wake_fd() {
  Fd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd.valid()) return errno_status(errno, "eventfd for a shared-memory channel");
  return fd;
}

void wake(int fd) noexcept {
  const uint64_t one = 1;
  ssize_t n;
  do {
    n = ::write(fd, &one, sizeof one);
  } while (n < 0 && errno == EINTR);
  // EAGAIN: the counter is full, so the owner has a wake-up pending anyway.
}

Status check_eventfd(int fd) {
  char link[64] = {};
  const std::string path = fmt::format("/proc/self/fd/{}", fd);
  const ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  if (n < 0) return errno_status(errno, "readlink " + path);
  if (std::string_view(link, static_cast<size_t>(n)) != "anon_inode:[eventfd]") {
    return Status(StatusCode::kProtocol,
                  fmt::format("the peer's wake-up descriptor is not an eventfd ({})", std::string_view(link, n)));
  }
  return Status::ok();
}

}  // namespace remora::net
