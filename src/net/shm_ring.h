// net/shm_ring.h — a single-producer single-consumer byte ring in memory that two
// processes of one host map (docs/protocol.md, "Shared-memory channel"): the
// replacement for the bytes of a control connection between same-host peers.
//
// Each side creates the ring it READS (a sealed memfd it cannot be made to fault on) and
// an eventfd it is woken through; the peer takes both with pidfd_getfd(2) (allowed where
// process_vm_readv is: same user, or CAP_SYS_PTRACE) and writes into the ring.
//
// Layout of the memfd: a 4 KiB header, then `capacity` bytes of data (a power of two).
// The header holds, each on its own cache line, the producer's 64-bit `head` (bytes
// written since creation; its line also holds a copy of the producer's last write when
// that was small, so the consumer of a small frame reads one line the producer wrote,
// not two), the consumer's 64-bit `tail` (bytes read), the consumer's
// "sleeping" flag (set by the consumer before it may block, cleared by the producer
// that then writes the consumer's eventfd) and the producer's "waiting for room" flag
// (the same the other way round).
//
// The peer is not trusted: every side keeps its own counter privately and never reads
// it back from shared memory; the other side's counter is bounds-checked on every read
// (a consumer refuses a head behind the one it saw or more than `capacity` ahead of its
// tail; a producer a tail behind the one it saw or ahead of its head) and a violation is
// a kProtocol error (the producer reads the tail only when the room left by the tail it
// saw last is too small for a write). Positions index the data modulo this side's own capacity, taken
// from the size of a memfd the peer cannot shrink or grow (F_SEAL_SHRINK | F_SEAL_GROW),
// so nothing outside the mapping is ever touched whatever the peer writes. Bytes are
// copied out of the ring before anyone decodes them.
//
// Not thread-safe: one producer and one consumer, each called under its owner's lock.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "net/shared_memory.h"
#include "net/socket.h"
#include "remora/status.h"

namespace remora::net {

/// A ring's memory mapped into this process (move-only; unmaps on destruction).
class ShmRingMemory {
 public:
  static constexpr size_t kHeaderBytes = 4096;
  static constexpr size_t kMinCapacity = size_t{4} << 10;
  static constexpr size_t kMaxCapacity = size_t{64} << 20;

  /// Bytes of a write the producer also copies beside `head` (the rest of head's line).
  static constexpr size_t kCopyBytes = 40;

  /// The shared header (docs/protocol.md). Every field may be written by a hostile peer.
  struct Header {
    alignas(64) std::atomic<uint64_t> head;  ///< producer: bytes written
    /// The producer's last write, when it was at most kCopyBytes, again beside `head`
    /// (a sequence lock: copy_seq is odd while the copy changes): its bytes are the
    /// stream's bytes [copy_at, copy_at + copy_len). A consumer whose tail is copy_at
    /// and that finds exactly copy_len bytes readable takes them from here, and does
    /// not wait for the data's own cache line to come from the producer's CPU. Older
    /// producers leave it zero, which no read matches.
    std::atomic<uint32_t> copy_seq;
    std::atomic<uint32_t> copy_len;
    std::atomic<uint64_t> copy_at;
    std::atomic<uint64_t> copy[kCopyBytes / 8];
    alignas(64) std::atomic<uint64_t> tail;  ///< consumer: bytes read
    alignas(64) std::atomic<uint32_t> consumer_sleeping;
    alignas(64) std::atomic<uint32_t> producer_waiting;
  };

  /// A new ring of `capacity` bytes (a power of two in [kMinCapacity, kMaxCapacity]) in
  /// a sealed memfd, mapped; the consumer starts "sleeping" (the first write wakes it).
  static Result<ShmRingMemory> create(size_t capacity);
  /// Maps a ring the peer created (taken with take_peer_fd), and closes `fd` (the
  /// mapping is what this side uses; fd() is then -1). kProtocol when `fd` is not
  /// a memfd sealed against shrinking and growing, or its size is not the header plus a
  /// power-of-two capacity in range.
  static Result<ShmRingMemory> adopt(Fd fd);

  bool valid() const noexcept { return memory_.valid(); }
  /// The memfd the peer takes (-1 in a ring this side adopted).
  int fd() const noexcept { return memory_.fd(); }
  size_t capacity() const noexcept { return capacity_; }
  Header& header() const noexcept { return *reinterpret_cast<Header*>(memory_.base()); }
  /// For sync_acquire / sync_release (net/shared_memory.h).
  void* sync_key() const noexcept { return memory_.sync_key(); }
  std::byte* data() const noexcept { return memory_.base() + kHeaderBytes; }

 private:
  SharedMemory memory_;
  size_t capacity_ = 0;
};

/// The consumer's end: reads bytes out of its own ring.
class ShmRingReader {
 public:
  struct Read {
    size_t bytes = 0;            ///< copied into the destination (0: the ring is empty)
    bool wake_producer = false;  ///< the producer waits for room: write its eventfd
  };
  explicit ShmRingReader(ShmRingMemory memory) : memory_(std::move(memory)) {}

  /// Copies up to dst.size() bytes out of the ring. With `arm` and an empty ring it
  /// marks the consumer sleeping (so the next write wakes it) and looks once more. A
  /// consumer that may block must read until a read returns 0 bytes: a read that
  /// copies bytes does not mark it sleeping.
  /// kProtocol when the producer's head is behind what it was or more than the
  /// capacity ahead of the tail (a corrupt or hostile peer); nothing is copied then.
  Result<Read> read(std::span<std::byte> dst, bool arm) noexcept;
  /// Bytes readable now (0 also when the head is corrupt: read() says so).
  size_t readable() const noexcept;
  const ShmRingMemory& memory() const noexcept { return memory_; }

 private:
  /// The `n` bytes at the tail from the copy beside the head, if it holds exactly them.
  bool take_copy(std::byte* dst, size_t n) const noexcept;
  ShmRingMemory memory_;
  uint64_t tail_ = 0;       // private: never read back from shared memory
  uint64_t seen_head_ = 0;  // the last head read; heads never go back
};

/// The producer's end: writes bytes into the peer's ring.
class ShmRingWriter {
 public:
  struct Wrote {
    size_t bytes = 0;            ///< copied into the ring (fewer than asked: it is full)
    bool wake_consumer = false;  ///< the consumer may sleep: write its eventfd
  };
  explicit ShmRingWriter(ShmRingMemory memory) : memory_(std::move(memory)) {}

  /// Copies as much of `src` as fits. When not all of it fits, marks the producer as
  /// waiting for room (the consumer wakes it once it read) and looks once more.
  /// kProtocol when the consumer's tail is behind what it was or ahead of the head.
  Result<Wrote> write(std::span<const std::byte> src) noexcept;
  const ShmRingMemory& memory() const noexcept { return memory_; }

 private:
  Result<uint64_t> room() noexcept;
  /// Copies `bytes` (at most kCopyBytes), written at stream position `at`, beside the head.
  void copy_beside_head(uint64_t at, std::span<const std::byte> bytes) noexcept;
  ShmRingMemory memory_;
  uint64_t head_ = 0;       // private
  uint32_t copy_seq_ = 0;   // private
  uint64_t seen_tail_ = 0;  // the last tail read; room is counted from it until it is not enough
};

/// A non-blocking eventfd a side is woken through (registered with its progress engine).
Result<Fd> make_wake_fd();
/// Wakes the side that owns eventfd `fd` (one write of 1; a full counter is ignored).
void wake(int fd) noexcept;
/// kProtocol unless `fd` is an eventfd (a hostile peer could name any descriptor).
Status check_eventfd(int fd);

}  // namespace remora::net
