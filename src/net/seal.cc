// net/seal.cc — the sealing layer of a socket (see seal.h): the AEAD records, the
// per-socket state that sends and opens them, and the table that finds it by descriptor.
#include "net/seal.h"

#include <sodium.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/little_endian.h"

namespace remora::net {

// Declared in io.cc: the plain system calls under the layer.
IoResult raw_send_some(int fd, const void* data, size_t len) noexcept;
IoResult raw_recv_some(int fd, void* data, size_t len) noexcept;

namespace {

constexpr std::string_view kRekeyLabel = "remora seal v1 next key";
/// Plaintext sealed per send before the records go to the kernel.
constexpr size_t kSendBatch = 4 * kSealRecordMax;
/// Ciphertext read from the kernel per recv.
constexpr size_t kRecvBuffer = 4 * (kSealHeaderSize + kSealRecordMax + kSealTagSize);
static_assert(kSealTagSize == crypto_aead_aes256gcm_ABYTES && kSealTagSize == crypto_aead_chacha20poly1305_ietf_ABYTES);
static_assert(kSealKeySize == crypto_aead_aes256gcm_KEYBYTES &&
              kSealKeySize == crypto_aead_chacha20poly1305_ietf_KEYBYTES);
static_assert(crypto_aead_aes256gcm_NPUBBYTES == 12 && crypto_aead_chacha20poly1305_ietf_NPUBBYTES == 12);

const unsigned char* uc(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }
unsigned char* uc(std::byte* p) { return reinterpret_cast<unsigned char*>(p); }

void ensure_sodium() noexcept {
  static const int once = sodium_init();
  (void)once;
}

/// One direction's cipher state: its key (replaced every kSealRecordsPerKey records)
/// and its record counter, which is the nonce.
class Direction {
 public:
  Direction(SealCipher cipher, const SealKey& key) : cipher_(cipher), key_(key) { expand(); }
  ~Direction() {
    sodium_memzero(key_.data(), key_.size());
    sodium_memzero(&aes_, sizeof aes_);
  }
  Direction(const Direction&) = delete;
  Direction& operator=(const Direction&) = delete;

  /// Seals `plain` as the next record into `out` (kSealHeaderSize + size + kSealTagSize bytes).
  void seal(std::span<const std::byte> plain, std::byte* out) {
    next_key_if_due();
    core::store_u32(out, static_cast<uint32_t>(plain.size()));
    const auto nonce = nonce_of(counter_++);
    std::byte* c = out + kSealHeaderSize;
    std::byte* tag = c + plain.size();
    if (cipher_ == SealCipher::kAes256Gcm) {
      crypto_aead_aes256gcm_encrypt_detached_afternm(uc(c), uc(tag), nullptr, uc(plain.data()), plain.size(), uc(out),
                                                     kSealHeaderSize, nullptr, nonce.data(), &aes_);
    } else {
      crypto_aead_chacha20poly1305_ietf_encrypt_detached(uc(c), uc(tag), nullptr, uc(plain.data()), plain.size(),
                                                         uc(out), kSealHeaderSize, nullptr, nonce.data(),
                                                         uc(key_.data()));
    }
  }

  /// Opens the next record, whole at `record` with `len` plaintext bytes, into `plain`.
  /// false: it failed authentication (`plain` then holds nothing to use).
  bool open(const std::byte* record, size_t len, std::byte* plain) {
    next_key_if_due();
    const auto nonce = nonce_of(counter_++);
    const std::byte* c = record + kSealHeaderSize;
    const std::byte* tag = c + len;
    if (cipher_ == SealCipher::kAes256Gcm) {
      return crypto_aead_aes256gcm_decrypt_detached_afternm(uc(plain), nullptr, uc(c), len, uc(tag), uc(record),
                                                            kSealHeaderSize, nonce.data(), &aes_) == 0;
    }
    return crypto_aead_chacha20poly1305_ietf_decrypt_detached(uc(plain), nullptr, uc(c), len, uc(tag), uc(record),
                                                              kSealHeaderSize, nonce.data(), uc(key_.data())) == 0;
  }

  /// For the record tests: the next record is number `counter` (below kSealRecordsPerKey).
  void start_at(uint64_t counter) noexcept { counter_ = counter; }

