// remora_rails_peer — one side of a transfer over rails (rails_test.cc): run in a
// network namespace with REMORA_RAILS in its environment.
//   --role=listen --address=HOST:0 --size=N --seed=S   prints "PORT <n>", accepts one
//       endpoint, receives N bytes (tag 1) and checks every byte, then answers (tag 2)
//   --role=connect --address=HOST:PORT --size=N --seed=S   sends N bytes (tag 1) and
//       waits for the answer
//   --answer-size=M   the answer is M bytes (default 8), checked by the connecting side
//   --rma   then the listener registers a window of 2N bytes (the first N seeded) and
//       sends its key (tag 3); the connecting side gets the first N bytes and checks
//       them, puts N bytes into the second half, and says so (tag 4); the listener checks
//       them
//   --blocks=B   (with --rma) the get and the put are batches of B-byte blocks at the
//       same offsets on both sides, posted in reverse order (segmented requests, where
//       both sides offer them), not one buffer each
//   --mixed   (with --rma) the put is joined, while it is in flight, by 8 puts of 1 MiB
//       with notifications (values 1000..1007) and 64 fetch_adds of 3 on one word, all
//       into the window's extra 8 MiB + 8 bytes; the connecting side checks the fetched
//       values are 0, 3, ..., 189 in some order, the listener the bytes, the word (192)
//       and each notification exactly once (--break-op=put breaks the big put first,
//       and they are posted while the endpoint recovers)
//   --break-source=ADDR   (connecting side) once the operation named by --break-op
//       (send, get or put; default send) has moved bytes on the rail whose local address
//       is ADDR, and before it completed, resets that rail's connections (`ss -K src
//       ADDR`), or with --break-how=down sets the rail's interface down: failover must
//       finish the operation on the other rail; --break-how=all-down sets every rail's
//       interface down (nothing survives that: the endpoint fails); --break-how=all-streams
//       resets every data stream at once but not the control stream (`ss -K` of each
//       rail's connections but the one from EndpointStats::control_address's port): the
//       connecting side connects them again; --break-how=all-streams-for-good first drops
//       every SYN this namespace sends (iptables), so that none comes back;
//       --break-how=control resets the control stream only (`ss -K` of the connection from
//       EndpointStats::control_address): the connecting side connects it again and both
//       replay what the other lacks; --break-how=everything resets every connection of the
//       endpoint at once, the control stream's too; --break-how=control-for-good first
//       drops every SYN this namespace sends, so that the control stream cannot come back
//   --idle-down   instead of all the above: the connecting side registers N bytes and
//       sends their key (tag 7); once the listener acknowledged it (tag 8), with nothing
//       posted or outstanding, it sets the interface of its control stream's rail down,
//       prints "IDLE-DOWN <interface>", and takes a notification through its handler
//       (bounded; a waiting thread would make the endpoint await its peer): the
//       listening side puts N bytes (seed + 6) with notification 6 into that memory once
//       a line arrives on its stdin (the test writes it after IDLE-DOWN). Only the idle
//       side can connect the control stream again, so it must find the quiet path itself
//   --die   (listening side) kills itself (SIGKILL) once the transfer's first bytes arrived
//   --device   the N-byte message is sent from and received into device memory (a
//       TestDeviceDomain added to each side's context), and with --rma the listener's
//       window is device memory (registered without remote atomics: not with --mixed):
//       it all travels staged, and failover must send chunks again out of the device
//   --comeback=<n>  (both sides, with --break-how=down) after the exchange the connecting
//       side prints "DOWN <the rail's reason>", sets the rail up again, waits until the
//       endpoint connected its stream again (bounded), and sends N more bytes (tag 5),
//       checked by the listener; n times, the rail's link going down again under each
//       such send but the last. It then prints
//       "COMEBACK <streams_rejoined> <rail bytes sent before> <after>" for that rail
// FAILOVER <on|off> <streams_retired> <chunks_resent> <streams_rejoined> <control_resumed>
// follows, then SEALED <cipher|->, SEGMENTED <segmented requests this side initiated>,
// STAGED <transfers> <bytes> (device memory moved through staging buffers), then
// Both then print one line per rail of the endpoint:
//   RAIL <state> <local> <peer> <interface|-> <streams> <chunks_sent> <chunks_received>
//        <bytes_sent> <bytes_received> <reason...>
// and exit 0; anything wrong is a message on stderr, a line "FAILED <what> <status code>
// <message>" on stdout, and exit 1.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/testing/test_device.h"
#include "support/test_data.h"

