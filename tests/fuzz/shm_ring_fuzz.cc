// tests/fuzz/shm_ring_fuzz.cc — libFuzzer harness for the shared-memory channel's ring
// (net/shm_ring.h), the one place where a same-host peer's writes are read straight out
// of memory it shares with us. Each input is a program run against one real ring (a
// sealed memfd, mapped twice as the two processes would): writes and reads of
// input-chosen sizes, with or without arming, and a hostile peer's stores to the shared
// header (the head, the tail, the two wake-up flags) at any point.
//
// Invariants: while neither counter was forged, every write and read succeeds, moves
// exactly min(asked, room or bytes in flight), and the reader gets the writer's bytes in
// order, byte for byte — forged wake-up flags change only who wakes whom, never the
// bytes. After a forged head or tail, every call either succeeds within its bounds (no
// more than asked, no more than the capacity) or fails with kProtocol, and nothing
// outside the mapping is touched (AddressSanitizer, and the mapping's end).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "fuzz_check.h"
#include "net/shm_ring.h"

namespace {

using remora::StatusCode;
using remora::net::Fd;
using remora::net::ShmRingMemory;
using remora::net::ShmRingReader;
using remora::net::ShmRingWriter;

/// Input bytes, read front to back; zeros once they run out.
struct Input {
  const uint8_t* p;
  size_t left;
  uint8_t u8() {
    if (left == 0) return 0;
    --left;
    return *p++;
  }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{u8()} << (8 * i);
    return v;
  }
  /// A size from 0 to about 3 capacities, dense near the small end and the boundaries.
  size_t size(size_t capacity) {
    const uint8_t a = u8(), b = u8();
    switch (a & 3) {
      case 0: return b;
      case 1: return capacity - 8 + (b & 15);
      default: return (size_t{a} << 8 | b) % (3 * capacity + 1);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const size_t capacity = ShmRingMemory::kMinCapacity << (in.u8() % 3);  // 4, 8 or 16 KiB
  auto created = ShmRingMemory::create(capacity);
  REMORA_FUZZ_CHECK(created.is_ok(), "a ring of a valid capacity is created");
  const int dup = ::dup(created->fd());
  REMORA_FUZZ_CHECK(dup >= 0, "dup of the ring's memfd");
  auto adopted = ShmRingMemory::adopt(Fd(dup));
  REMORA_FUZZ_CHECK(adopted.is_ok(), "the peer's side maps a ring made by create");
  REMORA_FUZZ_CHECK(adopted->capacity() == capacity, "both mappings see one capacity");
  ShmRingReader reader(std::move(*created));
  ShmRingWriter writer(std::move(*adopted));
  ShmRingMemory::Header& shared = reader.memory().header();

  std::deque<uint8_t> in_flight;  // written and not read yet, while nothing was forged
  bool forged = false;
  uint8_t next_byte = 0;
  std::vector<std::byte> buf;
  for (int step = 0; step < 256 && in.left > 0; ++step) {
    switch (in.u8() % 6) {
      case 0: {  // the producer writes
        const size_t n = in.size(capacity);
        buf.resize(n);
        const uint8_t first = next_byte;
        for (size_t i = 0; i < n; ++i) buf[i] = std::byte(static_cast<uint8_t>(first + i * 7));
        auto w = writer.write(buf);
        if (!forged) {
          REMORA_FUZZ_CHECK(w.is_ok(), "an honest ring never refuses a write");
          REMORA_FUZZ_CHECK(w->bytes == std::min(n, capacity - in_flight.size()), "a write fills exactly the room");
          for (size_t i = 0; i < w->bytes; ++i) in_flight.push_back(static_cast<uint8_t>(buf[i]));
          next_byte = static_cast<uint8_t>(first + w->bytes * 7);
        } else {
          REMORA_FUZZ_CHECK(w.is_ok() || w.status().code() == StatusCode::kProtocol, "a forged tail is kProtocol");
          if (w.is_ok()) REMORA_FUZZ_CHECK(w->bytes <= n, "a write moves no more than asked");
        }
        break;
      }
      case 1:
      case 2: {  // the consumer reads, arming when it would sleep
        const size_t n = in.size(capacity);
        buf.assign(n, std::byte{0});
        auto r = reader.read(buf, /*arm=*/(step & 1) != 0);
        REMORA_FUZZ_CHECK(reader.readable() <= capacity, "never more readable than the ring holds");
        if (!forged) {
          REMORA_FUZZ_CHECK(r.is_ok(), "an honest ring never refuses a read");
          REMORA_FUZZ_CHECK(r->bytes == std::min(n, in_flight.size()), "a read takes what is there, up to asked");
          for (size_t i = 0; i < r->bytes; ++i) {
            REMORA_FUZZ_CHECK(static_cast<uint8_t>(buf[i]) == in_flight.front(), "bytes come out as they went in");
            in_flight.pop_front();
          }
        } else {
          REMORA_FUZZ_CHECK(r.is_ok() || r.status().code() == StatusCode::kProtocol, "a forged head is kProtocol");
          if (r.is_ok()) REMORA_FUZZ_CHECK(r->bytes <= n && r->bytes <= capacity, "a read stays in its bounds");
        }
        break;
      }
      case 3:  // a hostile producer stores any head
        shared.head.store(in.u64());
        forged = true;
        break;
      case 4:  // a hostile consumer stores any tail
        shared.tail.store(in.u64());
        forged = true;
        break;
      case 5:  // either stores any wake-up flag: who wakes whom, never the bytes
        shared.consumer_sleeping.store(static_cast<uint32_t>(in.u64()));
        shared.producer_waiting.store(static_cast<uint32_t>(in.u64()));
        break;
    }
  }
  return 0;
}
