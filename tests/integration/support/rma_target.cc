#include "support/rma_target.h"

#include <unistd.h>

#include <sstream>

namespace remora::itest::rma_target {
namespace {

constexpr std::chrono::seconds kReplyTimeout{30};

std::optional<uint64_t> parse_u64(const std::string& s, int base = 10) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const uint64_t v = std::strtoull(s.c_str(), &end, base);
  if (*end != '\0') return std::nullopt;
  return v;
}

}  // namespace

std::optional<Access> parse_rights(std::string_view letters) {
  Access a = Access::kNone;
  if (letters == "-") return a;
  if (letters.empty()) return std::nullopt;
  for (char c : letters) {
    switch (c) {
      case 'r': a = a | Access::kRemoteRead; break;
      case 'w': a = a | Access::kRemoteWrite; break;
      case 'a': a = a | Access::kRemoteAtomic; break;
      default: return std::nullopt;
    }
  }
  return a;
}

std::string rights_letters(Access access) {
  const auto bits = static_cast<uint32_t>(access);
  std::string out;
  if ((bits & static_cast<uint32_t>(Access::kRemoteRead)) != 0) out += 'r';
  if ((bits & static_cast<uint32_t>(Access::kRemoteWrite)) != 0) out += 'w';
  if ((bits & static_cast<uint32_t>(Access::kRemoteAtomic)) != 0) out += 'a';
  return out.empty() ? "-" : out;
}

std::unique_ptr<Target> Target::spawn(const std::string& path, const Options& options, std::string* error) {
  std::vector<std::string> argv = {path, "--rights=" + options.rights, "--size=" + std::to_string(options.size),
                                   "--guard=" + std::to_string(options.guard),
                                   "--parent-pid=" + std::to_string(getpid())};
  if (options.rma_window) argv.push_back("--rma-window=" + std::to_string(*options.rma_window));
  if (options.eager_limit) argv.push_back("--eager-limit=" + std::to_string(*options.eager_limit));
  if (options.pool) argv.push_back("--pool=1");
  auto t = std::unique_ptr<Target>(new Target());
  t->process_ = std::make_unique<Process>(Process::Options{.argv = argv, .env = options.env, .capture_stderr = false,
                                                           .pipe_stdin = true});
  if (!t->process_->ok()) {
    *error = t->process_->error();
    return nullptr;
  }
  auto w = t->words("", "READY", 5);
  if (!w) {
    *error = t->error_;
    return nullptr;
  }
  const auto port = parse_u64((*w)[1]);
  const auto key = raw::key_from_hex((*w)[2]);
  const auto size = parse_u64((*w)[3]);
  const auto guard = parse_u64((*w)[4]);
  if (!port || !key || !size || !guard) {
    *error = "malformed READY line";
    return nullptr;
  }
  t->port_ = static_cast<uint16_t>(*port);
  t->key_ = *key;
  t->size_ = *size;
  t->guard_ = *guard;
  return t;
}

std::optional<std::string> Target::command(const std::string& line) {
  if (!process_->write_line(line)) {
    error_ = "could not write '" + line + "' to the target (it exited?)";
    return std::nullopt;
  }
  auto reply = process_->read_line(kReplyTimeout);
  if (!reply) {
    error_ = "no reply to '" + line + "': " + (process_->timed_out() ? "timed out" : "EOF (the target died?)");
    return std::nullopt;
  }
  return reply;
}

std::optional<std::vector<std::string>> Target::words(const std::string& line, const std::string& expect,
                                                      size_t min_words) {
  std::optional<std::string> reply;
  if (line.empty()) {
    reply = process_->read_line(kReplyTimeout);
    if (!reply) {
      error_ = std::string("no READY line: ") + (process_->timed_out() ? "timed out" : "EOF");
      return std::nullopt;
    }
  } else {
    reply = command(line);
    if (!reply) return std::nullopt;
  }
  std::istringstream in(*reply);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  if (out.size() < min_words || out[0] != expect) {
    error_ = "'" + line + "' got '" + *reply + "'";
    return std::nullopt;
  }
  return out;
}