  uint64_t records() const noexcept { return counter_; }
  uint64_t keys_replaced() const noexcept { return replaced_; }

 private:
  static std::array<unsigned char, 12> nonce_of(uint64_t counter) {
    std::array<unsigned char, 12> n{};
    core::store_u64(reinterpret_cast<std::byte*>(n.data()), counter);
    return n;
  }

  void expand() {
    if (cipher_ == SealCipher::kAes256Gcm) crypto_aead_aes256gcm_beforenm(&aes_, uc(key_.data()));
  }

  void next_key_if_due() {
    if (counter_ == 0 || counter_ % kSealRecordsPerKey != 0) return;
    SealKey next{};
    crypto_generichash(uc(next.data()), next.size(), reinterpret_cast<const unsigned char*>(kRekeyLabel.data()),
                       kRekeyLabel.size(), uc(key_.data()), key_.size());
    key_ = next;
    sodium_memzero(next.data(), next.size());
    expand();
    ++replaced_;
  }

  SealCipher cipher_;
  SealKey key_;
  crypto_aead_aes256gcm_state aes_{};
  uint64_t counter_ = 0;
  uint64_t replaced_ = 0;
};

IoResult failure(int err) { return {.kind = IoResult::Kind::kError, .err = err}; }
IoResult would_block() { return {.kind = IoResult::Kind::kWouldBlock}; }
IoResult moved(size_t n) { return {.kind = IoResult::Kind::kBytes, .bytes = n}; }

/// One sealed socket. The send side and the receive side share nothing mutable, so a
/// thread may send while another receives, as on a plain socket.
class SealedSocket {
 public:
  explicit SealedSocket(const SealKeys& keys)
      : cipher_(keys.cipher), tx_(keys.cipher, keys.send), rx_(keys.cipher, keys.recv) {
    out_.reserve(kSendBatch + (kSendBatch / kSealRecordMax) * (kSealHeaderSize + kSealTagSize));
    in_.resize(kRecvBuffer);
    plain_.resize(kSealRecordMax);
  }

  SealCipher cipher() const noexcept { return cipher_; }

  IoResult send(int fd, const std::byte* data, size_t len) {
    if (len == 0) return moved(0);
    if (tx_error_ != 0) return failure(tx_error_);
    if (credit_ > 0) {  // sealed and sent, not yet reported: offered again in fewer bytes
      const size_t n = std::min(len, credit_);
      credit_ -= n;
      return moved(n);
    }
    size_t reported = 0;
    for (;;) {
      while (out_off_ < out_.size()) {
        const IoResult r = raw_send_some(fd, out_.data() + out_off_, out_.size() - out_off_);
        if (r.would_block()) return reported > 0 ? moved(reported) : r;
        if (!r.moved()) {
          tx_error_ = r.err;
          return r;
        }
        out_off_ += r.bytes;
      }
      if (out_plain_ > 0) {
        // The records went out whole: the bytes they hold are the first the caller
        // offers (it offers again what it was not told is sent).
        const size_t n = std::min(out_plain_, len - reported);
        reported += n;
        credit_ = out_plain_ - n;
        out_plain_ = 0;
        if (credit_ > 0) return moved(reported);
      }
      out_.clear();
      out_off_ = 0;
      if (reported == len) return moved(reported);
      seal_batch(data + reported, len - reported);
    }
  }

