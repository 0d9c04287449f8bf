// remora_test_peer — the other process of every integration scenario.
//
//   remora_test_peer --role=listen|connect --address=HOST:PORT --scenario=NAME [options]
//
// Listening on port 0 prints "PORT <n>" on stdout once the listener is up. Exits 0
// when every check passed, non-zero with a message on stderr otherwise. It never
// outlives the test: it dies with its parent (PR_SET_PDEATHSIG) and after
// --max-seconds (SIGALRM) at the latest.
//
// Scenarios (see support/*.h for what each checks):
//   exchange    random two-way exchange (--side, --count, --peer-count, --max-size,
//               --fixed-size, --tags, --send-window, --recv-window), then the closing
//               handshake (--close=initiate|follow|none); --expect-same-host=yes|no
//               checks whether this side read the peer's chunks out of its memory and
//               sent its control stream through the shared-memory channel
//   big-send    one message of --size bytes from stream --seed (prints "HASH <xxh3>")
//   big-recv    receives one --size message, checks its XXH3 (prints "HASH <xxh3>")
//   truncation | zero | unexpected | out-of-order | outstanding   scripted halves
//   device-echo receives one message per --sizes entry (comma-separated) with tag
//               100+i into --memory=host|device (device: a TestDeviceDomain added to
//               the context), prints "RECV <i> ok <xxh3>" or "RECV <i> <error code>",
//               and sends each message it got back with tag 200+i from that memory;
//               then "DONE". --fail-recv=<i>: its device copies for message i fail
//   device-rma  registers --size bytes of --memory=host|device for remote reads and
//               writes, filled with stream --seed, sends its RemoteKey (tag 1), waits
//               for a message (tag 2) saying the peer is done with it, prints
//               "REGION <xxh3 of the region>", then "DONE"
//   shm-scribble a hostile same-host peer: once the control stream runs in shared memory
//               both ways and a message crossed each way (tags 1, 2), writes a head far beyond the
//               capacity into the ring it writes (the peer's), prints "SCRIBBLED", and
//               waits for the peer to give up on it (its endpoint fails)
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <xxhash.h>

#include "net/shm_ring.h"
#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/memory.h"
#include "remora/request.h"
#include "remora/testing/test_device.h"
#include "support/exchange.h"
#include "support/peer_program.h"
#include "support/scripts.h"
#include "support/test_data.h"

