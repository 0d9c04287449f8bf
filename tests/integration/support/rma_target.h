// rma_target.h — the test side of remora_rma_target (rma_target_main.cc): what both
// agree on (guard and fill seeds, default sizes, rights letters) and a driver that
// spawns the target, reads its READY line and sends it stdin commands.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "remora/types.h"
#include "support/process.h"
#include "support/raw_rma.h"

namespace remora::itest::rma_target {

/// Streams of test_data.h's fill_stream the target fills its memory with.
inline constexpr uint64_t kGuardBeforeSeed = 0xB0F0'0001;
inline constexpr uint64_t kGuardAfterSeed = 0xAF7E'0002;
inline constexpr uint64_t kInitialSeed = 1;
inline constexpr size_t kDefaultSize = 1 << 20;
inline constexpr size_t kDefaultGuard = 64 << 10;

/// "rwa" letters (remote read, write, atomic; any subset, "-" for none) <-> Access.
std::optional<Access> parse_rights(std::string_view letters);
std::string rights_letters(Access access);

/// XXH3 of the registered region and of the guard zones around it.
struct Sums {
  uint64_t region = 0, before = 0, after = 0;
  friend bool operator==(const Sums&, const Sums&) = default;
};

/// A notification as the target reports it.
struct Note {
  uint64_t value = 0;
  uint32_t region = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  friend bool operator==(const Note&, const Note&) = default;
};

/// A running remora_rma_target. Every method is bounded by a deadline; on failure it
/// returns nullopt/false and says why in last_error().
class Target {
 public:
  struct Options {
    std::string rights = "rwa";
    size_t size = kDefaultSize;
    size_t guard = kDefaultGuard;
    std::optional<uint32_t> rma_window = std::nullopt;
    std::optional<size_t> eager_limit = std::nullopt;
    std::vector<std::string> env = {};  ///< e.g. "REMORA_MAX_UNEXPECTED=4"
    /// Three adjacent buffers of one pool instead of a mapping (--pool; size == guard).
    bool pool = false;
  };

  /// Spawns `path` and waits for READY; null (and `error`) on failure.
  static std::unique_ptr<Target> spawn(const std::string& path, const Options& options, std::string* error);

  uint16_t port() const { return port_; }
  /// The key printed at startup (or by the latest reg()).
  const raw::KeyBytes& key() const { return key_; }
  size_t size() const { return size_; }
  size_t guard() const { return guard_; }
  const std::string& last_error() const { return error_; }
  Process& process() { return *process_; }

  /// One command, one reply line.
  std::optional<std::string> command(const std::string& line);
  std::optional<Sums> sums();
  bool fill(uint64_t seed);
  bool dereg();
  /// Registers again with `rights`; the new key becomes key().
  std::optional<raw::KeyBytes> reg(const std::string& rights);
  std::optional<raw::KeyBytes> window_key(uint64_t offset, uint64_t length, const std::string& rights);
  /// {VmRSS, VmHWM} in kB.
  std::optional<std::pair<uint64_t, uint64_t>> rss_kb();
  std::optional<std::vector<Note>> notes();
  /// {accepted, failed} endpoints so far.
  std::optional<std::pair<uint64_t, uint64_t>> endpoints();
  /// Waits until the target accepted `n` endpoints (call it after each raw handshake:
  /// `notes` only sees endpoints the target's accept() returned).
  bool await_endpoints(uint64_t n);
  /// Asks it to exit and reaps it; true if it said BYE and exited 0.
  bool quit();
  /// Still running (not exited or killed)?
  bool alive();

 private:
  std::optional<std::vector<std::string>> words(const std::string& line, const std::string& expect, size_t min_words);

  std::unique_ptr<Process> process_;
  uint16_t port_ = 0;
  raw::KeyBytes key_{};
  size_t size_ = 0;
  size_t guard_ = 0;
  std::string error_;
};

}  // namespace remora::itest::rma_target