  IoResult recv(int fd, std::byte* dst, size_t len) {
    if (len == 0) return moved(0);
    size_t got = 0;
    bool drained = false;
    for (;;) {
      if (plain_off_ < plain_end_) {
        const size_t n = std::min(len - got, plain_end_ - plain_off_);
        std::memcpy(dst + got, plain_.data() + plain_off_, n);
        plain_off_ += n;
        got += n;
        if (got == len) return moved(got);
        continue;
      }
      if (rx_error_ != 0) return failure(rx_error_);
      const size_t have = in_end_ - in_begin_;
      if (have >= kSealHeaderSize) {
        const uint32_t plen = core::load_u32(in_.data() + in_begin_);
        if (plen == 0 || plen > kSealRecordMax) {
          rx_error_ = EBADMSG;  // a length no sender writes: tampered
          continue;
        }
        const size_t whole = kSealHeaderSize + plen + kSealTagSize;
        if (have >= whole) {
          if (!rx_.open(in_.data() + in_begin_, plen, plain_.data())) {
            plain_off_ = plain_end_ = 0;
            rx_error_ = EBADMSG;
            continue;
          }
          ++opened_;
          in_begin_ += whole;
          plain_off_ = 0;
          plain_end_ = plen;
          continue;
        }
      }
      if (eof_) {
        if (have > 0) {
          rx_error_ = EBADMSG;  // cut short: the stream ended inside a record
          continue;
        }
        return got > 0 ? moved(got) : IoResult{.kind = IoResult::Kind::kEof};
      }
      // A read this call made came back short: the kernel has no more now.
      if (drained) return got > 0 ? moved(got) : would_block();
      if (in_begin_ > 0) {
        std::memmove(in_.data(), in_.data() + in_begin_, have);
        in_begin_ = 0;
        in_end_ = have;
      }
      const size_t space = in_.size() - in_end_;
      const IoResult r = raw_recv_some(fd, in_.data() + in_end_, space);
      if (r.would_block()) return got > 0 ? moved(got) : r;
      if (r.eof()) {
        eof_ = true;
        continue;
      }
      if (!r.moved()) return r;
      in_end_ += r.bytes;
      drained = r.bytes < space;
    }
  }

  SealCounters counters() const noexcept {
    return {.records_sealed = tx_.records(),
            .records_opened = opened_,
            .keys_replaced = tx_.keys_replaced() + rx_.keys_replaced()};
  }

 private:
  void seal_batch(const std::byte* data, size_t len) {
    len = std::min(len, kSendBatch);
    size_t at = 0;
    for (size_t done = 0; done < len;) {
      const size_t n = std::min(len - done, kSealRecordMax);
      out_.resize(at + kSealHeaderSize + n + kSealTagSize);
      tx_.seal({data + done, n}, out_.data() + at);
      at = out_.size();
      done += n;
    }
    out_off_ = 0;
    out_plain_ = len;
  }

