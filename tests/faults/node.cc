// tests/faults/node.cc — one process of a fault-matrix cell (`remora_faults node …`).
//
//   --role=server    the victim or the healthy peer: registers a region (data seeded
//                    by --seed, two zeroed atomic words after it), listens on --addr,
//                    prints "READY <port> <key hex>", serves puts/gets/atomics, echoes
//                    every message sent to kEcho back on kEchoBack, and with --coll joins
//                    the allreduce loop (rank --rank of 3, the store at --store) and
//                    prints "COLL <code> <iterations> bad=<n>" when it ends. Runs until
//                    "quit" or EOF on stdin.
//   --role=observer  connects to the healthy peer (--healthy, --healthy-key) and checks
//                    it, prints "BASELINE" and waits for "go"; connects to the victim (or
//                    joins the allreduce as rank 0) and runs --workload in rounds, prints
//                    "INFLIGHT" once a round completed, answers "arm" with "ARMED <n>" once
//                    n > 0 operations are outstanding, takes "faulted" as the moment the
//                    fault hit, and prints "END …" once every operation ended: with
//                    --expect=complete after --rounds-after more rounds, with
//                    --expect=fail when the endpoint (or communicator) failed. Then it lets
//                    go of the victim, prints "RELEASED", and on "survivor" checks the
//                    healthy peer again and prints "SURVIVOR ok" or "SURVIVOR <why>".
// Every received byte is compared with what was sent or seeded; a mismatch counts in
// bad= (the matrix wants 0). Waits are bounded (--op-timeout-ms), so no node hangs.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "faults.h"
#include "remora/remora.h"
#include "support/peer_program.h"
#include "support/test_data.h"

namespace remora::faults {
namespace {

using itest::die;
using itest::Flags;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr uint64_t kObserverSeed = 0x0b5e4e;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string next_command() {
  std::string line;
  if (!std::getline(std::cin, line)) return "eof";
  return line;
}

void expect_command(const std::string& want) {
  const std::string got = next_command();
  if (got != want) die("expected \"" + want + "\" on stdin, got \"" + got + "\"");
}

Access all_rights() { return Access::kRemoteRead | Access::kRemoteWrite | Access::kRemoteAtomic; }

// ---------------------------------------------------------------------------------------
// The allreduce loop every rank of the allreduce cell runs: element 0 is rank 0's "go on"
// flag (the others add 0), the rest a sum every rank can check.

struct CollResult {
  Status status = Status::ok();
  uint64_t iterations = 0;
  uint64_t bad = 0;
};

constexpr size_t kCollCount = 128 << 10;  // 1 MiB of int64

/// One iteration; false when it failed. `go_on` is rank 0's vote (ignored elsewhere);
/// `*more` is the outcome of the vote.
bool allreduce_once(Communicator& comm, uint64_t it, bool go_on, bool* more, CollResult* r, std::vector<int64_t>& v) {
  const int64_t size = comm.size(), rank = comm.rank();
  v[0] = rank == 0 && go_on ? 1 : 0;
  for (size_t i = 1; i < v.size(); ++i) v[i] = (rank + 1) * static_cast<int64_t>(it + i);
  const Status s = comm.allreduce(kInPlace, v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
  if (!s) {
    r->status = s;
    return false;
  }
  ++r->iterations;
  const int64_t ranks_sum = size * (size + 1) / 2;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] != ranks_sum * static_cast<int64_t>(it + i)) {
      ++r->bad;
      break;
    }
  }
  *more = v[0] != 0;
  return true;
}

// ---------------------------------------------------------------------------------------
// Server

