// net/shm_ring: the shared-memory byte ring between two real processes (fork): a stream
// of bytes crosses it intact through many wrap-arounds, with the producer and consumer
// waking each other through eventfds; descriptors cross with pidfd_getfd; and a hostile
// peer scribbling the counters gets a kProtocol error, never an access outside the
// mapping (a child killed by a signal fails the test). In one process (the ring mapped
// twice): a small write is read from its copy beside the head, every other from the
// ring, and a scribbled copy is never read beyond its room.
#include "net/shm_ring.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace remora::net {
namespace {

constexpr int kWaitMs = 20000;  // every wait in these tests ends by then

/// The deterministic byte at stream position `i`.
std::byte stream_byte(uint64_t i) { return static_cast<std::byte>((i * 2654435761u) >> 13); }

/// Waits up to kWaitMs for `fd` to be readable; false on timeout.
bool wait_readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, kWaitMs) == 1;
}

/// Drains an eventfd (non-blocking).
void drain(int fd) {
  uint64_t v;
  while (::read(fd, &v, sizeof v) > 0) {
  }
}

/// A forked child; the parent waits for it with a bound.
struct Child {
  pid_t pid = -1;
  int pipe_rd = -1;  // what the child tells the parent

  /// Exit status of the child (its code, or 128 + signal), -1 if it did not end in time.
  int wait() const {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd >= 0) {
      const bool ended = wait_readable(pidfd);
      ::close(pidfd);
      if (!ended) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        return -1;
      }
    }
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return -1;
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
  }
};

/// Reads the two descriptor numbers the child wrote to its pipe.
bool read_fds(const Child& c, std::array<int, 2>& fds) {
  if (!wait_readable(c.pipe_rd)) return false;
  return ::read(c.pipe_rd, fds.data(), sizeof fds) == static_cast<ssize_t>(sizeof fds);
}

/// Forks a child that creates a ring of `capacity` bytes and an eventfd, tells the
/// parent their numbers, then runs `body(reader, wake_fd)` and exits with its result.
template <typename Body>
Child fork_ring_owner(size_t capacity, Body body) {
  int p[2];
  if (::pipe(p) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    auto mem = ShmRingMemory::create(capacity);
    auto wake_fd = make_wake_fd();
    if (!mem || !wake_fd) ::_exit(90);
    const std::array<int, 2> fds = {mem->fd(), wake_fd->get()};
    if (::write(p[1], fds.data(), sizeof fds) != static_cast<ssize_t>(sizeof fds)) ::_exit(91);
    ShmRingReader reader(std::move(*mem));
    ::_exit(body(reader, wake_fd->get()));
  }
  ::close(p[1]);
  return Child{pid, p[0]};
}

/// The parent's end of a child's ring: the memory mapped as a writer's, and the
/// child's eventfd, both taken with pidfd_getfd.
struct PeerRing {
  ShmRingMemory memory;
  Fd wake;
};

Result<PeerRing> take_ring(const Child& c) {
  std::array<int, 2> fds{};
  if (!read_fds(c, fds)) return Status(StatusCode::kTimeout, "the child named no descriptors");
  REMORA_ASSIGN_OR_RETURN(Fd ring_fd, take_peer_fd(c.pid, fds[0]));
  REMORA_ASSIGN_OR_RETURN(Fd wake_fd, take_peer_fd(c.pid, fds[1]));
  REMORA_RETURN_IF_ERROR(check_eventfd(wake_fd.get()));
  REMORA_ASSIGN_OR_RETURN(ShmRingMemory memory, ShmRingMemory::adopt(std::move(ring_fd)));
  return PeerRing{std::move(memory), std::move(wake_fd)};
}