  // Send side.
  SealCipher cipher_;
  Direction tx_;
  std::vector<std::byte> out_;  // sealed records not yet wholly in the kernel
  size_t out_off_ = 0;
  size_t out_plain_ = 0;  // plaintext bytes the records in out_ hold
  size_t credit_ = 0;     // sent plaintext bytes not yet reported
  int tx_error_ = 0;
  // Receive side.
  Direction rx_;
  std::vector<std::byte> in_;  // ciphertext read, [in_begin_, in_end_) not yet opened
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  std::vector<std::byte> plain_;  // the last record opened, [plain_off_, plain_end_) not yet delivered
  size_t plain_off_ = 0;
  size_t plain_end_ = 0;
  uint64_t opened_ = 0;
  bool eof_ = false;
  int rx_error_ = 0;
};

// The table: descriptor → layer, in pages made on first use (never freed), read
// without a lock. Attach and detach take the mutex.
constexpr size_t kPageSize = 1024;
constexpr size_t kPages = 1024;
using Page = std::array<std::atomic<SealedSocket*>, kPageSize>;
std::array<std::atomic<Page*>, kPages> g_pages{};
std::atomic<size_t> g_sealed{0};
std::mutex g_mutex;

SealedSocket* find(int fd) noexcept {
  if (g_sealed.load(std::memory_order_acquire) == 0 || fd < 0) return nullptr;
  const auto i = static_cast<size_t>(fd);
  if (i >= kPageSize * kPages) return nullptr;
  Page* page = g_pages[i / kPageSize].load(std::memory_order_acquire);
  return page == nullptr ? nullptr : (*page)[i % kPageSize].load(std::memory_order_acquire);
}

}  // namespace

std::string_view cipher_name(SealCipher cipher) noexcept {
  return cipher == SealCipher::kAes256Gcm ? "aes256gcm" : "chacha20poly1305";
}

bool aes256gcm_available() noexcept {
  ensure_sodium();
  return crypto_aead_aes256gcm_is_available() == 1;
}

Status seal_socket(int fd, const SealKeys& keys) {
  if (fd < 0) return Status(StatusCode::kInvalidArgument, "seal_socket: no socket");
  if (static_cast<size_t>(fd) >= kPageSize * kPages) {
    return Status(StatusCode::kNoResource, "seal_socket: descriptor " + std::to_string(fd) +
                                               " beyond the sealing layer's table (1048576 descriptors)");
  }
  ensure_sodium();
  if (keys.cipher == SealCipher::kAes256Gcm && crypto_aead_aes256gcm_is_available() != 1) {
    return Status(StatusCode::kUnsupported,
                  "AES-256-GCM: this CPU lacks the AES and CLMUL instructions libsodium needs");
  }
  auto sealed = std::make_unique<SealedSocket>(keys);
  std::lock_guard lock(g_mutex);
  const auto i = static_cast<size_t>(fd);
  Page* page = g_pages[i / kPageSize].load(std::memory_order_acquire);
  if (page == nullptr) {
    page = new Page{};  // lives as long as the process: readers hold no lock
    g_pages[i / kPageSize].store(page, std::memory_order_release);
  }
  if ((*page)[i % kPageSize].load(std::memory_order_acquire) != nullptr) {
    return Status(StatusCode::kInvalidArgument, "seal_socket: descriptor " + std::to_string(fd) + " is sealed already");
  }
  (*page)[i % kPageSize].store(sealed.release(), std::memory_order_release);
  g_sealed.fetch_add(1, std::memory_order_acq_rel);
  return Status::ok();
}

void unseal_socket(int fd) noexcept {
  if (find(fd) == nullptr) return;
  std::lock_guard lock(g_mutex);
  const auto i = static_cast<size_t>(fd);
  Page* page = g_pages[i / kPageSize].load(std::memory_order_acquire);
  SealedSocket* sealed = (*page)[i % kPageSize].exchange(nullptr, std::memory_order_acq_rel);
  if (sealed == nullptr) return;
  g_sealed.fetch_sub(1, std::memory_order_acq_rel);
  delete sealed;
}

bool is_sealed(int fd) noexcept { return find(fd) != nullptr; }

std::optional<SealCipher> sealed_cipher(int fd) noexcept {
  SealedSocket* s = find(fd);
  return s == nullptr ? std::nullopt : std::optional<SealCipher>(s->cipher());
}

SealCounters seal_counters(int fd) noexcept {
  SealedSocket* s = find(fd);
  return s == nullptr ? SealCounters{} : s->counters();
}

bool sealed_send(int fd, const void* data, size_t len, IoResult* out) noexcept {
  SealedSocket* s = find(fd);
  if (s == nullptr) return false;
  *out = s->send(fd, static_cast<const std::byte*>(data), len);
  return true;
}

bool sealed_recv(int fd, void* data, size_t len, IoResult* out) noexcept {
  SealedSocket* s = find(fd);
  if (s == nullptr) return false;
  *out = s->recv(fd, static_cast<std::byte*>(data), len);
  return true;
}

std::vector<std::byte> seal_record(SealCipher cipher, const SealKey& key, uint64_t counter,
                                   std::span<const std::byte> plaintext) {
  ensure_sodium();
  Direction d(cipher, key);
  d.start_at(counter % kSealRecordsPerKey);
  std::vector<std::byte> out(kSealHeaderSize + plaintext.size() + kSealTagSize);
  d.seal(plaintext, out.data());
  return out;
}

Result<std::vector<std::byte>> open_record(SealCipher cipher, const SealKey& key, uint64_t counter,
                                           std::span<const std::byte> record) {
  ensure_sodium();
  if (record.size() < kSealHeaderSize + kSealTagSize) {
    return Status(StatusCode::kInvalidArgument, "a record is at least 20 bytes");
  }
  const uint32_t plen = core::load_u32(record.data());
  if (plen == 0 || plen > kSealRecordMax || record.size() != kSealHeaderSize + plen + kSealTagSize) {
    return Status(StatusCode::kProtocol, "the record's length does not match its size");
  }
  Direction d(cipher, key);
  d.start_at(counter % kSealRecordsPerKey);
  std::vector<std::byte> plain(plen);
  if (!d.open(record.data(), plen, plain.data())) {
    return Status(StatusCode::kProtocol, "the record failed authentication");
  }
  return plain;
}

}  // namespace remora::net