int run_server(const Flags& f) {
  auto ctx_r = Context::create();
  if (!ctx_r) die("Context::create: " + itest::describe(ctx_r.status()));
  std::unique_ptr<Context> ctx = std::move(ctx_r).value();
  std::vector<std::byte> mem(kRegionSize);
  itest::fill_stream(f.num("seed", 1), 0, std::span(mem).first(kRegionData));
  auto region_r = ctx->register_memory(mem.data(), mem.size(), all_rights());
  if (!region_r) die("register_memory: " + itest::describe(region_r.status()));
  Region region = std::move(region_r).value();
  auto listener_r = ctx->listen(f.str("addr") + ":0");
  if (!listener_r) die("listen: " + itest::describe(listener_r.status()));
  std::unique_ptr<Listener> listener = std::move(listener_r).value();
  const auto key = region.remote_key().serialize();
  say("READY " + std::to_string(listener->port()) + " " + to_hex(key.data(), key.size()));

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::shared_ptr<Endpoint>> endpoints;
  std::vector<std::thread> echoes;
  // Why a server's endpoint ended, when it was not told to stop: the matrix shows it
  // beside the observer's side of the same failure.
  auto finish = [&stop](Request& r) {
    Status s = r.wait(500ms);
    while (s.code() == StatusCode::kTimeout && !stop) s = r.wait(500ms);
    if (!s && !stop) std::fprintf(stderr, "remora_faults node: server endpoint: %s\n", s.to_string().c_str());
    return s;
  };
  auto echo = [&finish, &stop](std::shared_ptr<Endpoint> ep) {
    std::vector<std::byte> buf(kMaxMessage);
    while (!stop) {
      Request in = ep->recv(buf, kEcho);
      if (!finish(in)) return;
      Request out = ep->send(std::span(buf).first(in.bytes()), kEchoBack);
      if (!finish(out)) return;
    }
  };
  // put-in: once the observer sends its key, notified puts into its memory, a window
  // ahead of its acknowledgements, until it says stop, the endpoint fails, or quit.
  auto pusher = [&finish, &stop](std::shared_ptr<Endpoint> ep) {
    std::array<std::byte, RemoteKey::kSerializedSize + 16> hello{};
    Request h = ep->recv(hello, kPushKey);
    if (!finish(h)) return;
    auto target_key = RemoteKey::deserialize(std::span(hello).first(RemoteKey::kSerializedSize));
    if (!target_key) return;
    uint64_t window = 0, size = 0;
    std::memcpy(&window, hello.data() + RemoteKey::kSerializedSize, 8);
    std::memcpy(&size, hello.data() + RemoteKey::kSerializedSize + 8, 8);
    if (window == 0 || window > 1024 || size > kMaxMessage) return;
    std::vector<std::vector<std::byte>> blocks(window, std::vector<std::byte>(size));
    std::vector<Request> puts(window);
    for (uint64_t seq = 0; !stop; ++seq) {
      const size_t slot = seq % window;
      if (seq >= window) {
        uint64_t acked = 0;  // acknowledgements come in order: this one is seq - window's
        Request a = ep->recv(std::as_writable_bytes(std::span(&acked, 1)), kPushAck);
        if (!finish(a) || acked == kPushStop || !finish(puts[slot])) break;
      }
      auto block = std::span(blocks[slot]).first(push_size(seq, size));
      itest::fill_stream(kPushSeed + seq, 0, block);
      puts[slot] = ep->put(block, *target_key, slot * size, {.notify = seq});
    }
    // The blocks go with this function: every put that reads them must have ended first
    // (a put still in flight when the observer says stop reads its block until then).
    // A peer that answers none of them within the bound: the endpoint is given up, which
    // ends them all.
    for (Request& p : puts) {
      if (p.valid() && !p.done()) (void)p.wait(60s);
    }
    if (std::any_of(puts.begin(), puts.end(), [](const Request& p) { return p.valid() && !p.done(); })) ep->abort();
  };
  std::thread acceptor([&] {
    while (!stop) {
      auto a = listener->accept(200ms);
      if (!a) continue;
      std::lock_guard lock(mu);
      endpoints.push_back(std::move(a).value());
      echoes.emplace_back(echo, endpoints.back());
      echoes.emplace_back(pusher, endpoints.back());
    }
  });
  std::thread coll;
  if (f.has("coll")) {
    coll = std::thread([&] {
      LaunchInfo launch{.rank = static_cast<int>(f.num("rank", 1)),
                        .size = 3,
                        .launcher = "remora_faults",
                        .store_address = f.str("store")};
      auto comm_r = Communicator::init(*ctx, launch, CommOptions{.timeout = std::chrono::milliseconds(30000)});
      if (!comm_r) {
        say("COLL " + std::string(to_string(comm_r.status().code())) + " 0 bad=0");
        std::fprintf(stderr, "remora_faults node: Communicator::init: %s\n", comm_r.status().to_string().c_str());
        return;
      }
      std::unique_ptr<Communicator> comm = std::move(comm_r).value();
      std::vector<int64_t> v(kCollCount);
      CollResult r;
      bool more = true;
      for (uint64_t it = 0; more && allreduce_once(*comm, it, false, &more, &r, v); ++it) {
      }
      if (!r.status) std::fprintf(stderr, "remora_faults node: allreduce: %s\n", r.status.to_string().c_str());
      say("COLL " + std::string(to_string(r.status.code())) + " " + std::to_string(r.iterations) +
          " bad=" + std::to_string(r.bad));
    });
  }
  for (std::string cmd = next_command(); cmd != "quit" && cmd != "eof"; cmd = next_command()) {
  }
  stop = true;
  acceptor.join();
  if (coll.joinable()) coll.join();
  {
    std::lock_guard lock(mu);
    for (auto& ep : endpoints) ep->abort();
  }
  for (auto& t : echoes) t.join();
  return 0;
}