TEST(ShmRing, AStreamCrossesIntactBetweenTwoProcessesThroughManyWrapArounds) {
  constexpr size_t kCapacity = 4096;
  constexpr uint64_t kTotal = uint64_t{8} << 20;  // 2048 laps of the ring
  auto producer_wake = make_wake_fd();            // inherited: the child wakes the parent through it
  ASSERT_TRUE(producer_wake.is_ok());
  const int producer_fd = producer_wake->get();
  Child child = fork_ring_owner(kCapacity, [producer_fd](ShmRingReader& reader, int wake_fd) {
    std::vector<std::byte> buf(1500);  // not a divisor of the capacity: reads straddle the wrap
    uint64_t got = 0;
    while (got < kTotal) {
      auto r = reader.read(buf, /*arm=*/true);
      if (!r) return 2;
      if (r->wake_producer) wake(producer_fd);
      for (size_t i = 0; i < r->bytes; ++i) {
        if (buf[i] != stream_byte(got + i)) return 3;
      }
      got += r->bytes;
      if (r->bytes == 0) {
        if (!wait_readable(wake_fd)) return 4;  // the producer wakes a sleeping consumer
        drain(wake_fd);
      }
    }
    return 0;
  });
  ASSERT_GT(child.pid, 0);
  auto peer = take_ring(child);
  ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
  ASSERT_EQ(peer->memory.capacity(), kCapacity);
  ShmRingWriter writer(std::move(peer->memory));
  std::mt19937_64 rng(7);
  std::vector<std::byte> piece(3 * kCapacity);
  uint64_t sent = 0;
  uint64_t stalls = 0;
  while (sent < kTotal) {
    const size_t want = std::min<uint64_t>(1 + rng() % piece.size(), kTotal - sent);
    for (size_t i = 0; i < want; ++i) piece[i] = stream_byte(sent + i);
    size_t done = 0;
    while (done < want) {
      auto w = writer.write(std::span(piece).subspan(done, want - done));
      ASSERT_TRUE(w.is_ok()) << w.status().to_string();
      if (w->wake_consumer) wake(peer->wake.get());
      done += w->bytes;
      if (done < want) {
        ++stalls;
        ASSERT_TRUE(wait_readable(producer_fd)) << "the consumer never made room";
        drain(producer_fd);
      }
    }
    sent += want;
  }
  EXPECT_EQ(child.wait(), 0);
  EXPECT_GT(stalls, 0u);  // the ring was full at times: the room wake-up ran
}

/// The reader's verdict in a hostile-writer child: 0 when it saw a kProtocol
/// "corrupt" error (and nothing else went wrong), else a code saying what.
int read_until_corrupt(ShmRingReader& reader, int wake_fd) {
  std::vector<std::byte> buf(8192);
  for (int rounds = 0; rounds < 100000; ++rounds) {
    auto r = reader.read(buf, /*arm=*/true);
    if (!r) {
      return r.status().code() == StatusCode::kProtocol &&
                     r.status().message().find("ring corrupt") != std::string::npos
                 ? 0
                 : 5;
    }
    if (r->bytes == 0) {
      if (!wait_readable(wake_fd)) return 4;
      drain(wake_fd);
    }
  }
  return 6;
}

TEST(ShmRing, AHeadBeyondTheCapacityIsRefusedByTheReader) {
  Child child = fork_ring_owner(4096, read_until_corrupt);
  ASSERT_GT(child.pid, 0);
  auto peer = take_ring(child);
  ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
  // The ring holds 4096 bytes; claim 1 MiB more were written.
  peer->memory.header().head.store(uint64_t{1} << 20);
  peer->memory.header().consumer_sleeping.store(0);
  wake(peer->wake.get());
  EXPECT_EQ(child.wait(), 0);
}

TEST(ShmRing, AHeadThatGoesBackIsRefusedByTheReader) {
  Child child = fork_ring_owner(4096, read_until_corrupt);
  ASSERT_GT(child.pid, 0);
  auto peer = take_ring(child);
  ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
  ShmRingMemory::Header& h = peer->memory.header();
  h.head.store(100);  // 100 bytes "written": the reader takes them
  wake(peer->wake.get());
  // Once read (the tail says so), move the head back behind it.
  for (int i = 0; i < kWaitMs && h.tail.load() != 100; ++i) ::usleep(1000);
  ASSERT_EQ(h.tail.load(), 100u);
  h.head.store(40);
  wake(peer->wake.get());
  EXPECT_EQ(child.wait(), 0);
}

TEST(ShmRing, AScribblingWriterNeverMakesTheReaderTouchMemoryOutsideTheRing) {
  // Random heads (most far out of range, some just inside), random flags, random data:
  // the reader must fail cleanly (exit 0 after a kProtocol) — a SIGSEGV or SIGBUS
  // would end the child with 128 + the signal.
  Child child = fork_ring_owner(4096, [](ShmRingReader& reader, int wake_fd) {
    std::vector<std::byte> buf(4096);
    for (int rounds = 0; rounds < 200000; ++rounds) {
      auto r = reader.read(buf, /*arm=*/(rounds & 1) != 0);
      if (!r) return r.status().code() == StatusCode::kProtocol ? 0 : 5;
      if (r->bytes == 0 && (rounds & 1) != 0) {
        if (!wait_readable(wake_fd)) return 4;
        drain(wake_fd);
      }
    }
    return 6;
  });
  ASSERT_GT(child.pid, 0);
  auto peer = take_ring(child);
  ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
  ShmRingMemory::Header& h = peer->memory.header();
  std::mt19937_64 rng(11);
  std::memset(peer->memory.data(), 0xA5, peer->memory.capacity());
  // A few valid-looking steps first, then garbage.
  uint64_t head = 0;
  for (int i = 0; i < 50; ++i) {
    head += rng() % 2048;
    h.head.store(head);
    h.tail.store(rng());  // the reader never reads its own tail back
    h.producer_waiting.store(static_cast<uint32_t>(rng()));
    wake(peer->wake.get());
  }
  h.head.store(rng() | (uint64_t{1} << 63));
  wake(peer->wake.get());
  EXPECT_EQ(child.wait(), 0);
}

