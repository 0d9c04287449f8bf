// support/peer_program.h — what the child programs of the integration tests share
// (remora_test_peer, remora_rma_peer, remora_rma_target): fatal errors that name the
// program, --name=value flags, and Status formatting.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "remora/status.h"

namespace remora::itest {

/// Prints "<program>[pid]: why" to stderr and exits 1.
[[noreturn]] inline void die(const std::string& why) {
  std::fprintf(stderr, "%s[%d]: %s\n", program_invocation_short_name, static_cast<int>(getpid()), why.c_str());
  std::exit(1);
}

/// Dies with `what: error` unless `error` is empty.
inline void check(const std::string& error, const std::string& what) {
  if (!error.empty()) die(what + ": " + error);
}

inline std::string describe(const Status& s) { return std::string(to_string(s.code())) + " (" + s.message() + ")"; }

/// Command-line flags, all of the form --name=value; anything else is fatal.
class Flags {
 public:
  Flags(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto eq = a.find('=');
      if (a.rfind("--", 0) != 0 || eq == std::string::npos) die("flags are --name=value: " + a);
      values_[a.substr(2, eq - 2)] = a.substr(eq + 1);
    }
  }
  bool has(const std::string& k) const { return values_.contains(k); }
  std::string str(const std::string& k, const std::string& def = {}) const {
    auto it = values_.find(k);
    return it == values_.end() ? def : it->second;
  }
  /// A number in any base strtoull accepts (0x.. for hex); a malformed one is fatal.
  uint64_t num(const std::string& k, uint64_t def) const {
    auto it = values_.find(k);
    if (it == values_.end()) return def;
    char* end = nullptr;
    const uint64_t v = std::strtoull(it->second.c_str(), &end, 0);
    if (end == it->second.c_str() || *end != '\0') die("--" + k + " wants a number, got " + it->second);
    return v;
  }

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace remora::itest