// ---------------------------------------------------------------------------------------
// Observer

struct Outcome {
  uint64_t ok = 0, errors = 0, bad = 0, bytes = 0, rounds = 0;
  Status first_error = Status::ok();
  Clock::time_point last_end{}, first_error_at{};
  void ended(const Status& s) {
    last_end = Clock::now();
    if (s) return;
    ++errors;
    if (first_error) {
      first_error = s;
      first_error_at = last_end;
    }
  }
};

/// Buffers and parameters of the point-to-point and one-sided workloads.
struct Workbench {
  size_t window = 8;
  size_t size = 1 << 20;  // every other operation; the rest are 4 KiB + round (eager/inline)
  std::chrono::milliseconds op_timeout{30000};
  uint64_t server_seed = 0;
  std::vector<std::vector<std::byte>> out, in;
  std::vector<uint64_t> words;
  uint64_t fetch_adds = 0, swaps = 0;

  void allocate() {
    out.assign(window, std::vector<std::byte>(size));
    in.assign(window, std::vector<std::byte>(size));
    words.assign(window, 0);
  }
  size_t size_of(uint64_t round, size_t i) const { return i % 2 == 0 ? size : 4096 + round % 512; }
  std::span<std::byte> fill(uint64_t round, size_t i) {
    auto s = std::span(out[i]).first(size_of(round, i));
    itest::fill_stream(kObserverSeed + round * window + i, 0, s);
    return s;
  }
  uint64_t offset_of(uint64_t round, size_t i) const { return ((round * window + i) * size) % (kRegionData - size); }
};

/// Operations of the workload posted and not yet seen to end (the driver's evidence that
/// the fault hit something in flight).
std::atomic<int64_t> g_outstanding{0};

Request posted(Request r) {
  ++g_outstanding;
  return r;
}

/// Waits for `r` and records its end; false when it failed.
bool finish(Request& r, const Workbench& wb, Outcome* o) {
  const Status s = r.wait(wb.op_timeout);
  --g_outstanding;
  o->ended(s);
  return s.is_ok();
}

/// Checks `got` against the observer's stream for (round, i) or the server's region at
/// `offset`; counts a completed operation, good or bad.
void verify(std::span<const std::byte> got, uint64_t seed, uint64_t offset, Outcome* o) {
  if (itest::first_mismatch(seed, offset, got) != SIZE_MAX) {
    ++o->bad;
    return;
  }
  ++o->ok;
  o->bytes += got.size();
}

bool round_sendrecv(Endpoint& ep, Workbench& wb, uint64_t round, Outcome* o) {
  std::vector<Request> rx, tx;
  for (size_t i = 0; i < wb.window; ++i) rx.push_back(posted(ep.recv(wb.in[i], kEchoBack)));
  for (size_t i = 0; i < wb.window; ++i) tx.push_back(posted(ep.send(wb.fill(round, i), kEcho)));
  bool ok = true;
  for (auto& r : tx) ok = finish(r, wb, o) && ok;
  for (size_t i = 0; i < wb.window; ++i) {
    if (!finish(rx[i], wb, o)) {
      ok = false;
      continue;
    }
    const size_t n = wb.size_of(round, i);
    if (rx[i].bytes() != n)
      ++o->bad;
    else
      verify(std::span(wb.in[i]).first(n), kObserverSeed + round * wb.window + i, 0, o);
  }
  return ok;
}

