// tests/faults/main.cc — `remora_faults`: the fault matrix (matrix.cc) by default, or one of
// its processes (`remora_faults node …`, `remora_faults delay …`), which the matrix starts
// by running this same binary inside its namespaces.
#include <dirent.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "faults.h"

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer's runtime (GCC 12 ships no header declaring it).
extern "C" void __sanitizer_purge_allocator();
#endif

namespace remora::faults {

int count_fds(int pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

void settle_allocator() {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_purge_allocator();
#endif
}

long rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

std::string to_hex(const std::byte* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[std::to_integer<unsigned>(data[i]) >> 4];
    out += digits[std::to_integer<unsigned>(data[i]) & 15];
  }
  return out;
}

bool from_hex(const std::string& hex, std::vector<std::byte>* out) {
  if (hex.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<std::byte>(hi * 16 + lo));
  }
  return true;
}

}  // namespace remora::faults

int main(int argc, char** argv) {
  using namespace remora::faults;
  if (argc > 1 && std::strcmp(argv[1], "node") == 0) return node_main(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "delay") == 0) return delay_main(argc - 1, argv + 1);
  return matrix_main(argc, argv);
}
