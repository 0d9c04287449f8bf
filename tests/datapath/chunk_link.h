// tests/datapath/chunk_link.h — a sending and a receiving ChunkScheduler joined by
// real non-blocking socket pairs and driven by hand (no endpoint), with an owner that
// records what each scheduler reports. Shared by the scheduler's and staging's tests.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/chunk_io.h"
#include "datapath/chunk_scheduler.h"

namespace remora::detail::test {

inline std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

inline TxTransfer outgoing(wire::ChunkKind kind, uint64_t owner, uint64_t chunk_id, uint64_t length, ChunkSource* source) {
  TxTransfer t;
  t.kind = kind;
  t.owner = owner;
  t.chunk_id = chunk_id;
  t.length = length;
  t.source = source;
  return t;
}

inline RxTransfer incoming(uint64_t id, uint64_t length, ChunkSink* sink) {
  RxTransfer t;
  t.id = id;
  t.length = length;
  t.sink = sink;
  return t;
}

/// Records what the scheduler tells its owner.
struct RecordingOwner : ChunkScheduler::Owner {
  std::vector<wire::ChunkFrame> announced;
  std::vector<uint64_t> sent_ids;
  std::vector<std::pair<uint64_t, Status>> received_ids;
  std::vector<Status> failures;
  int resumes = 0;
  bool yield = false;

  void announce(const wire::ChunkFrame& frame) override { announced.push_back(frame); }
  std::vector<wire::PullFrame> pulls;      // PULLs announced
  std::vector<wire::PulledFrame> answers;  // PULLEDs sent
  void announce_pull(const wire::PullFrame& frame) override { pulls.push_back(frame); }
  void answer_pull(const wire::PulledFrame& frame) override { answers.push_back(frame); }
  std::vector<Status> sent_failures;  // t.failure of each sent()
  void sent(TxTransfer& t) override {
    sent_ids.push_back(t.owner);
    sent_failures.push_back(t.failure);
  }
  void received(RxTransfer& t) override { received_ids.emplace_back(t.id, t.failure); }
  void stream_failed(uint16_t, const Status& why) override { failures.push_back(why); }
  void stream_ended(uint16_t index) override {
    failures.push_back(Status(StatusCode::kPeerFailed, "stream " + std::to_string(index) + " ended"));
  }
  std::vector<std::pair<uint16_t, uint64_t>> reads;  // chunk_read (failover)
  void chunk_read(uint16_t index, uint64_t chunks) override { reads.emplace_back(index, chunks); }
  std::vector<Status> resend_failures;
  void resend_failed(const Status& why) override { resend_failures.push_back(why); }
  bool should_yield() override { return yield; }
  void resume_later() override { ++resumes; }
  // Workers' reports (post), run by the test's loop (run_posted), as the
  // endpoint's progress round runs them.
  std::mutex posted_mutex;
  std::vector<std::function<void()>> posted;
  void post(std::function<void()> fn) override {
    std::lock_guard lock(posted_mutex);
    posted.push_back(std::move(fn));
  }
  size_t run_posted() {
    std::vector<std::function<void()>> now;
    {
      std::lock_guard lock(posted_mutex);
      now.swap(posted);
    }
    for (auto& fn : now) fn();
    return now.size();
  }
};

/// A list of one-chunk transfers, each received into a buffer of its own: the sources,
/// the buffers and sinks, and both sides' transfers, kept in place (reserved for `n`)
/// while the schedulers point at them.
template <typename Source>
struct Blocks {
  std::vector<std::vector<std::byte>> got;
  std::vector<Source> sources;
  std::vector<HostSink> sinks;
  std::vector<TxTransfer> outs;
  std::vector<RxTransfer> ins;
  explicit Blocks(size_t n) {
    got.reserve(n);
    sources.reserve(n);
    sinks.reserve(n);
    outs.reserve(n);
    ins.reserve(n);
  }
  /// Block `owner` of `n` bytes from a Source made of `source_args`, received as `id` into
  /// a buffer filled with `fill`.
  template <typename... SourceArgs>
  void add(wire::ChunkKind kind, uint64_t owner, uint64_t id, size_t n, std::byte fill, SourceArgs&&... source_args) {
    sources.emplace_back(std::forward<SourceArgs>(source_args)...);
    got.emplace_back(n, fill);
    sinks.emplace_back(got.back().data());
    outs.push_back(outgoing(kind, owner, id, n, &sources.back()));
    ins.push_back(incoming(id, n, &sinks.back()));
  }
};

/// A sender and a receiver joined by `streams` socket pairs.
struct Link {
  static constexpr uint64_t kChunk = 64 * 1024;
  RecordingOwner tx_owner, rx_owner;
  ChunkScheduler tx{tx_owner, kStreams, kChunk, "receiver"};
  ChunkScheduler rx{rx_owner, kStreams, kChunk, "sender"};
  static constexpr uint32_t kStreams = 2;
  size_t handed = 0;  // announced frames passed to the receiver so far
  size_t pulls_handed = 0;    // PULLs passed to the receiver so far
  size_t answers_handed = 0;  // PULLEDs passed back to the sender so far
  size_t reads_handed = 0;    // RECEIVED counts passed back to the sender so far