bool round_put(Endpoint& ep, const RemoteKey& key, Workbench& wb, uint64_t round, Outcome* o) {
  std::vector<Request> puts, gets;
  for (size_t i = 0; i < wb.window; ++i) puts.push_back(posted(ep.put(wb.fill(round, i), key, wb.offset_of(round, i))));
  bool ok = true;
  for (auto& r : puts) ok = finish(r, wb, o) && ok;
  if (!ok) return false;
  // Read back what landed: a put counts as good only once its bytes are seen there.
  for (size_t i = 0; i < wb.window; ++i) {
    gets.push_back(posted(ep.get(std::span(wb.in[i]).first(wb.size_of(round, i)), key, wb.offset_of(round, i))));
  }
  for (size_t i = 0; i < wb.window; ++i) {
    if (!finish(gets[i], wb, o)) {
      ok = false;
      continue;
    }
    verify(std::span(wb.in[i]).first(wb.size_of(round, i)), kObserverSeed + round * wb.window + i, 0, o);
  }
  return ok;
}

bool round_get(Endpoint& ep, const RemoteKey& key, Workbench& wb, uint64_t round, Outcome* o) {
  std::vector<Request> gets;
  for (size_t i = 0; i < wb.window; ++i) {
    gets.push_back(posted(ep.get(std::span(wb.in[i]).first(wb.size_of(round, i)), key, wb.offset_of(round, i))));
  }
  bool ok = true;
  for (size_t i = 0; i < wb.window; ++i) {
    if (!finish(gets[i], wb, o)) {
      ok = false;
      continue;
    }
    verify(std::span(wb.in[i]).first(wb.size_of(round, i)), wb.server_seed, wb.offset_of(round, i), o);
  }
  return ok;
}

/// fetch_add and compare_swap alternating, against a model: this observer is the only
/// writer of both words and the target runs them in posting order, so every old value
/// is known in advance.
bool round_atomics(Endpoint& ep, const RemoteKey& key, Workbench& wb, Outcome* o) {
  std::vector<Request> ops;
  std::vector<uint64_t> want(wb.window);
  for (size_t i = 0; i < wb.window; ++i) {
    if (i % 2 == 0) {
      want[i] = wb.fetch_adds++;
      ops.push_back(posted(ep.fetch_add(&wb.words[i], key, kFetchAddWord, 1)));
    } else {
      want[i] = wb.swaps;
      ops.push_back(
          posted(ep.compare_swap(&wb.words[i], key, kCasWord, {.expected = wb.swaps, .desired = wb.swaps + 1})));
      ++wb.swaps;
    }
  }
  bool ok = true;
  for (size_t i = 0; i < wb.window; ++i) {
    if (!finish(ops[i], wb, o)) {
      ok = false;
      continue;
    }
    if (wb.words[i] != want[i]) {
      ++o->bad;
    } else {
      ++o->ok;
      o->bytes += 8;
    }
  }
  return ok;
}

/// The observer's side of put-in: its memory, which the victim writes.
struct PushTarget {
  std::vector<std::byte> mem;
  std::optional<Region> region;
  uint64_t seq = 0;      ///< the oldest block not acknowledged yet
  std::vector<bool> in;  ///< by slot: its block (seq .. seq + window - 1) arrived and was checked
  uint64_t ack = 0;      ///< the acknowledgement being sent (alive until its send completes)
};

/// Receives a window of notified blocks, checks each one's notification and bytes, and
/// acknowledges them in order (an acknowledgement frees the oldest slot for the victim).
/// Puts are not ordered with each other, so neither are their notifications: any block of
/// the window may come first.
bool round_put_in(Endpoint& ep, Workbench& wb, PushTarget& t, Outcome* o) {
  t.in.resize(wb.window, false);
  for (size_t i = 0; i < wb.window; ++i) {
    ++g_outstanding;
    auto note = ep.wait_notification(wb.op_timeout);
    --g_outstanding;
    o->ended(note.status());
    if (!note) return false;
    const uint64_t v = note->value;
    const uint64_t offset = (v % wb.window) * wb.size;
    if (v < t.seq || v >= t.seq + wb.window || t.in[v % wb.window] || note->offset != offset ||
        note->length != push_size(v, wb.size)) {
      ++o->bad;
      continue;
    }
    verify(std::span(t.mem).subspan(offset, note->length), kPushSeed + v, 0, o);
    t.in[v % wb.window] = true;
    for (; t.in[t.seq % wb.window]; ++t.seq) {
      t.in[t.seq % wb.window] = false;
      t.ack = t.seq;
      Request a = posted(ep.send(std::as_bytes(std::span(&t.ack, 1)), kPushAck));
      if (!finish(a, wb, o)) return false;
    }
  }
  return true;
}