namespace {

using namespace remora;

std::string arg(int argc, char** argv, const std::string& name, const std::string& fallback = "") {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

/// Resets the connections from `source` once `r` has moved bytes on that rail, while it
/// is still in flight (the wait is bounded); false, with a message, if it could not.
/// `again`, for an operation that may be repeated (a put or a get of the same bytes),
/// posts it anew when it completed before the break could be made (a slow host, as under
/// ThreadSanitizer beside other tests, may take longer to look than the put to finish):
/// up to four times, so the break lands mid-operation however slow this process runs.
bool break_rail_during(Endpoint& ep, Request& r, const std::string& source, const std::string& how,
                       std::string* broken = nullptr, const std::function<Request()>& again = {}) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string interface;
  auto on_rail = [&] {
    for (const RailStats& rail : ep.stats().rails) {
      if (rail.local_address == source && rail.bytes_sent + rail.bytes_received > 0) {
        interface = rail.interface;
        return true;
      }
    }
    return false;
  };
  while (!on_rail() && !r.done() && std::chrono::steady_clock::now() < deadline) {
    (void)r.wait(std::chrono::milliseconds(1));
  }
  for (int attempt = 0; again && r.done() && r.test().is_ok() && attempt < 4; ++attempt) {
    std::fprintf(stderr, "rails peer: the operation completed before the rail %s could be broken; posted again\n",
                 source.c_str());
    r = again();
  }
  if (r.done()) {
    // Say what each rail carried, so that a run where this happens can be told apart:
    // a rail retired early (its reason), or the chunks all chosen for the other rail.
    std::string rails;
    for (const RailStats& rail : ep.stats().rails) {
      rails += " [" + rail.local_address + " " + rail.state + ", " + std::to_string(rail.streams) + " streams, " +
               std::to_string(rail.bytes_sent) + " B sent, " + std::to_string(rail.bytes_received) + " B received, " +
               std::to_string(rail.streams_retired) + " retired" + (rail.reason.empty() ? "" : ": " + rail.reason) +
               "]";
    }
    std::fprintf(stderr, "rails peer: the operation completed before the rail %s could be broken; rails:%s\n",
                 source.c_str(), rails.c_str());
    return false;
  }
  std::string cmd = how == "down" ? "ip link set dev " + interface + " down" : "ss -K src " + source + " >/dev/null";
  if (how == "all-down") {
    cmd = "true";
    for (const RailStats& rail : ep.stats().rails) cmd += " && ip link set dev " + rail.interface + " down";
  }
  if (how == "all-streams" || how == "all-streams-for-good") {
    const EndpointStats st = ep.stats();
    const std::string control_port = st.control_address.substr(st.control_address.rfind(':') + 1);
    cmd = how == "all-streams" ? "true" : "iptables -A OUTPUT -p tcp --syn -j DROP";
    for (const RailStats& rail : st.rails) {
      if (rail.streams > 0)
        cmd += " && ss -K src " + rail.local_address + " and not sport = :" + control_port + " >/dev/null";
    }
  }
  if (how == "control" || how == "control-for-good" || how == "everything") {
    const EndpointStats st = ep.stats();
    const size_t colon = st.control_address.rfind(':');
    const std::string control_host = st.control_address.substr(0, colon);
    const std::string control_port = st.control_address.substr(colon + 1);
    cmd = how == "control-for-good" ? "iptables -A OUTPUT -p tcp --syn -j DROP && " : "";
    cmd += "ss -K src " + control_host + " and sport = :" + control_port + " >/dev/null";
    if (how == "everything") {
      for (const RailStats& rail : st.rails) {
        if (rail.streams > 0) cmd += " && ss -K src " + rail.local_address + " >/dev/null";
      }
    }
  }
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "rails peer: %s failed\n", cmd.c_str());
    return false;
  }
  if (broken != nullptr) *broken = interface;
  return true;
}