  Link() {
    for (uint16_t i = 0; i < kStreams; ++i) {
      int fds[2];
      EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
      EXPECT_TRUE(tx.attach(i, net::Fd(fds[0])).is_ok());
      EXPECT_TRUE(rx.attach(i, net::Fd(fds[1])).is_ok());
    }
  }

  /// Moves bytes until `done` holds (bounded), handing each announced frame to the
  /// transfer `pick` names for it, as the endpoint's CHUNK handler does by id.
  /// Runs at the start of every round (the staging tests drive their engine there).
  std::function<void()> each_round;

  template <typename Pick, typename Done>
  void run_picking(Pick pick, Done done) {
    // Bounded by rounds, and by time where workers are at work (a round that waits for
    // one of them is over in no time).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    auto workers_at_work = [this] { return rx.worker_jobs() > 0 || tx.worker_send_jobs() > 0; };
    for (int round = 0; (round < 100000 || (workers_at_work() && std::chrono::steady_clock::now() < deadline)) && !done();
         ++round) {
      if (each_round) each_round();
      tx.schedule();
      tx.write_all();
      for (; handed < tx_owner.announced.size(); ++handed) {
        const wire::ChunkFrame& f = tx_owner.announced[handed];
        if (f.resend) {
          ASSERT_EQ(rx.expect_resend(f.kind, f.recv_id, f.stream, f.offset, f.length), "");
        } else {
          ASSERT_EQ(rx.expect(pick(f), f.stream, f.offset, f.length), "");
        }
      }
      // Same-host pulls: the receiver reads each PULL out of this process and answers.
      for (; pulls_handed < tx_owner.pulls.size(); ++pulls_handed) {
        const wire::PullFrame& f = tx_owner.pulls[pulls_handed];
        const wire::ChunkFrame as_chunk{f.recv_id, f.offset, f.length, 0, f.kind, f.has_crc, f.crc};
        ASSERT_EQ(rx.expect_pull(pick(as_chunk), f.offset, f.length, f.address,
                                 f.has_crc ? std::optional<uint32_t>(f.crc) : std::nullopt),
                  "");
        rx.read_pulls();
      }
      for (; answers_handed < rx_owner.answers.size(); ++answers_handed) {
        const wire::PulledFrame& f = rx_owner.answers[answers_handed];
        ASSERT_EQ(tx.pulled(f.kind, f.recv_id, f.length), "");
      }
      for (uint16_t i = 0; i < kStreams; ++i) {
        rx.read(i);
        tx.writable(i);  // the socket pair may have room again
      }
      // The workers' reports.
      if (rx_owner.run_posted() + tx_owner.run_posted() == 0 && round >= 100000) std::this_thread::yield();
      // Failover: the receiver's RECEIVED counts reach the sender.
      for (; reads_handed < rx_owner.reads.size(); ++reads_handed) {
        const auto [index, chunks] = rx_owner.reads[reads_handed];
        if (!tx.retired(index)) {
          ASSERT_EQ(tx.confirmed(index, chunks), "");
        }
      }
    }
  }
  /// The same with one transfer receiving every frame.
  template <typename Done>
  void run(RxTransfer* in, Done done) {
    run_picking([in](const wire::ChunkFrame&) { return in; }, done);
  }

  /// Sends `data` as one message (id `id`, 1 unless a link carries several in turn) into
  /// the receiving transfer `in`, whose sink `sink` is, until the receiver reports it; its
  /// outcome (kInternal when it never came), with the streams checked to be in step.
  Status deliver(std::span<const std::byte> data, RxTransfer& in, ChunkSink& sink, uint64_t id = 1) {
    HostSource source(data.data());
    TxTransfer out = outgoing(wire::ChunkKind::kMessage, id, id, data.size(), &source);
    in.id = id;
    in.length = data.size();
    in.sink = &sink;
    const size_t before = rx_owner.received_ids.size();
    const size_t sent_before = tx_owner.sent_ids.size();
    tx.ready(&out);
    // Until the sender is done with `source` too (a send worker's report may come after
    // the receiver has every byte).
    run(&in, [&] { return rx_owner.received_ids.size() > before && tx_owner.sent_ids.size() > sent_before; });
    EXPECT_TRUE(rx_owner.failures.empty());  // the streams stay in step
    if (rx_owner.received_ids.size() != before + 1 || rx_owner.received_ids.back().first != id) {
      return Status(StatusCode::kInternal, "the message was not received");
    }
    return rx_owner.received_ids.back().second;
  }
};

}  // namespace remora::detail::test