/// put, get and an echoed message against the healthy peer, every byte checked.
std::string check_survivor(Endpoint& ep, const RemoteKey& key, uint64_t seed) {
  std::vector<std::byte> out(3 << 20), in(3 << 20);
  itest::fill_stream(seed, 0, out);
  Status s = ep.put(out, key, 4096).wait(30s);
  if (!s) return "put: " + s.to_string();
  s = ep.get(in, key, 4096).wait(30s);
  if (!s) return "get: " + s.to_string();
  if (in != out) return "get after put: bytes differ";
  std::vector<std::byte> back(out.size());
  Request rx = ep.recv(back, kEchoBack);
  s = ep.send(out, kEcho).wait(30s);
  if (!s) return "send: " + s.to_string();
  s = rx.wait(30s);
  if (!s) return "recv: " + s.to_string();
  if (back != out) return "echo: bytes differ";
  return "ok";
}

std::shared_ptr<Endpoint> connect_or_die(Context& ctx, const std::string& address) {
  auto r = ctx.connect(address, 30s);
  if (!r) die("connect " + address + ": " + itest::describe(r.status()));
  return std::move(r).value();
}

RemoteKey key_or_die(const std::string& hex) {
  std::vector<std::byte> bytes;
  if (!from_hex(hex, &bytes)) die("malformed key " + hex);
  auto k = RemoteKey::deserialize(bytes);
  if (!k) die("key: " + itest::describe(k.status()));
  return *k;
}