TEST(ShmRing, ATailScribbledByTheConsumerIsRefusedByTheWriter) {
  // The child (the ring's owner) writes a tail ahead of anything written.
  Child child = fork_ring_owner(4096, [](ShmRingReader& reader, int wake_fd) {
    const_cast<ShmRingMemory&>(reader.memory()).header().tail.store(12345);
    return wait_readable(wake_fd) ? 0 : 4;  // stays until the parent took the ring
  });
  ASSERT_GT(child.pid, 0);
  auto peer = take_ring(child);
  ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
  wake(peer->wake.get());
  ASSERT_EQ(child.wait(), 0);  // the tail is scribbled
  ShmRingWriter writer(std::move(peer->memory));
  // The writer reads the tail only when the room it knows of runs out: filling the ring
  // needs none, the next write does.
  const std::vector<std::byte> fill(4096);
  auto filled = writer.write(fill);
  ASSERT_TRUE(filled.is_ok()) << filled.status().to_string();
  ASSERT_EQ(filled->bytes, fill.size());
  const std::array<std::byte, 16> bytes{};
  auto w = writer.write(bytes);
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().code(), StatusCode::kProtocol);
  EXPECT_NE(w.status().message().find("ahead of the head"), std::string::npos) << w.status().to_string();
}

// An empty destination or source (a span with no address) moves nothing and leaves the
// bytes in flight where they were; found by tests/fuzz/shm_ring_fuzz.cc (a memcpy from
// a null pointer, undefined even for 0 bytes).
TEST(ShmRing, EmptySpansMoveNothingAndLoseNothing) {
  auto created = ShmRingMemory::create(4096);
  ASSERT_TRUE(created.is_ok()) << created.status().to_string();
  auto adopted = ShmRingMemory::adopt(Fd(::dup(created->fd())));
  ASSERT_TRUE(adopted.is_ok()) << adopted.status().to_string();
  ShmRingReader reader(std::move(*created));
  ShmRingWriter writer(std::move(*adopted));
  auto nothing = writer.write({});
  ASSERT_TRUE(nothing.is_ok()) << nothing.status().to_string();
  EXPECT_EQ(nothing->bytes, 0u);
  std::vector<std::byte> sent(100);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = stream_byte(i);
  auto wrote = writer.write(sent);
  ASSERT_TRUE(wrote.is_ok()) << wrote.status().to_string();
  ASSERT_EQ(wrote->bytes, sent.size());
  auto none = reader.read({}, /*arm=*/false);
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_EQ(none->bytes, 0u);
  std::vector<std::byte> got(sent.size());
  auto read = reader.read(got, /*arm=*/false);
  ASSERT_TRUE(read.is_ok()) << read.status().to_string();
  EXPECT_EQ(read->bytes, sent.size());
  EXPECT_EQ(got, sent);
}

/// A ring mapped twice in this process: its reader, and a writer on the second mapping.
struct LocalRing {
  ShmRingReader reader;
  ShmRingWriter writer;
  std::byte* data;  // the writer's view of the data area
  ShmRingMemory::Header* header;
};

std::unique_ptr<LocalRing> local_ring(size_t capacity) {
  auto created = ShmRingMemory::create(capacity);
  if (!created) return nullptr;
  auto adopted = ShmRingMemory::adopt(Fd(::dup(created->fd())));
  if (!adopted) return nullptr;
  std::byte* data = adopted->data();
  ShmRingMemory::Header* header = &adopted->header();
  return std::unique_ptr<LocalRing>(
      new LocalRing{ShmRingReader(std::move(*created)), ShmRingWriter(std::move(*adopted)), data, header});
}

TEST(ShmRing, ASmallWriteIsReadFromTheCopyBesideTheHead) {
  auto ring = local_ring(4096);
  ASSERT_NE(ring, nullptr);
  std::vector<std::byte> sent(ShmRingMemory::kCopyBytes);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = stream_byte(i);
  auto wrote = ring->writer.write(sent);
  ASSERT_TRUE(wrote.is_ok()) << wrote.status().to_string();
  ASSERT_EQ(wrote->bytes, sent.size());
  // The ring's own bytes changed after the write: the read must not have looked there.
  std::memset(ring->data, 0xEE, sent.size());
  std::vector<std::byte> got(4096);
  auto read = ring->reader.read(got, /*arm=*/false);
  ASSERT_TRUE(read.is_ok()) << read.status().to_string();
  ASSERT_EQ(read->bytes, sent.size());
  got.resize(read->bytes);
  EXPECT_EQ(got, sent);
}

