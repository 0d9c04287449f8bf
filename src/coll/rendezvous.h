// coll/rendezvous.h — where the ranks of a job find each other after init: the listener
// each rank opened at init, kept open for the job's life, and the thread that takes
// every connection arriving there.
//
// A connection to a rank opens with one message from the dialer, tagged kOpeningTag:
//   - a MESH hello, [magic u32 "MESH"][rank u32][epoch u64]: the dialer wants the
//     endpoint between the two ranks in the world of that epoch (World::offer decides,
//     here on this thread, whichever application thread of this rank is busy or idle),
//     and is answered on kMeshAnswerTag with [u32 1: accepted, 0: refused];
//   - a SHRK hello (coll/shrink.cc): queued for this rank's shrink, which answers it;
//   - anything else, or nothing within a grace period (a client that is no rank): the
//     connection is dropped. (A probe of failed_ranks never gets here: the listener
//     answers it, docs/protocol.md.)
// So a rank answers a peer that connects to it lazily at any time, never more than
// one thread takes connections from the listener, and a shrink and the world's lazy
// connections share it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/status.h"

namespace remora::coll {

using Clock = std::chrono::steady_clock;

class World;

/// Tags of the messages that open an endpoint of a communicator's mesh. Their
/// communicator id (2^23 − 1, bits 40..62) is never handed out, and bit 63 (collective
/// traffic) is clear, so they meet no other traffic.
inline constexpr uint64_t kOpeningTagBase = uint64_t{(1u << 23) - 1} << 40;
inline constexpr Tag kOpeningTag = static_cast<Tag>(kOpeningTagBase | 0);       ///< the dialer's hello
inline constexpr Tag kShrinkAnswerTag = static_cast<Tag>(kOpeningTagBase | 1);  ///< a shrink's hello back
inline constexpr Tag kMeshAnswerTag = static_cast<Tag>(kOpeningTagBase | 2);    ///< a mesh hello's yes or no

inline constexpr uint32_t kMeshMagic = 0x4853454D;    // "MESH"
inline constexpr uint32_t kShrinkMagic = 0x4B524853;  // "SHRK"
inline constexpr size_t kMeshHelloBytes = 16;
/// The largest opening message a rank of a job of `size` ranks sends: a shrink's hello
/// keeping every rank (coll/shrink.cc: a 32-byte header, then a u32 per rank).
constexpr size_t max_opening_bytes(int size) { return 32 + 4 * static_cast<size_t>(size); }

class Rendezvous : public std::enable_shared_from_this<Rendezvous> {
 public:
  /// A connection whose opening message was a shrink's hello.
  struct Arrival {
    std::shared_ptr<Endpoint> endpoint;
    std::vector<std::byte> hello;
  };

  /// Takes `listener` over and starts the thread that serves it. `max_hello`: the
  /// largest opening message a rank of this job sends (a shrink's hello of every rank).
  /// `advertised`: the "host:port" other ranks reach it at (empty: the listener's own).
  static std::shared_ptr<Rendezvous> start(std::unique_ptr<Listener> listener, size_t max_hello,
                                           std::string advertised = {});
  /// A listener for a rank whose address is `host` (a name or address, IPv6 with or
  /// without brackets), started as above. With rails (REMORA_RAILS) it listens on the
  /// wildcard address of host's family, so that it advertises every rail to the ranks
  /// that connect (a listener bound to one address offers only that rail), and is
  /// reached at host.
  static Result<std::shared_ptr<Rendezvous>> listen(Context& ctx, const std::string& host, size_t max_hello);
  /// Stops the thread and closes the listener.
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  /// "host:port" of the listener.
  std::string address() const;
  /// The world whose MESH hellos of `epoch` this rank answers (one at a time: init's).
  void serve(std::weak_ptr<World> world, uint64_t epoch);
  /// The next shrink hello that arrived (in arrival order), or kTimeout at `deadline`.
  Result<Arrival> next_shrink_hello(Clock::time_point deadline);

 private:
  /// What the thread works on; it holds a reference of its own, so that the last World
  /// (which holds this Rendezvous) may let go of it on the thread itself.
  struct State;
  explicit Rendezvous(std::shared_ptr<State> state);

  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace remora::coll