int run_observer(const Flags& f) {
  auto ctx_r = Context::create();
  if (!ctx_r) die("Context::create: " + itest::describe(ctx_r.status()));
  std::unique_ptr<Context> ctx = std::move(ctx_r).value();
  const std::string workload = f.str("workload");
  const bool expect_complete = f.str("expect") == "complete";
  const uint64_t rounds_after = f.num("rounds-after", 4);
  const auto cap = std::chrono::seconds(f.num("cap-seconds", 60));

  Workbench wb;
  wb.window = f.num("window", wb.window);
  wb.size = f.num("size", wb.size);
  wb.op_timeout = std::chrono::milliseconds(f.num("op-timeout-ms", 30000));
  wb.server_seed = f.num("victim-seed", 1);
  wb.allocate();
  std::vector<int64_t> coll_buffer(kCollCount);
  PushTarget push;
  if (workload == "put-in") {
    push.mem.resize(wb.window * wb.size);
    auto r = ctx->register_memory(push.mem.data(), push.mem.size(), Access::kRemoteWrite);
    if (!r) die("register_memory: " + itest::describe(r.status()));
    push.region.emplace(std::move(r).value());
  }

  // The healthy peer first, checked once, so that the baseline holds everything the
  // rest of the process keeps.
  std::shared_ptr<Endpoint> healthy = connect_or_die(*ctx, f.str("healthy"));
  const RemoteKey healthy_key = key_or_die(f.str("healthy-key"));
  if (const std::string s = check_survivor(*healthy, healthy_key, 1); s != "ok") die("healthy peer before: " + s);
  settle_allocator();
  say("BASELINE");
  expect_command("go");

  std::shared_ptr<Endpoint> victim;
  std::unique_ptr<Communicator> comm;
  RemoteKey victim_key;
  if (workload == "allreduce") {
    LaunchInfo launch{.rank = 0, .size = 3, .launcher = "remora_faults", .store_address = f.str("store")};
    auto c = Communicator::init(*ctx, launch, CommOptions{.timeout = wb.op_timeout});
    if (!c) die("Communicator::init: " + itest::describe(c.status()));
    comm = std::move(c).value();
  } else {
    victim = connect_or_die(*ctx, f.str("victim"));
    victim_key = key_or_die(f.str("victim-key"));
  }
  if (push.region) {
    std::array<std::byte, RemoteKey::kSerializedSize + 16> hello{};
    const auto key = push.region->remote_key().serialize();
    const uint64_t geometry[2] = {wb.window, wb.size};
    std::memcpy(hello.data(), key.data(), key.size());
    std::memcpy(hello.data() + key.size(), geometry, sizeof geometry);
    if (Status s = victim->send(hello, kPushKey).wait(wb.op_timeout); !s) die("sending the key: " + s.to_string());
  }

  std::mutex mu;
  std::condition_variable cv;
  bool warm = false, done = false;
  std::atomic<bool> faulted{false};
  Outcome o;
  std::thread worker([&] {
    const auto start = Clock::now();
    uint64_t after = 0;
    bool more = true;
    CollResult cr;
    for (uint64_t round = 0;; ++round) {
      const bool last = expect_complete ? faulted && after + 1 >= rounds_after : Clock::now() - start > cap;
      bool ok = false;
      if (workload == "sendrecv")
        ok = round_sendrecv(*victim, wb, round, &o);
      else if (workload == "put")
        ok = round_put(*victim, victim_key, wb, round, &o);
      else if (workload == "get")
        ok = round_get(*victim, victim_key, wb, round, &o);
      else if (workload == "atomics")
        ok = round_atomics(*victim, victim_key, wb, &o);
      else if (workload == "put-in")
        ok = round_put_in(*victim, wb, push, &o);
      else if (workload == "allreduce") {
        ++g_outstanding;
        ok = allreduce_once(*comm, round, !last, &more, &cr, coll_buffer);
        --g_outstanding;
        o.ended(cr.status);
        if (ok) {
          ++o.ok;
          o.bytes += kCollCount * 8;
        }
        o.bad += cr.bad;
        cr.bad = 0;
      } else
        die("unknown --workload " + workload);
      ++o.rounds;
      if (faulted) ++after;
      {
        std::lock_guard lock(mu);
        warm = warm || ok;
      }
      cv.notify_all();
      if (!ok || last) break;
    }
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return warm || done; });
  }
  say("INFLIGHT");
  // Armed: the driver applies the fault right after this answer, while the rounds go on
  // posting; the answer waits (bounded) until operations are outstanding.
  expect_command("arm");
  // One reading, reported as it was: read again, an operation that completed just after
  // the loop saw it would be reported as nothing in flight.
  const auto arm_deadline = Clock::now() + 10s;
  auto outstanding = g_outstanding.load();
  while (outstanding == 0 && Clock::now() < arm_deadline) {
    std::this_thread::yield();
    outstanding = g_outstanding.load();
  }
  say("ARMED " + std::to_string(outstanding));
  expect_command("faulted");
  const auto fault_time = Clock::now();  // complete: the rounds after the fault count from here
  faulted = true;
  worker.join();
  (void)fault_time;
  if (!o.first_error) std::fprintf(stderr, "remora_faults node: first error: %s\n", o.first_error.to_string().c_str());
  // Times on the steady clock (CLOCK_MONOTONIC: one clock for every process of the host),
  // so that the driver measures them against the moment it applied the fault.
  auto ns = [](Clock::time_point t) { return std::to_string(t.time_since_epoch() / 1ns); };
  say("END ok=" + std::to_string(o.ok) + " errors=" + std::to_string(o.errors) + " bad=" + std::to_string(o.bad) +
      " bytes=" + std::to_string(o.bytes) + " rounds=" + std::to_string(o.rounds) +
      " code=" + std::string(o.first_error ? "-" : to_string(o.first_error.code())) + " last_end_ns=" + ns(o.last_end) +
      " first_error_ns=" + ns(o.first_error_at));

  // Let go of the victim: an orderly close where it still answers (put-in: told to stop first).
  if (victim && push.region && !victim->failed()) {
    push.ack = kPushStop;
    (void)victim->send(std::as_bytes(std::span(&push.ack, 1)), kPushAck).wait(wb.op_timeout);
  }
  if (victim) {
    if (!victim->failed()) victim->close();
    victim.reset();
  }
  comm.reset();
  settle_allocator();
  say("RELEASED");
  expect_command("survivor");
  say("SURVIVOR " + check_survivor(*healthy, healthy_key, 2));
  expect_command("quit");
  healthy->close();
  return 0;
}

}  // namespace

int node_main(int argc, char** argv) {
  Flags f(argc, argv);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  alarm(static_cast<unsigned>(f.num("max-seconds", 300)));
  const std::string role = f.str("role");
  if (role == "server") return run_server(f);
  if (role == "observer") return run_observer(f);
  die("--role must be server or observer");
}

}  // namespace remora::faults