TEST(ShmRing, WritesTheCopyDoesNotHoldAreReadFromTheRing) {
  // Two small writes before a read (the copy holds the second only), a write one byte
  // larger than the copy, and a read shorter than a small write: all from the ring,
  // byte for byte, through many wrap-arounds of a small ring.
  auto ring = local_ring(4096);
  ASSERT_NE(ring, nullptr);
  std::mt19937_64 rng(5);
  uint64_t sent = 0, got = 0;
  std::vector<std::byte> piece(ShmRingMemory::kCopyBytes + 1), buf(4096);
  for (int round = 0; round < 20000; ++round) {
    const int writes = 1 + static_cast<int>(rng() % 3);
    for (int w = 0; w < writes; ++w) {
      const size_t n = 1 + rng() % piece.size();
      for (size_t i = 0; i < n; ++i) piece[i] = stream_byte(sent + i);
      auto wrote = ring->writer.write(std::span(piece).first(n));
      ASSERT_TRUE(wrote.is_ok()) << wrote.status().to_string();
      ASSERT_EQ(wrote->bytes, n);
      sent += n;
    }
    while (got < sent) {
      const size_t want = (rng() % 4 == 0) ? 1 + rng() % 8 : buf.size();
      auto read = ring->reader.read(std::span(buf).first(want), /*arm=*/false);
      ASSERT_TRUE(read.is_ok()) << read.status().to_string();
      ASSERT_GT(read->bytes, 0u);
      for (size_t i = 0; i < read->bytes; ++i) ASSERT_EQ(buf[i], stream_byte(got + i)) << "at " << got + i;
      got += read->bytes;
    }
  }
}

TEST(ShmRing, AScribbledCopyBesideTheHeadIsNeverReadBeyondItsRoom) {
  // A peer that claims a copy of more bytes than the copy holds, or one in the middle
  // of a change: the reader takes the ring's bytes.
  auto ring = local_ring(4096);
  ASSERT_NE(ring, nullptr);
  std::vector<std::byte> sent(200);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = stream_byte(i);
  auto wrote = ring->writer.write(sent);
  ASSERT_TRUE(wrote.is_ok()) << wrote.status().to_string();
  ring->header->copy_at.store(0);
  ring->header->copy_len.store(200);
  ring->header->copy_seq.store(2);
  std::vector<std::byte> got(4096);
  auto read = ring->reader.read(got, /*arm=*/false);
  ASSERT_TRUE(read.is_ok()) << read.status().to_string();
  ASSERT_EQ(read->bytes, sent.size());
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), got.begin()));
  // A small write whose copy is marked as changing (an odd sequence).
  std::vector<std::byte> small(16);
  for (size_t i = 0; i < small.size(); ++i) small[i] = stream_byte(200 + i);
  wrote = ring->writer.write(small);
  ASSERT_TRUE(wrote.is_ok()) << wrote.status().to_string();
  ring->header->copy_seq.store(ring->header->copy_seq.load() + 1);
  for (auto& word : ring->header->copy) word.store(0xEEEEEEEEEEEEEEEEull);
  read = ring->reader.read(got, /*arm=*/false);
  ASSERT_TRUE(read.is_ok()) << read.status().to_string();
  ASSERT_EQ(read->bytes, small.size());
  EXPECT_TRUE(std::equal(small.begin(), small.end(), got.begin()));
}

TEST(ShmRing, OnlyASealedMemfdOfAValidSizeIsAdopted) {
  // Not sealed: the peer could shrink it under this side's accesses.
  Fd unsealed(::memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(unsealed.valid());
  ASSERT_EQ(::ftruncate(unsealed.get(), ShmRingMemory::kHeaderBytes + 4096), 0);
  auto r = ShmRingMemory::adopt(std::move(unsealed));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kProtocol);
  // Sealed, but not a header plus a power of two.
  Fd odd(::memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(odd.valid());
  ASSERT_EQ(::ftruncate(odd.get(), ShmRingMemory::kHeaderBytes + 5000), 0);
  ASSERT_EQ(::fcntl(odd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  r = ShmRingMemory::adopt(std::move(odd));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("power-of-two"), std::string::npos) << r.status().to_string();
  // Not a memfd at all.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  Fd pipe_wr(p[1]);
  r = ShmRingMemory::adopt(Fd(p[0]));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kProtocol);
  // Nor is a pipe an eventfd.
  EXPECT_EQ(check_eventfd(pipe_wr.get()).code(), StatusCode::kProtocol);
  // A ring made here cannot be shrunk by whoever holds its descriptor.
  auto mem = ShmRingMemory::create(8192);
  ASSERT_TRUE(mem.is_ok()) << mem.status().to_string();
  EXPECT_NE(::ftruncate(mem->fd(), 4096), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_FALSE(ShmRingMemory::create(5000).is_ok());
}

}  // namespace
}  // namespace remora::net