std::optional<Sums> Target::sums() {
  auto w = words("sum", "SUM", 4);
  if (!w) return std::nullopt;
  const auto r = parse_u64((*w)[1], 16), b = parse_u64((*w)[2], 16), a = parse_u64((*w)[3], 16);
  if (!r || !b || !a) {
    error_ = "malformed SUM line";
    return std::nullopt;
  }
  return Sums{*r, *b, *a};
}

bool Target::fill(uint64_t seed) { return words("fill " + std::to_string(seed), "OK", 1).has_value(); }

bool Target::dereg() { return words("dereg", "OK", 1).has_value(); }

std::optional<raw::KeyBytes> Target::reg(const std::string& rights) {
  auto w = words("reg " + rights, "KEY", 2);
  if (!w) return std::nullopt;
  auto k = raw::key_from_hex((*w)[1]);
  if (!k) {
    error_ = "malformed KEY line";
    return std::nullopt;
  }
  key_ = *k;
  return k;
}

std::optional<raw::KeyBytes> Target::window_key(uint64_t offset, uint64_t length, const std::string& rights) {
  auto w = words("key " + std::to_string(offset) + " " + std::to_string(length) + " " + rights, "KEY", 2);
  if (!w) return std::nullopt;
  return raw::key_from_hex((*w)[1]);
}

std::optional<std::pair<uint64_t, uint64_t>> Target::rss_kb() {
  auto w = words("rss", "RSS", 3);
  if (!w) return std::nullopt;
  const auto rss = parse_u64((*w)[1]), hwm = parse_u64((*w)[2]);
  if (!rss || !hwm) {
    error_ = "malformed RSS line";
    return std::nullopt;
  }
  return std::pair{*rss, *hwm};
}

std::optional<std::vector<Note>> Target::notes() {
  auto w = words("notes", "NOTES", 2);
  if (!w) return std::nullopt;
  std::vector<Note> out;
  for (size_t i = 2; i < w->size(); ++i) {
    Note n;
    unsigned long long v = 0, off = 0, len = 0;
    unsigned region = 0;
    if (std::sscanf((*w)[i].c_str(), "%llu:%u:%llu:%llu", &v, &region, &off, &len) != 4) {
      error_ = "malformed note " + (*w)[i];
      return std::nullopt;
    }
    n.value = v;
    n.region = region;
    n.offset = off;
    n.length = len;
    out.push_back(n);
  }
  if (out.size() != parse_u64((*w)[1]).value_or(~0ull)) {
    error_ = "NOTES count does not match its list";
    return std::nullopt;
  }
  return out;
}

std::optional<std::pair<uint64_t, uint64_t>> Target::endpoints() {
  auto w = words("eps", "EPS", 3);
  if (!w) return std::nullopt;
  const auto accepted = parse_u64((*w)[1]), failed = parse_u64((*w)[2]);
  if (!accepted || !failed) return std::nullopt;
  return std::pair{*accepted, *failed};
}

bool Target::await_endpoints(uint64_t n) { return words("await " + std::to_string(n), "EPS", 3).has_value(); }

bool Target::quit() {
  if (!words("quit", "BYE", 1)) return false;
  auto st = process_->wait(std::chrono::seconds(30));
  if (!st) {
    error_ = "did not exit after quit";
    process_->kill_and_reap();
    return false;
  }
  if (!Process::exited_ok(*st)) {
    error_ = Process::describe(*st);
    return false;
  }
  return true;
}

bool Target::alive() {
  auto st = process_->wait(std::chrono::milliseconds(0));
  if (st) error_ = "the target " + Process::describe(*st);
  return !st.has_value();
}

}  // namespace remora::itest::rma_target