/// The bytes sent on the rail of `interface`.
uint64_t rail_bytes_sent(const Endpoint& ep, const std::string& interface) {
  for (const RailStats& rail : ep.stats().rails) {
    if (rail.interface == interface) return rail.bytes_sent;
  }
  return 0;
}

/// The reason the rail of `interface` gives ("-" when none).
std::string rail_reason(const Endpoint& ep, const std::string& interface) {
  for (const RailStats& rail : ep.stats().rails) {
    if (rail.interface == interface && !rail.reason.empty()) return rail.reason;
  }
  return "-";
}

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "rails peer: %s: %s %s\n", what.c_str(), std::string(to_string(s.code())).c_str(),
               s.message().c_str());
  std::printf("FAILED %s %s %s\n", what.c_str(), std::string(to_string(s.code())).c_str(), s.message().c_str());
  std::fflush(stdout);
  return 1;
}

void print_rails(const Endpoint& ep) {
  const EndpointStats st = ep.stats();
  std::printf("FAILOVER %s %u %lu %u %u\n", st.failover ? "on" : "off", st.streams_retired,
              static_cast<unsigned long>(st.chunks_resent), st.streams_rejoined, st.control_resumed);
  const std::string sealed = ep.stats().encryption;
  std::printf("SEALED %s\n", sealed.empty() ? "-" : sealed.c_str());
  std::printf("SEGMENTED %lu\n", static_cast<unsigned long>(st.segmented));
  std::printf("STAGED %lu %lu\n", static_cast<unsigned long>(st.staged_transfers),
              static_cast<unsigned long>(st.staged_bytes));
  for (const RailStats& r : ep.stats().rails) {
    std::printf("RAIL %s %s %s %s %u %lu %lu %lu %lu %s\n", r.state.c_str(), r.local_address.c_str(),
                r.peer_address.empty() ? "-" : r.peer_address.c_str(), r.interface.empty() ? "-" : r.interface.c_str(),
                r.streams, static_cast<unsigned long>(r.chunks_sent), static_cast<unsigned long>(r.chunks_received),
                static_cast<unsigned long>(r.bytes_sent), static_cast<unsigned long>(r.bytes_received),
                r.reason.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = arg(argc, argv, "role");
  const std::string address = arg(argc, argv, "address");
  const uint64_t size = std::stoull(arg(argc, argv, "size", "1048576"));
  const uint64_t seed = std::stoull(arg(argc, argv, "seed", "1"));
  const uint64_t answer_size = std::stoull(arg(argc, argv, "answer-size", "8"));
  const std::string break_source = arg(argc, argv, "break-source");
  const std::string break_op = arg(argc, argv, "break-op", "send");
  const std::string break_how = arg(argc, argv, "break-how", "reset");
  const bool rma = arg(argc, argv, "rma") == "1";
  const bool mixed = arg(argc, argv, "mixed") == "1";
  const uint64_t blocks = std::stoull(arg(argc, argv, "blocks", "0"));
  const bool die = arg(argc, argv, "die") == "1";
  const int comebacks = std::stoi(arg(argc, argv, "comeback", "0"));
  const bool idle_down = arg(argc, argv, "idle-down") == "1";
  const bool device = arg(argc, argv, "device") == "1";
  std::string broken;  // the interface the connecting side set down
  constexpr uint64_t kNotified = 8, kNotifiedSize = 1 << 20, kAdds = 64, kAdd = 3;
  const uint64_t extra = mixed ? kNotified * kNotifiedSize + 8 : 0;  // after the 2N bytes
  const auto timeout = std::chrono::seconds(60);
  // The device domain outlives the context (Context::add_memory_domain).
  std::unique_ptr<testing::TestDeviceDomain> dev;
  if (device) {
    auto d = testing::TestDeviceDomain::create({.capacity = 3 * size + extra + (size_t{1} << 20)});  // message, window
    if (!d) return fail("TestDeviceDomain::create", d.status());
    dev = std::move(d).value();
  }
  auto ctx = Context::create(ContextOptions{});
  if (!ctx) return fail("Context::create", ctx.status());
  if (dev != nullptr) {
    if (Status s = (*ctx)->add_memory_domain(*dev); !s) return fail("add_memory_domain", s);
  }
  std::shared_ptr<Endpoint> ep;
  std::vector<std::byte> buffer(size);
  // The message's memory: `buffer`, or with --device as much device memory.
  std::span<std::byte> message(buffer);
  if (dev != nullptr) {
    auto mem = dev->allocate(size);
    if (!mem) return fail("device allocate", mem.status());
    message = std::span(*mem, size);
  }
  std::vector<std::byte> answer(answer_size);
  if (role == "listen") {
    auto listener = (*ctx)->listen(address);
    if (!listener) return fail("listen", listener.status());
    std::printf("PORT %u\n", (*listener)->port());
    std::fflush(stdout);
    auto accepted = (*listener)->accept(timeout);
    if (!accepted) return fail("accept", accepted.status());
    ep = *accepted;
    if (idle_down) {
      std::array<std::byte, RemoteKey::kSerializedSize> key_bytes{};
      if (Status s = ep->recv(key_bytes, Tag{7}).wait(timeout); !s) return fail("recv the idle side's key", s);
      auto key = RemoteKey::deserialize(key_bytes);
      if (!key) return fail("deserialize the key", key.status());
      if (Status s = ep->send(answer, Tag{8}).wait(timeout); !s) return fail("acknowledge the key", s);
      char go[16];
      if (std::fgets(go, sizeof go, stdin) == nullptr) {
        std::fprintf(stderr, "rails peer: stdin ended before the go\n");
        return 1;
      }
      itest::fill_stream(seed + 6, 0, buffer);
      if (Status s = ep->put(buffer, *key, 0, PutOptions{.notify = 6}).wait(timeout); !s) {
        return fail("put into the idle side", s);
      }
      print_rails(*ep);
      ep->close();
      return 0;
    }
    Request received = ep->recv(message, Tag{1});
    if (die) {
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      auto arrived = [&] {
        uint64_t n = 0;
        for (const RailStats& rail : ep->stats().rails) n += rail.bytes_received;
        return n;
      };
      while (arrived() == 0 && !received.done() && std::chrono::steady_clock::now() < deadline) {
        (void)received.wait(std::chrono::milliseconds(1));
      }
      if (received.done()) {
        std::fprintf(stderr, "rails peer: the message arrived before this side could die\n");
        return 1;
      }
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
    if (Status s = received.wait(timeout); !s) return fail("recv", s);
    if (dev != nullptr) {
      if (Status s = dev->read(buffer.data(), message.data(), size); !s) return fail("device read", s);
    }
    const size_t bad = itest::first_mismatch(seed, 0, buffer);
    if (bad != SIZE_MAX) {
      std::fprintf(stderr, "rails peer: byte %zu of %lu differs\n", bad, static_cast<unsigned long>(size));
      return 1;
    }
    itest::fill_stream(seed + 1, 0, answer);
    if (Status s = ep->send(answer, Tag{2}).wait(timeout); !s) return fail("send the answer", s);
    if (rma) {
      std::vector<std::byte> window(2 * size + extra);
      itest::fill_stream(seed + 2, 0, std::span(window).first(size));
      // --device: the window is device memory, `window` its host image.
      std::byte* window_mem = window.data();
      if (dev != nullptr) {
        if (mixed) return fail("--device with --mixed", Status(StatusCode::kInvalidArgument, "no remote atomics"));
        auto mem = dev->allocate(window.size());
        if (!mem) return fail("device allocate", mem.status());
        window_mem = *mem;
        if (Status s = dev->write(window_mem, window.data(), window.size()); !s) return fail("device write", s);
      }
      const Access rights =
          Access::kRemoteRead | Access::kRemoteWrite | (dev != nullptr ? Access{} : Access::kRemoteAtomic);
      auto region = (*ctx)->register_memory(window_mem, window.size(), rights);
      if (!region) return fail("register_memory", region.status());
      const auto key = region->remote_key().serialize();
      if (Status s = ep->send(key, Tag{3}).wait(timeout); !s) return fail("send the key", s);
      std::byte done[8] = {};
      if (Status s = ep->recv(done, Tag{4}).wait(timeout); !s) return fail("recv done", s);
      if (dev != nullptr) {
        if (Status s = dev->read(window.data(), window_mem, window.size()); !s) return fail("device read", s);
      }
      const size_t put_bad = itest::first_mismatch(seed + 3, 0, std::span(window).subspan(size, size));
      if (put_bad != SIZE_MAX) {
        std::fprintf(stderr, "rails peer: byte %zu of the put differs\n", put_bad);
        return 1;
      }
      if (mixed) {
        const auto notified = std::span(window).subspan(2 * size, kNotified * kNotifiedSize);
        if (size_t nbad = itest::first_mismatch(seed + 4, 0, notified); nbad != SIZE_MAX) {
          std::fprintf(stderr, "rails peer: byte %zu of the notified puts differs\n", nbad);
          return 1;
        }
        uint64_t word = 0;
        std::memcpy(&word, window.data() + 2 * size + kNotified * kNotifiedSize, sizeof word);
        if (word != kAdds * kAdd) {
          std::fprintf(stderr, "rails peer: the word is %lu after %lu adds of %lu\n", static_cast<unsigned long>(word),
                       static_cast<unsigned long>(kAdds), static_cast<unsigned long>(kAdd));
          return 1;
        }
        std::vector<uint64_t> values;
        for (uint64_t i = 0; i < kNotified; ++i) {
          auto n = ep->wait_notification(timeout);
          if (!n) return fail("wait_notification", n.status());
          values.push_back(n->value);
        }
        std::sort(values.begin(), values.end());
        for (uint64_t i = 0; i < kNotified; ++i) {
          if (values[i] != 1000 + i) {
            std::fprintf(stderr, "rails peer: notification %lu is %lu\n", static_cast<unsigned long>(i),
                         static_cast<unsigned long>(values[i]));
            return 1;
          }
        }
        if (auto more = ep->poll_notification()) {
          std::fprintf(stderr, "rails peer: a notification more: %lu\n", static_cast<unsigned long>(more->value));
          return 1;
        }
      }
    }
    for (int k = 0; k < comebacks; ++k) {
      if (Status s = ep->recv(buffer, Tag{5}).wait(timeout); !s) return fail("recv after the comeback", s);
      if (size_t cbad = itest::first_mismatch(seed + 5 + static_cast<uint64_t>(k), 0, buffer); cbad != SIZE_MAX) {
        std::fprintf(stderr, "rails peer: byte %zu after comeback %d differs\n", cbad, k + 1);
        return 1;
      }
    }
  } else if (role == "connect") {
    auto connected = (*ctx)->connect(address, timeout);
    if (!connected) return fail("connect", connected.status());
    ep = *connected;
    if (idle_down) {
      auto region = (*ctx)->register_memory(buffer.data(), buffer.size(), Access::kRemoteWrite);
      if (!region) return fail("register_memory", region.status());
      const auto key = region->remote_key().serialize();
      if (Status s = ep->send(key, Tag{7}).wait(timeout); !s) return fail("send the key", s);
      if (Status s = ep->recv(answer, Tag{8}).wait(timeout); !s) return fail("recv the key's acknowledgement", s);
      const EndpointStats st = ep->stats();
      const std::string control_host = st.control_address.substr(0, st.control_address.rfind(':'));
      for (const RailStats& rail : st.rails) {
        if (rail.local_address == control_host) broken = rail.interface;
      }
      if (broken.empty() || std::system(("ip link set dev " + broken + " down").c_str()) != 0) {
        std::fprintf(stderr, "rails peer: cannot set the control stream's rail (%s) down\n", control_host.c_str());
        return 1;
      }
      std::printf("IDLE-DOWN %s\n", broken.c_str());
      std::fflush(stdout);
      // Through the handler, not waited for: a thread waiting for a notification makes
      // the endpoint await its peer, and the point is an endpoint with nothing of its own
      // to await. Bounded below the test's 60 s, so that its own message comes first.
      struct Arrived {
        std::promise<Notification> promise;
        std::atomic<bool> set{false};
      };
      auto arrived = std::make_shared<Arrived>();
      ep->set_notification_handler([arrived](const Notification& n) {
        if (!arrived->set.exchange(true)) arrived->promise.set_value(n);
      });
      std::future<Notification> future = arrived->promise.get_future();
      std::optional<Notification> note;
      if (future.wait_for(std::chrono::seconds(45)) == std::future_status::ready) note = future.get();
      if (!note)
        return fail("the idle side's notification",
                    ep->failed() ? ep->failure() : Status(StatusCode::kTimeout, "none within 45 s"));
      if (note->value != 6) {
        std::fprintf(stderr, "rails peer: the notification is %lu, not 6\n", static_cast<unsigned long>(note->value));
        return 1;
      }
      if (size_t bad = itest::first_mismatch(seed + 6, 0, buffer); bad != SIZE_MAX) {
        std::fprintf(stderr, "rails peer: byte %zu of the put into the idle side differs\n", bad);
        return 1;
      }
      print_rails(*ep);
      ep->close();
      return 0;
    }
    itest::fill_stream(seed, 0, buffer);
    if (dev != nullptr) {
      if (Status s = dev->write(message.data(), buffer.data(), size); !s) return fail("device write", s);
    }
    Request sent = ep->send(message, Tag{1});
    if (!break_source.empty() && break_op == "send" &&
        !break_rail_during(*ep, sent, break_source, break_how, &broken)) {
      ep->abort();  // nothing reads `buffer` after
      return 1;
    }
    if (Status s = sent.wait(timeout); !s) return fail("send", s);
    if (Status s = ep->recv(answer, Tag{2}).wait(timeout); !s) return fail("recv the answer", s);
    if (answer_size > 8) {
      const size_t bad = itest::first_mismatch(seed + 1, 0, answer);
      if (bad != SIZE_MAX) {
        std::fprintf(stderr, "rails peer: byte %zu of the answer differs\n", bad);
        return 1;
      }
    }
    if (rma) {
      std::array<std::byte, RemoteKey::kSerializedSize> key_bytes{};
      if (Status s = ep->recv(key_bytes, Tag{3}).wait(timeout); !s) return fail("recv the key", s);
      auto key = RemoteKey::deserialize(key_bytes);
      if (!key) return fail("deserialize the key", key.status());
      // --blocks: the buffer as a list of blocks, each at its own offset past `base`.
      auto items = [&](uint64_t base) {
        std::vector<TransferItem> list;
        for (uint64_t at = 0; at < buffer.size(); at += blocks) {
          list.push_back({std::span(buffer).subspan(at, std::min<uint64_t>(blocks, buffer.size() - at)), *key, base + at});
        }
        std::reverse(list.begin(), list.end());
        return list;
      };
      auto get_all = [&] { return blocks == 0 ? ep->get(buffer, *key, 0) : ep->get_batch(items(0)); };
      auto put_all = [&] { return blocks == 0 ? ep->put(buffer, *key, size) : ep->put_batch(items(size)); };
      std::fill(buffer.begin(), buffer.end(), std::byte{0});
      Request got = get_all();
      if (!break_source.empty() && break_op == "get" &&
          !break_rail_during(*ep, got, break_source, break_how, nullptr, get_all)) {
        ep->abort();  // the get in flight completes: nothing writes into `buffer` after
        return 1;
      }
      if (Status s = got.wait(timeout); !s) return fail("get", s);
      const size_t get_bad = itest::first_mismatch(seed + 2, 0, buffer);
      if (get_bad != SIZE_MAX) {
        std::fprintf(stderr, "rails peer: byte %zu of the get differs\n", get_bad);
        return 1;
      }
      itest::fill_stream(seed + 3, 0, buffer);
      Request put = put_all();
      std::vector<std::byte> notified(mixed ? kNotified * kNotifiedSize : 0);
      itest::fill_stream(seed + 4, 0, notified);
      std::vector<Request> others;
      std::vector<uint64_t> fetched(mixed ? kAdds : 0);
      // Giving up with operations in flight: abort first, which completes them, so that
      // nothing reads or writes `buffer`, `notified` or `fetched` once they are gone.
      auto give_up = [&](int code) {
        ep->abort();
        return code;
      };
      // The break comes first, while the big put is surely in flight (posting the others
      // first took long enough under ThreadSanitizer, beside another test, for the put to
      // finish before it); the others join it while the endpoint recovers.
      if (!break_source.empty() && break_op == "put" &&
          !break_rail_during(*ep, put, break_source, break_how, nullptr, put_all)) {
        return give_up(1);
      }
      if (mixed) {
        for (uint64_t i = 0; i < kNotified; ++i) {
          others.push_back(ep->put(std::span(notified).subspan(i * kNotifiedSize, kNotifiedSize), *key,
                                   2 * size + i * kNotifiedSize, PutOptions{.notify = 1000 + i}));
        }
        for (uint64_t i = 0; i < kAdds; ++i) {
          others.push_back(ep->fetch_add(&fetched[i], *key, 2 * size + kNotified * kNotifiedSize, kAdd));
        }
      }
      if (Status s = put.wait(timeout); !s) return give_up(fail("put", s));
      for (Request& r : others) {
        if (Status s = r.wait(timeout); !s) return give_up(fail("a notified put or fetch_add", s));
      }
      std::sort(fetched.begin(), fetched.end());
      for (uint64_t i = 0; i < fetched.size(); ++i) {
        if (fetched[i] != i * kAdd) {
          std::fprintf(stderr, "rails peer: fetch_add %lu fetched %lu\n", static_cast<unsigned long>(i),
                       static_cast<unsigned long>(fetched[i]));
          return 1;
        }
      }
      const std::byte done[8] = {};
      if (Status s = ep->send(done, Tag{4}).wait(timeout); !s) return fail("send done", s);
    }
    for (int k = 0; k < comebacks; ++k) {
      // The rail is down: its reason says how often it is tried.
      std::printf("DOWN %s\n", rail_reason(*ep, broken).c_str());
      if (broken.empty() || std::system(("ip link set dev " + broken + " up").c_str()) != 0) {
        std::fprintf(stderr, "rails peer: cannot set %s up again\n", broken.c_str());
        return 1;
      }
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      // The rejoin has no request to wait on: its counter is polled, with a deadline.
      while (ep->stats().streams_rejoined <= static_cast<uint32_t>(k) && !ep->failed() &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      const uint64_t before = rail_bytes_sent(*ep, broken);
      itest::fill_stream(seed + 5 + static_cast<uint64_t>(k), 0, buffer);
      Request again = ep->send(buffer, Tag{5});
      // Before the last comeback the rail goes down once more, under this send.
      if (k + 1 < comebacks && !break_rail_during(*ep, again, break_source, "down", &broken)) return 1;
      if (Status s = again.wait(timeout); !s) return fail("send after the comeback", s);
      if (k + 1 == comebacks) {
        std::printf("COMEBACK %u %lu %lu\n", ep->stats().streams_rejoined, static_cast<unsigned long>(before),
                    static_cast<unsigned long>(rail_bytes_sent(*ep, broken)));
      }
    }
  } else {
    std::fprintf(stderr, "rails peer: --role=listen or --role=connect\n");
    return 2;
  }
  print_rails(*ep);
  ep->close();
  return 0;
}
