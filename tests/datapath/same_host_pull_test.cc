// Tests of same-host pulls in the ChunkScheduler alone (docs/protocol.md, "Same-host
// pulls"): a sending and a receiving scheduler in one process, driven by hand as the
// endpoint drives them. The receiver reads PULLed chunks out of "the peer" with
// process_vm_readv(2) on its own pid, which the kernel always allows: the same system
// call, on real memory, that a peer process gets. What is checked: the bytes, that
// every host-memory chunk went as a PULL and was answered in order, the window of
// unanswered PULLs, each protocol violation, a PULL of unmapped memory failing the
// endpoint's data path with the kernel's errno, and checksums over pulled bytes.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "crc32c_required.h"
#include "datapath/chunk_link.h"
#include "huge_pages.h"
#include "net/same_host.h"

namespace remora::detail {
namespace {

using test::Link;
using test::outgoing;
using test::pattern;

/// A source whose bytes are not plain host memory to the scheduler (as a device
/// staging source): it writes to the stream, so its chunks never go as PULLs.
class StreamOnlySource final : public ChunkSource {
 public:
  explicit StreamOnlySource(const std::byte* data) : host_(data) {}
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override { return host_.write(fd, offset, len); }

 private:
  HostSource host_;
};

/// A receive of `size` bytes into host memory, id 1, as the endpoint sets one up.
struct Receive {
  explicit Receive(size_t size, std::byte fill = std::byte{0}) : got(size, fill), sink(got.data()) {
    in.id = 1;
    in.length = size;
    in.sink = &sink;
  }
  std::vector<std::byte> got;
  HostSink sink;
  RxTransfer in;
};

TEST(SameHostPulls, EveryHostChunkGoesAsAPullAndLandsIntact) {
  Link link;
  link.tx.enable_pull_tx(/*huge_pages=*/false);
  link.rx.enable_pull_rx(::getpid());
  const auto data = pattern(Link::kChunk * 10 + 123, 7);
  std::vector<std::byte> got(data.size());
  HostSink sink(got.data());
  RxTransfer in;
  ASSERT_TRUE(link.deliver(data, in, sink).is_ok());
  EXPECT_EQ(got, data);
  // Eleven chunks, all PULLs, each answered once, in order; nothing on a stream.
  EXPECT_TRUE(link.tx_owner.announced.empty());
  ASSERT_EQ(link.tx_owner.pulls.size(), 11u);
  ASSERT_EQ(link.rx_owner.answers.size(), 11u);
  uint64_t offset = 0;
  for (size_t i = 0; i < link.tx_owner.pulls.size(); ++i) {
    const wire::PullFrame& p = link.tx_owner.pulls[i];
    EXPECT_EQ(p.offset, offset);
    EXPECT_EQ(p.address, reinterpret_cast<uintptr_t>(data.data() + offset));
    EXPECT_EQ(link.rx_owner.answers[i].length, p.length);
    EXPECT_EQ(link.rx_owner.answers[i].recv_id, 1u);
    offset += p.length;
  }
  EXPECT_EQ(offset, data.size());
  EXPECT_EQ(link.tx.chunks_pulled(), 11u);
  EXPECT_EQ(link.tx.chunks_sent(), 11u);
  EXPECT_EQ(link.rx.bytes_pulled(), data.size());
  EXPECT_EQ(link.tx_owner.sent_ids, std::vector<uint64_t>{1});
  EXPECT_TRUE(link.tx.idle());
  EXPECT_TRUE(link.rx.idle());
}

TEST(SameHostPulls, ASendIsNotDoneUntilEveryPullIsAnswered) {
  Link link;
  link.tx.enable_pull_tx(/*huge_pages=*/false);
  const auto data = pattern(Link::kChunk * 20, 8);
  HostSource source(data.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 5, 9, data.size(), &source);
  link.tx.ready(&out);
  link.tx.schedule();
  // At most kPullWindow unanswered.
  ASSERT_EQ(link.tx_owner.pulls.size(), ChunkScheduler::kPullWindow);
  link.tx.schedule();
  EXPECT_EQ(link.tx_owner.pulls.size(), ChunkScheduler::kPullWindow);
  EXPECT_FALSE(out.done());
  // Each answer opens the window by one; the send is done at the last answer only.
  size_t answered = 0;
  while (answered < link.tx_owner.pulls.size()) {
    const wire::PullFrame p = link.tx_owner.pulls[answered];
    EXPECT_TRUE(link.tx_owner.sent_ids.empty());
    ASSERT_EQ(link.tx.pulled(p.kind, p.recv_id, p.length), "");
    ++answered;
    link.tx.schedule();
    EXPECT_LE(link.tx_owner.pulls.size() - answered, ChunkScheduler::kPullWindow);
  }
  EXPECT_EQ(answered, 20u);
  EXPECT_EQ(out.written, data.size());
  EXPECT_EQ(link.tx_owner.sent_ids, std::vector<uint64_t>{5});
}

TEST(SameHostPulls, APulledThatAnswersAnotherChunkIsAViolation) {
  Link link;
  link.tx.enable_pull_tx(/*huge_pages=*/false);
  EXPECT_EQ(link.tx.pulled(wire::ChunkKind::kMessage, 1, 10), "PULLED with no PULL unanswered");
  const auto data = pattern(Link::kChunk * 2, 9);
  HostSource source(data.data());
  TxTransfer out = outgoing(wire::ChunkKind::kPut, 3, 4, data.size(), &source);
  link.tx.ready(&out);
  link.tx.schedule();
  ASSERT_EQ(link.tx_owner.pulls.size(), 2u);
  EXPECT_NE(link.tx.pulled(wire::ChunkKind::kMessage, 4, Link::kChunk), "");  // wrong kind
  EXPECT_NE(link.tx.pulled(wire::ChunkKind::kPut, 5, Link::kChunk), "");      // wrong id
  EXPECT_NE(link.tx.pulled(wire::ChunkKind::kPut, 4, Link::kChunk - 1), "");  // wrong length
  EXPECT_EQ(out.written, 0u);
  EXPECT_TRUE(link.tx_owner.sent_ids.empty());
  EXPECT_EQ(link.tx.pulled(wire::ChunkKind::kPut, 4, Link::kChunk), "");
  EXPECT_EQ(link.tx.pulled(wire::ChunkKind::kPut, 4, Link::kChunk), "");
  EXPECT_EQ(link.tx_owner.sent_ids, std::vector<uint64_t>{3});
}

TEST(SameHostPulls, PullsThatBreakTheProtocolAreRefused) {
  Link link;
  Receive r(1000);
  RxTransfer& in = r.in;
  const uint64_t here = reinterpret_cast<uintptr_t>(r.got.data());
  // This side never said it can read the peer.
  EXPECT_EQ(link.rx.expect_pull(&in, 0, 100, here), "PULL to a side that did not say it can read the peer's memory");
  link.rx.enable_pull_rx(::getpid());
  EXPECT_NE(link.rx.expect_pull(&in, 100, 100, here), "");    // does not start where the last ended
  EXPECT_NE(link.rx.expect_pull(&in, 0, 0, here), "");        // empty
  EXPECT_NE(link.rx.expect_pull(&in, 900, 200, here), "");    // past the end
  EXPECT_NE(link.rx.expect_pull(&in, 0, 100, here, 5u), "");  // a CRC without checksums
  EXPECT_EQ(in.announced, 0u);
  EXPECT_TRUE(link.rx.idle());
}

TEST(SameHostPulls, APullOfUnmappedMemoryFailsTheDataPathWithTheKernelsErrno) {
  Link link;
  link.rx.enable_pull_rx(::getpid());
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* gone = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  ASSERT_EQ(::munmap(gone, page), 0);
  Receive r(page, std::byte{0x5A});
  ASSERT_EQ(link.rx.expect_pull(&r.in, 0, page, reinterpret_cast<uintptr_t>(gone)), "");
  link.rx.read_pulls();
  ASSERT_EQ(link.rx_owner.failures.size(), 1u);
  EXPECT_EQ(link.rx_owner.failures[0].code(), StatusCode::kProtocol);  // it announced memory it has not mapped
  EXPECT_NE(link.rx_owner.failures[0].message().find("process_vm_readv"), std::string::npos)
      << link.rx_owner.failures[0].to_string();
  EXPECT_NE(link.rx_owner.failures[0].message().find(std::strerror(EFAULT)), std::string::npos)
      << link.rx_owner.failures[0].to_string();
  EXPECT_TRUE(link.rx_owner.answers.empty());  // nothing read, nothing answered
  EXPECT_EQ(r.got, std::vector<std::byte>(page, std::byte{0x5A}));
}

TEST(SameHostPulls, APullReadAfterThePeerEndedFailsItsTransfer) {
  // A PULL the peer announced before its control stream ended, read after: the send it
  // belongs to did not complete at the peer, so the bytes read are not the message.
  Link link;
  link.rx.enable_pull_rx(::getpid());
  const auto data = pattern(2000, 12);
  Receive r(data.size());
  RxTransfer& in = r.in;
  const uint64_t there = reinterpret_cast<uintptr_t>(data.data());
  ASSERT_EQ(link.rx.expect_pull(&in, 0, 1000, there), "");
  link.rx.read_pulls();
  EXPECT_TRUE(in.failure.is_ok());
  ASSERT_EQ(link.rx.expect_pull(&in, 1000, 1000, there + 1000), "");
  link.rx.distrust_pulls(Status(StatusCode::kPeerFailed, "the peer ended"));
  link.rx.read_pulls();
  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_EQ(link.rx_owner.received_ids[0].second.code(), StatusCode::kPeerFailed);
  EXPECT_EQ(link.rx_owner.received_ids[0].second.message(), "the peer ended");
}

TEST(SameHostPulls, SourcesThatAreNotHostMemoryStayOnTheStreams) {
  Link link;
  link.tx.enable_pull_tx(/*huge_pages=*/false);
  link.rx.enable_pull_rx(::getpid());
  const auto data = pattern(Link::kChunk * 3, 10);
  StreamOnlySource source(data.data());
  Receive r(data.size());
  RxTransfer& in = r.in;
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 1, 1, data.size(), &source);
  link.tx.ready(&out);
  link.run(&in, [&] { return !link.rx_owner.received_ids.empty(); });
  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_TRUE(link.rx_owner.received_ids[0].second.is_ok());
  EXPECT_EQ(r.got, data);
  EXPECT_TRUE(link.tx_owner.pulls.empty());
  EXPECT_EQ(link.tx_owner.announced.size(), 3u);
}

TEST(SameHostPulls, APulledChunkIsCheckedAgainstTheCrcItWasAnnouncedWith) {
  REMORA_SKIP_WITHOUT_CRC32C();
  Link link;
  link.tx.set_checksum(true);
  link.rx.set_checksum(true);
  link.tx.enable_pull_tx(/*huge_pages=*/false);
  link.rx.enable_pull_rx(::getpid());
  auto data = pattern(Link::kChunk * 2, 11);
  Receive r(data.size());
  RxTransfer& in = r.in;
  HostSource source(data.data());
  TxTransfer out = outgoing(wire::ChunkKind::kMessage, 1, 1, data.size(), &source);
  link.tx.ready(&out);
  link.tx.schedule();
  ASSERT_EQ(link.tx_owner.pulls.size(), 2u);
  ASSERT_TRUE(link.tx_owner.pulls[1].has_crc);
  // The sender's memory changes after the second chunk was announced: what the
  // receiver reads no longer matches the announced CRC.
  data[Link::kChunk + 17] ^= std::byte{0x01};
  link.run(&in, [&] { return !link.rx_owner.received_ids.empty(); });
  ASSERT_EQ(link.rx_owner.received_ids.size(), 1u);
  EXPECT_EQ(link.rx_owner.received_ids[0].second.code(), StatusCode::kDataCorrupt)
      << link.rx_owner.received_ids[0].second.to_string();
  EXPECT_EQ(in.corrupt_at, Link::kChunk);
  EXPECT_EQ(link.rx_owner.answers.size(), 2u);  // both read and answered: the sender is released
  EXPECT_EQ(link.tx_owner.sent_ids, std::vector<uint64_t>{1});
}

TEST(SameHostPulls, OnlyAProcessThatCanBeReadIsTheSameHost) {
  // This process is its own peer: same boot id, same network namespace, a probe it reads.
  EXPECT_EQ(net::same_host_refusal(net::this_host()), "");
  net::HostIdentity other = net::this_host();
  other.boot_id[0] ^= std::byte{1};
  EXPECT_NE(net::same_host_refusal(other).find("another host"), std::string::npos);
  other = net::this_host();
  other.netns += 1;
  EXPECT_NE(net::same_host_refusal(other).find("network namespace"), std::string::npos);
  other = net::this_host();
  other.probe_value ^= 1;  // the word at that address holds something else: not the peer
  EXPECT_NE(net::same_host_refusal(other).find("not the peer"), std::string::npos);
  other = net::this_host();
  other.pid = 0;
  EXPECT_NE(net::same_host_refusal(other), "");
}

// --- huge-page promotion of pulled memory (net::HugePagePromoter) ------------------

using testing::AlignedFrames;
using testing::anon_huge_kib;
using testing::kHugeFrame;
using testing::thp_mode;

/// Announces [p, p + size) to `promoter` in pieces of `piece` bytes, as chunks go.
void announce_all(net::HugePagePromoter& promoter, const std::byte* p, size_t size, size_t piece) {
  for (size_t at = 0; at < size; at += piece) {
    promoter.announced(reinterpret_cast<uintptr_t>(p + at), std::min(piece, size - at));
  }
}

TEST(HugePagePromoter, AFrameAnnouncedTwiceOverIsCollapsedAndKeepsItsBytes) {
  AlignedFrames mem(2);
  const auto data = pattern(mem.size(), 31);
  std::memcpy(mem.data(), data.data(), data.size());
  ASSERT_EQ(anon_huge_kib(mem.data()), thp_mode() == "always" ? anon_huge_kib(mem.data()) : 0);
  net::HugePagePromoter promoter;
  // Pieces that straddle the frames' edge and end inside pages: the first pass over both
  // frames leaves them as they are.
  announce_all(promoter, mem.data(), mem.size(), 300 * 1024 + 8);
  EXPECT_EQ(promoter.promoted(), 0u);
  EXPECT_EQ(promoter.refused(), 0u);
  announce_all(promoter, mem.data(), mem.size(), 300 * 1024 + 8);
  if (thp_mode() == "never") {
    EXPECT_EQ(promoter.promoted(), 0u);
    EXPECT_EQ(promoter.refused(), 2u);
  } else {
    EXPECT_EQ(promoter.promoted(), 2u) << "refused " << promoter.refused();
    EXPECT_EQ(anon_huge_kib(mem.data()), long{4096});
  }
  EXPECT_EQ(std::memcmp(mem.data(), data.data(), data.size()), 0);
  // A frame is collapsed once: further passes try nothing.
  announce_all(promoter, mem.data(), mem.size(), 64 * 1024);
  announce_all(promoter, mem.data(), mem.size(), 64 * 1024);
  EXPECT_EQ(promoter.promoted() + promoter.refused(), 2u);
}

TEST(HugePagePromoter, AFrameLessThanHalfOfWhichIsAnnouncedIsLeftAlone) {
  AlignedFrames mem(1);
  std::memset(mem.data(), 0x5a, mem.size());
  net::HugePagePromoter promoter;
  for (int pass = 0; pass < 6; ++pass) {
    // One page short of half the frame, again and again: collapsing it would allocate
    // more than is in use.
    announce_all(promoter, mem.data(), mem.size() / 2 - net::HugePagePromoter::kPageBytes, 256 * 1024);
  }
  EXPECT_EQ(promoter.promoted(), 0u);
  EXPECT_EQ(promoter.refused(), 0u);
  if (thp_mode() != "always") {
    EXPECT_EQ(anon_huge_kib(mem.data()), 0);
  }
}

TEST(HugePagePromoter, HalfAFrameAnnouncedAgainAndAgainIsCollapsedAndKeepsItsBytes) {
  // A 1 MiB buffer sent again and again from inside a larger allocation (a pool's
  // arena): its frame is half announced, pass after pass.
  AlignedFrames mem(1);
  const auto data = pattern(mem.size(), 33);
  std::memcpy(mem.data(), data.data(), data.size());
  net::HugePagePromoter promoter;
  announce_all(promoter, mem.data(), mem.size() / 2, 512 * 1024);
  announce_all(promoter, mem.data(), mem.size() / 2, 512 * 1024);
  EXPECT_EQ(promoter.promoted() + promoter.refused(), 0u) << "one pass ended, the second has not";
  announce_all(promoter, mem.data(), mem.size() / 2, 512 * 1024);  // ends the second pass
  if (thp_mode() == "never") {
    EXPECT_EQ(promoter.promoted(), 0u);
    EXPECT_EQ(promoter.refused(), 1u);
  } else {
    EXPECT_EQ(promoter.promoted(), 1u) << "refused " << promoter.refused();
    EXPECT_EQ(anon_huge_kib(mem.data()), long{2048});
  }
  EXPECT_EQ(std::memcmp(mem.data(), data.data(), data.size()), 0) << "both halves unchanged";
  // Pieces that end inside pages (a buffer not page-aligned) share their edge pages:
  // that alone does not end a pass, so the frame is collapsed after two real passes.
  AlignedFrames odd(1);
  std::memcpy(odd.data(), data.data(), data.size());
  net::HugePagePromoter other;
  for (int pass = 0; pass < 2; ++pass) announce_all(other, odd.data() + 100, odd.size() * 3 / 4, 96 * 1024 + 8);
  EXPECT_EQ(other.promoted() + other.refused(), 0u);
  other.announced(reinterpret_cast<uintptr_t>(odd.data() + 100), 96 * 1024 + 8);  // the start again: pass two ends
  EXPECT_EQ(other.promoted() + other.refused(), 1u);
  EXPECT_EQ(std::memcmp(odd.data(), data.data(), data.size()), 0);
}

TEST(HugePagePromoter, MemoryTheKernelWillNotCollapseIsTriedOnce) {
  // The owner asked for no huge pages (MADV_NOHUGEPAGE): the kernel says EINVAL, which no
  // later pass changes, and the memory stays as it is.
  AlignedFrames mem(1);
  ASSERT_EQ(::madvise(mem.data(), mem.size(), MADV_NOHUGEPAGE), 0);
  std::memset(mem.data(), 0x6b, mem.size());
  net::HugePagePromoter promoter;
  for (int pass = 0; pass < 8; ++pass) announce_all(promoter, mem.data(), mem.size(), 256 * 1024);
  EXPECT_EQ(promoter.promoted(), 0u);
  EXPECT_EQ(promoter.refused(), 1u);
  EXPECT_EQ(anon_huge_kib(mem.data()), 0);
  // Half of a frame made read-only is another mapping: the frame cannot become one page.
  AlignedFrames split(1);
  std::memset(split.data(), 0x6c, split.size());
  ASSERT_EQ(::mprotect(split.data() + kHugeFrame / 2, kHugeFrame / 2, PROT_READ), 0);
  net::HugePagePromoter other;
  for (int pass = 0; pass < 8; ++pass) announce_all(other, split.data(), split.size(), 256 * 1024);
  EXPECT_EQ(other.promoted(), 0u);
  EXPECT_EQ(other.refused(), 1u);
}

TEST(SameHostPulls, MemoryPulledAgainAndAgainIsPromotedOnlyWhereAsked) {
  // Through the scheduler: two sends of the same 4 MiB (two frames) pulled whole, then
  // a third with new contents, each landing intact; promotion only where enabled.
  for (const bool huge : {false, true}) {
    SCOPED_TRACE(huge ? "promotion on" : "promotion off");
    AlignedFrames mem(2);
    Link link;
    link.tx.enable_pull_tx(huge);
    link.rx.enable_pull_rx(::getpid());
    for (uint64_t round = 0; round < 3; ++round) {
      const auto data = pattern(mem.size(), 40 + (round == 2 ? 1 : 0));
      std::memcpy(mem.data(), data.data(), data.size());
      std::vector<std::byte> got(data.size());
      HostSink sink(got.data());
      RxTransfer in;
      ASSERT_TRUE(link.deliver({mem.data(), mem.size()}, in, sink, 1 + round).is_ok());
      ASSERT_EQ(got, data) << "round " << round;
    }
    if (!huge) {
      EXPECT_EQ(link.tx.huge_pages_promoted(), 0u);
      if (thp_mode() != "always") {
        EXPECT_EQ(anon_huge_kib(mem.data()), 0);
      }
    } else if (thp_mode() != "never") {
      EXPECT_EQ(link.tx.huge_pages_promoted(), 2u);
      EXPECT_EQ(anon_huge_kib(mem.data()), long{4096});
    }
  }
}

}  // namespace
}  // namespace remora::detail
