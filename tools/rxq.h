// tools/rxq.h — `remora rxq`, the receive data-path manager for devmem TCP:
//   rxq check    what `serve` would check, and every reason it would refuse (exit 0 / 3)
//   rxq serve    sets header split, reserves the last RX queues away from RSS, binds the
//                dmabuf to them (bind-rx, kept open), and serves applications on a Unix
//                socket: each asks for a flow, gets an ntuple rule steering it to a reserved
//                queue and the dmabuf's fd; its rules go when it disconnects or dies. On
//                SIGINT/SIGTERM everything is undone in reverse order (the restore journal).
//   rxq undo     replays the journal a killed `serve` left behind
//   rxq request  a client: asks `serve` for a flow and prints the answer (for operators and tests)
// The protocol and the journal live in src/zerocopy (rxq_protocol.h, rxq_client.h,
// rxq_journal.h); docs/device-memory.md describes them and what has run where.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace remora::tools {

/// `remora rxq`'s exit codes.
enum RxqExit : int {
  kRxqOk = 0,
  kRxqError = 1,    ///< something failed (the message says what); changes were undone
  kRxqUsage = 2,
  kRxqRefused = 3,  ///< the interface cannot: every reason printed, nothing changed
};

/// The `rxq` subcommand and its own subcommands, added to `parent`.
class RxqCli {
 public:
  explicit RxqCli(CLI::App* parent);
  /// Whether `remora rxq ...` was given.
  bool given() const;
  /// Runs the subcommand that was given; its exit code.
  int run();

 private:
  CLI::App* rxq_ = nullptr;
  CLI::App* check_ = nullptr;
  CLI::App* serve_ = nullptr;
  CLI::App* undo_ = nullptr;
  CLI::App* request_ = nullptr;
  std::string ifname_;
  uint32_t queues_ = 1;
  uint32_t client_queues_ = 0;
  std::string socket_;
  std::string journal_;
  uint64_t dmabuf_size_ = 64ull << 20;
  bool standin_ = false;
  uint16_t port_ = 0;
  uint16_t src_port_ = 0;
  std::string dst_ip_;
  std::string src_ip_;
  bool hold_ = false;
};

}  // namespace remora::tools