namespace {

using namespace remora;
using namespace remora::itest;

constexpr Tag kBigTag{9};


void print_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void scribble_peer_ring(Endpoint& ep);  // scenario shm-scribble, below

/// Sizes from "a,b,c".
std::vector<uint64_t> parse_sizes(const std::string& text) {
  std::vector<uint64_t> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(std::stoull(text.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

/// The device-echo scenario (see the banner).
void device_echo(Endpoint& ep, testing::TestDeviceDomain* device, const std::vector<uint64_t>& sizes,
                 uint64_t fail_recv) {
  uint64_t max = 1;
  for (uint64_t s : sizes) max = std::max(max, s);
  std::vector<std::byte> host(device == nullptr ? max : 0);
  std::byte* buffer = host.data();
  if (device != nullptr) {
    auto mem = device->allocate(max);
    if (!mem) die("device allocate: " + describe(mem.status()));
    buffer = *mem;
  }
  std::vector<std::byte> check(max);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::span<std::byte> msg(buffer, sizes[i]);
    if (i == fail_recv && device != nullptr) device->fail_copies(buffer, max);
    Request r = ep.recv(msg, Tag{100 + i});
    const Status s = r.wait(std::chrono::seconds(60));
    if (device != nullptr) device->clear_failures();
    if (!s.is_ok()) {
      print_line("RECV " + std::to_string(i) + " " + std::string(to_string(s.code())));
      continue;
    }
    if (r.bytes() != sizes[i]) die("device-echo: message " + std::to_string(i) + " has " + std::to_string(r.bytes()) + " bytes");
    if (device != nullptr) {
      if (Status rd = device->read(check.data(), buffer, sizes[i]); !rd.is_ok()) die("device read: " + describe(rd));
    } else {
      std::copy(msg.begin(), msg.end(), check.begin());
    }
    print_line("RECV " + std::to_string(i) + " ok " + hex64(XXH3_64bits(check.data(), sizes[i])));
    const Status back = ep.send(msg, Tag{200 + i}).wait(std::chrono::seconds(60));
    if (!back.is_ok()) die("device-echo: sending message " + std::to_string(i) + " back: " + describe(back));
  }
  print_line("DONE");
}

/// The device-rma scenario (see the banner).
void device_rma(Context& ctx, Endpoint& ep, testing::TestDeviceDomain* device, uint64_t size, uint64_t seed) {
  std::vector<std::byte> host(size);
  fill_stream(seed, 0, host);
  std::byte* region_mem = host.data();
  if (device != nullptr) {
    auto mem = device->allocate(size);
    if (!mem) die("device allocate: " + describe(mem.status()));
    region_mem = *mem;
    if (Status w = device->write(region_mem, host.data(), size); !w.is_ok()) die("device write: " + describe(w));
  }
  auto region = ctx.register_memory(region_mem, size, Access::kRemoteRead | Access::kRemoteWrite);
  if (!region) die("register_memory: " + describe(region.status()));
  const auto key = region->remote_key().serialize();
  if (Status s = ep.send(key, Tag{1}).wait(std::chrono::seconds(60)); !s.is_ok()) die("sending the key: " + describe(s));
  std::byte done{};
  if (Status s = ep.recv(std::span(&done, 1), Tag{2}).wait(std::chrono::seconds(120)); !s.is_ok()) {
    die("waiting for the peer to finish: " + describe(s));
  }
  if (device != nullptr) {
    if (Status rd = device->read(host.data(), region_mem, size); !rd.is_ok()) die("device read: " + describe(rd));
  }
  print_line("REGION " + hex64(XXH3_64bits(host.data(), size)));
  print_line("DONE");
}

int run(const Flags& f) {
  // The device domain outlives the context (Context::add_memory_domain).
  std::unique_ptr<testing::TestDeviceDomain> device;
  if (f.str("memory", "host") == "device") {
    auto d = testing::TestDeviceDomain::create({.capacity = size_t{1} << 30});
    if (!d) die("TestDeviceDomain::create: " + describe(d.status()));
    device = std::move(d).value();
  }
  auto ctx_r = Context::create();
  if (!ctx_r) die("Context::create: " + describe(ctx_r.status()));
  auto ctx = std::move(ctx_r).value();
  if (device != nullptr) {
    if (Status s = ctx->add_memory_domain(*device); !s.is_ok()) die("add_memory_domain: " + describe(s));
  }

  const std::string role = f.str("role");
  const std::string address = f.str("address", "127.0.0.1:0");
  const auto timeout = std::chrono::milliseconds(f.num("timeout-ms", 60'000));
  std::shared_ptr<Endpoint> ep;
  std::unique_ptr<Listener> listener;
  if (role == "listen") {
    auto l = ctx->listen(address);
    if (!l) die("listen " + address + ": " + describe(l.status()));
    listener = std::move(l).value();
    print_line("PORT " + std::to_string(listener->port()));
    auto a = listener->accept(timeout);
    if (!a) die("accept: " + describe(a.status()));
    ep = std::move(a).value();
  } else if (role == "connect") {
    auto c = ctx->connect(address, timeout);
    if (!c) die("connect " + address + ": " + describe(c.status()));
    ep = std::move(c).value();
  } else {
    die("--role must be listen or connect");
  }
  if (const uint64_t k = f.num("expect-streams", 0); k != 0 && ep->data_streams() != k) {
    die("endpoint has " + std::to_string(ep->data_streams()) + " data streams, expected " + std::to_string(k));
  }

  const std::string scenario = f.str("scenario");
  const uint64_t seed = f.num("seed", 1);
  const std::string close = f.str("close", "follow");
  auto finish = [&] {
    if (close != "none") check(close_handshake(*ep, close == "initiate", timeout), "closing handshake");
  };

  if (scenario == "exchange") {
    const auto side = static_cast<uint32_t>(f.num("side", 1));
    PlanOptions po{.seed = seed,
                   .direction = side,
                   .count = f.num("count", 1000),
                   .max_size = f.num("max-size", 4 << 20),
                   .fixed_size = f.num("fixed-size", 0),
                   .tags = static_cast<uint32_t>(f.num("tags", 4))};
    const Plan out = make_plan(po);
    po.direction = 1 - side;
    po.count = f.num("peer-count", po.count);
    const Plan in = make_plan(po);
    ExchangeOptions eo;
    eo.send_window = f.num("send-window", eo.send_window);
    eo.recv_window = f.num("recv-window", eo.recv_window);
    eo.timeout = std::chrono::milliseconds(f.num("exchange-timeout-ms", 30'000));
    const ExchangeReport rep = run_exchange(*ep, out, in, eo);
    check(rep.error, "exchange");
    std::fprintf(stderr, "remora_test_peer: exchange done: sent %llu (%llu bytes), received %llu (%llu bytes) in %.2f s\n",
                 static_cast<unsigned long long>(rep.sent), static_cast<unsigned long long>(rep.bytes_sent),
                 static_cast<unsigned long long>(rep.received), static_cast<unsigned long long>(rep.bytes_received),
                 rep.seconds);
    // --expect-same-host=yes|no: whether this side read the peer's chunks out of its
    // memory (same-host pulls, docs/protocol.md) and the control stream went through the
    // shared-memory channel, or every byte came over TCP.
    if (const std::string same = f.str("expect-same-host", ""); !same.empty()) {
      const EndpointStats st = ep->stats();
      if (same == "yes" && (!st.same_host_reason.empty() || st.bytes_pulled == 0)) {
        die("expected same-host pulls, got " + std::to_string(st.bytes_pulled) + " bytes pulled (" +
            st.same_host_reason + ")");
      }
      if (same == "no" && (st.same_host_reason.empty() || st.bytes_pulled != 0 || st.chunks_pulled != 0)) {
        die("expected no same-host pulls, got " + std::to_string(st.bytes_pulled) + " bytes pulled");
      }
      // The control stream moves into shared memory both ways where pulls run (unless the
      // endpoint is sealed, REMORA_ENCRYPT), and stays on TCP both ways where they do not.
      const char* encrypt = std::getenv("REMORA_ENCRYPT");
      const bool sealed = encrypt != nullptr && *encrypt != '\0' && std::string(encrypt) != "off";
      if (same == "yes" && sealed && (st.shm_tx || st.shm_rx)) die("a sealed endpoint used the shared-memory channel");
      if (same == "yes" && !sealed && (!st.shm_tx || !st.shm_rx || !st.shm_reason.empty())) {
        die("expected the shared-memory channel both ways, got tx " + std::to_string(st.shm_tx) + " rx " +
            std::to_string(st.shm_rx) + " (" + st.shm_reason + ")");
      }
      if (same == "no" && (st.shm_tx || st.shm_rx || st.shm_reason.empty())) {
        die("expected no shared-memory channel, got tx " + std::to_string(st.shm_tx) + " rx " +
            std::to_string(st.shm_rx));
      }
      std::fprintf(stderr, "remora_test_peer: same host: %s\n",
                   st.same_host_reason.empty() ? "pulls" : st.same_host_reason.c_str());
    }
    finish();
  } else if (scenario == "big-send") {
    const uint64_t size = f.num("size", 0);
    GuardedBuffer buf(size);
    if (!buf.ok()) die("mmap of " + std::to_string(size) + " bytes failed");
    fill_stream(seed, 0, buf.span());
    print_line("HASH " + hex64(XXH3_64bits(buf.data(), buf.size())));
    Request r = ep->send(buf.span(), kBigTag);
    const Status s = r.wait(std::chrono::seconds(150));
    if (!s.is_ok()) die("big send of " + std::to_string(size) + " bytes: " + describe(s));
    if (r.bytes() != size) die("big send: bytes() = " + std::to_string(r.bytes()));
    finish();
  } else if (scenario == "big-recv") {
    const uint64_t size = f.num("size", 0);
    GuardedBuffer buf(size);
    if (!buf.ok()) die("mmap of " + std::to_string(size) + " bytes failed");
    Request r = ep->recv(buf.span(), kBigTag);
    const Status s = r.wait(std::chrono::seconds(150));
    if (!s.is_ok()) die("big recv of " + std::to_string(size) + " bytes: " + describe(s));
    if (r.bytes() != size) die("big recv: bytes() = " + std::to_string(r.bytes()) + ", expected " + std::to_string(size));
    const uint64_t got = XXH3_64bits(buf.data(), buf.size());
    print_line("HASH " + hex64(got));
    const uint64_t want = stream_hash(seed, size);
    if (got != want) {
      const size_t at = first_mismatch(seed, 0, buf.span());
      die("big recv: XXH3 " + hex64(got) + " != expected " + hex64(want) + "; first differing byte at offset " +
          std::to_string(at));
    }
    finish();
  } else if (scenario == "truncation") {
    check(truncation_receiver(*ep, seed), "truncation (receiver half)");
    check(truncation_sender(*ep, seed + 100), "truncation (sender half)");
    finish();
  } else if (scenario == "zero") {
    check(zero_receiver(*ep, seed), "zero (receiver half)");
    check(zero_sender(*ep, seed + 100), "zero (sender half)");
    finish();
  } else if (scenario == "unexpected") {
    check(unexpected_receiver(*ep, seed), "unexpected (receiver half)");
    check(unexpected_sender(*ep, seed + 100), "unexpected (sender half)");
    finish();
  } else if (scenario == "out-of-order") {
    check(out_of_order_receiver(*ep, seed), "out-of-order (receiver half)");
    check(out_of_order_sender(*ep, seed + 100), "out-of-order (sender half)");
    finish();
  } else if (scenario == "device-echo") {
    device_echo(*ep, device.get(), parse_sizes(f.str("sizes")), f.num("fail-recv", UINT64_MAX));
    finish();
  } else if (scenario == "device-rma") {
    device_rma(*ctx, *ep, device.get(), f.num("size", 1 << 20), seed);
    finish();
  } else if (scenario == "shm-scribble") {
    scribble_peer_ring(*ep);
  } else if (scenario == "outstanding") {
    check(many_outstanding(*ep, seed, static_cast<uint32_t>(f.num("side", 1)), f.num("count", 500)), "outstanding");
    finish();
  } else {
    die("unknown --scenario " + scenario);
  }
  ep.reset();
  listener.reset();
  ctx.reset();
  return 0;
}

/// The hostile peer of scenario shm-scribble: scribbles the head of the peer's ring as
/// mapped in this process (a mapping of a "remora-shm-ring" memfd whose descriptor this
/// process no longer holds: it offered its own ring's, and closed the peer's after
/// mapping it), then prints "SCRIBBLED".
void scribble_peer_ring(Endpoint& ep) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!(ep.stats().shm_tx && ep.stats().shm_rx)) {
    if (std::chrono::steady_clock::now() > deadline) die("no shared-memory channel: " + ep.stats().shm_reason);
    std::this_thread::yield();
  }
  // A message each way first: the peer has read everything before the scribble.
  const uint64_t hello = 42;
  uint64_t ack = 0;
  check(ep.send(std::as_bytes(std::span(&hello, 1)), static_cast<Tag>(1)).wait(std::chrono::seconds(30)).is_ok()
            ? ""
            : "send",
        "shm-scribble: hello");
  check(ep.recv(std::as_writable_bytes(std::span(&ack, 1)), static_cast<Tag>(2)).wait(std::chrono::seconds(30)).is_ok()
            ? ""
            : "recv",
        "shm-scribble: the peer's answer");
  std::set<ino_t> own;  // inodes of rings whose descriptor is open here: this side's own
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string().find("remora-shm-ring") == std::string::npos) continue;
    struct stat st {};
    if (::stat(e.path().c_str(), &st) == 0) own.insert(st.st_ino);
  }
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int scribbled = 0;
  while (std::getline(maps, line)) {
    if (line.find("remora-shm-ring") == std::string::npos) continue;
    std::istringstream in(line);
    std::string range, perms, offset, dev;
    ino_t inode = 0;
    in >> range >> perms >> offset >> dev >> inode;
    if (own.count(inode) != 0 || offset != "00000000") continue;
    const uint64_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    auto* header = reinterpret_cast<net::ShmRingMemory::Header*>(static_cast<uintptr_t>(start));
    header->head.store(header->head.load() + (uint64_t{1} << 40));
    ++scribbled;
  }
  if (scribbled != 1) die("found " + std::to_string(scribbled) + " rings of the peer to scribble, expected 1");
  print_line("SCRIBBLED");
  // The peer fails its endpoint and closes: this side's fails too.
  uint64_t sink = 0;
  const Status s =
      ep.recv(std::as_writable_bytes(std::span(&sink, 1)), static_cast<Tag>(3)).wait(std::chrono::seconds(60));
  if (s.is_ok()) die("the peer accepted a scribbled ring");
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  // Never outlive the test: die with the parent, and give up after a hard limit.
  const auto parent = static_cast<pid_t>(flags.num("parent-pid", 0));
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent != 0 && getppid() != parent) die("parent is gone");
  alarm(static_cast<unsigned>(flags.num("max-seconds", 150)));
  return run(flags);
}
