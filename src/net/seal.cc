// net/seal.cc — the sealing layer of a socket (see seal.h): the AEAD records, the
// per-socket state that sends and opens them, and the table that finds it by descriptor.
#include "net/seal.h"

#include <sodium.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "core/little_endian.h"

namespace remora::net {

// Declared in io.cc: the plain system calls under the layer.
IoResult raw_send_some(int fd, const void* data, size_t len) noexcept;
IoResult raw_recv_some(int fd, void* data, size_t len) noexcept;

namespace {

constexpr std::string_view kRekeyLabel = "remora seal v1 next key";
/// Plaintext sealed per send before the records go to the kernel: eight records (512
/// KiB; memory a socket touches only once it sends that much at once). On the 2-vCPU
/// VM's Intel host (4 MiB of L2 per core) eight moved sealed 1 and 16 MiB puts, gets
/// and messages 1.17-1.53x faster than two (medians of 4 pairs; two records per send had
/// been chosen on an AMD host whose 512 KiB L2 did not hold four, which ran 1.1-1.5x
/// slower there: bench/results/encryption.md).
constexpr size_t kSendBatch = 8 * kSealRecordMax;
/// The ciphertext buffered on the receiving side: two records.
constexpr size_t kRecvBuffer = 2 * (kSealHeaderSize + kSealRecordMax + kSealTagMax);
/// Most records in one send batch: a gathered send (net::send_some_gathered) seals each
/// piece in records of its own, so a batch of small pieces holds more than eight.
constexpr size_t kBatchRecords = 32;
/// Most ciphertext one recv takes off the kernel. As for a plain data stream
/// (datapath/chunk_io.h, kSocketReadBytes), a long copy holds the socket while what
/// arrives waits in its backlog: across two namespaces on a 2-vCPU Intel VM, sealed 1 and
/// 16 MiB puts and gets moved 1.04-1.44x faster (medians of 4 pairs) reading 32 KiB at a
/// time than reading as much as the buffer held (bench/results/encryption.md).
constexpr size_t kRecvPiece = size_t{32} << 10;
static_assert(kSealTagSize == crypto_aead_aes256gcm_ABYTES && kSealTagSize == crypto_aead_chacha20poly1305_ietf_ABYTES);
static_assert(kSealKeySize == crypto_aead_aes256gcm_KEYBYTES &&
              kSealKeySize == crypto_aead_chacha20poly1305_ietf_KEYBYTES);
static_assert(crypto_aead_aes256gcm_NPUBBYTES == 12 && crypto_aead_chacha20poly1305_ietf_NPUBBYTES == 12);
// AEGIS-256 came with libsodium 1.0.19 (Debian 12 has 1.0.18; scripts/lib/sodium.sh
// builds 1.0.22): a build without it refuses the cipher (cipher_available).
#ifdef crypto_aead_aegis256_KEYBYTES
#define REMORA_SEAL_HAVE_AEGIS 1
static_assert(kSealKeySize == crypto_aead_aegis256_KEYBYTES && kSealTagMax == crypto_aead_aegis256_ABYTES);
static_assert(crypto_aead_aegis128l_KEYBYTES <= kSealKeySize && kSealTagMax == crypto_aead_aegis128l_ABYTES &&
              crypto_aead_aegis128l_NPUBBYTES <= crypto_aead_aegis256_NPUBBYTES);
constexpr size_t kNonceMax = crypto_aead_aegis256_NPUBBYTES;
#else
#define REMORA_SEAL_HAVE_AEGIS 0
constexpr size_t kNonceMax = 32;
#endif
static_assert(kNonceMax >= 12 && kNonceMax == 32);

const unsigned char* uc(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }
unsigned char* uc(std::byte* p) { return reinterpret_cast<unsigned char*>(p); }

void ensure_sodium() noexcept {
  static const int once = sodium_init();
  (void)once;
}

/// The ciphers libsodium keys by the key itself, one call per record (AES-256-GCM,
/// with its expanded key, is called apart): the same detached signatures.
struct KeyedAead {
  int (*encrypt)(unsigned char* c, unsigned char* mac, unsigned long long* maclen, const unsigned char* m,
                 unsigned long long mlen, const unsigned char* ad, unsigned long long adlen, const unsigned char* nsec,
                 const unsigned char* npub, const unsigned char* k);
  int (*decrypt)(unsigned char* m, unsigned char* nsec, const unsigned char* c, unsigned long long clen,
                 const unsigned char* mac, const unsigned char* ad, unsigned long long adlen, const unsigned char* npub,
                 const unsigned char* k);
};
constexpr KeyedAead kChacha{crypto_aead_chacha20poly1305_ietf_encrypt_detached,
                            crypto_aead_chacha20poly1305_ietf_decrypt_detached};
#if REMORA_SEAL_HAVE_AEGIS
constexpr KeyedAead kAegis256{crypto_aead_aegis256_encrypt_detached, crypto_aead_aegis256_decrypt_detached};
constexpr KeyedAead kAegis128l{crypto_aead_aegis128l_encrypt_detached, crypto_aead_aegis128l_decrypt_detached};
#endif

/// nullptr: AES-256-GCM, or an AEGIS this build lacks.
const KeyedAead* keyed_aead(SealCipher cipher) noexcept {
  switch (cipher) {
    case SealCipher::kChacha20Poly1305: return &kChacha;
#if REMORA_SEAL_HAVE_AEGIS
    case SealCipher::kAegis256: return &kAegis256;
    case SealCipher::kAegis128l: return &kAegis128l;
#endif
    default: return nullptr;
  }
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

  /// Seals `plain` as the next record into `out` (kSealHeaderSize + size +
  /// seal_tag_size(cipher) bytes).
  void seal(std::span<const std::byte> plain, std::byte* out) {
    next_key_if_due();
    core::store_u32(out, static_cast<uint32_t>(plain.size()));
    const auto nonce = nonce_of(counter_++);
    std::byte* c = out + kSealHeaderSize;
    std::byte* tag = c + plain.size();
    if (cipher_ == SealCipher::kAes256Gcm) {
      crypto_aead_aes256gcm_encrypt_detached_afternm(uc(c), uc(tag), nullptr, uc(plain.data()), plain.size(), uc(out),
                                                     kSealHeaderSize, nullptr, nonce.data(), &aes_);
    } else if (const KeyedAead* aead = keyed_aead(cipher_)) {
      aead->encrypt(uc(c), uc(tag), nullptr, uc(plain.data()), plain.size(), uc(out), kSealHeaderSize, nullptr,
                    nonce.data(), uc(key_.data()));
    }
  }

  /// Opens the next record, whole at `record` with `len` plaintext bytes, into `plain`
  /// (in place, or a caller's buffer). false: it failed authentication (`plain` then
  /// holds nothing to use, in a receive that fails; a caller's buffer is zeroed).
  bool open(const std::byte* record, size_t len, std::byte* plain) {
    next_key_if_due();
    const auto nonce = nonce_of(counter_++);
    const std::byte* c = record + kSealHeaderSize;
    const std::byte* tag = c + len;
    if (cipher_ == SealCipher::kAes256Gcm) {
      return crypto_aead_aes256gcm_decrypt_detached_afternm(uc(plain), nullptr, uc(c), len, uc(tag), uc(record),
                                                            kSealHeaderSize, nonce.data(), &aes_) == 0;
    }
    const KeyedAead* aead = keyed_aead(cipher_);
    return aead != nullptr && aead->decrypt(uc(plain), nullptr, uc(c), len, uc(tag), uc(record), kSealHeaderSize,
                                            nonce.data(), uc(key_.data())) == 0;
  }

  /// For the record tests: the next record is number `counter` (below kSealRecordsPerKey).
  void start_at(uint64_t counter) noexcept { counter_ = counter; }

  uint64_t records() const noexcept { return counter_; }
  uint64_t keys_replaced() const noexcept { return replaced_; }

 private:
  /// The counter, then zeros: the first 12 bytes are the 96-bit nonce of AES-256-GCM
  /// and ChaCha20-Poly1305, the first 16 AEGIS-128L's, all 32 AEGIS-256's.
  static std::array<unsigned char, kNonceMax> nonce_of(uint64_t counter) {
    std::array<unsigned char, kNonceMax> n{};
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

/// Asks the CPU to bring [p, p + n) into its caches (for reading).
void prefetch(const std::byte* p, size_t n) noexcept {
  // Into L2, not L1 (locality 2, prefetcht1): a record's 1024 lines do not fit L1, and
  // asking for them there stalls the loop on the L1's fill buffers. Sealing a 16 MiB
  // buffer in 64 KiB records here: 4.5 GB/s with prefetcht0, 6.5 with prefetcht1.
  for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 2);
}

IoResult failure(int err) { return {.kind = IoResult::Kind::kError, .err = err}; }
IoResult would_block() { return {.kind = IoResult::Kind::kWouldBlock}; }
IoResult moved(size_t n) { return {.kind = IoResult::Kind::kBytes, .bytes = n}; }

/// One sealed socket. The send side and the receive side share nothing mutable, so a
/// thread may send while another receives, as on a plain socket.
class SealedSocket {
 public:
  explicit SealedSocket(const SealKeys& keys)
      : cipher_(keys.cipher),
        tag_(seal_tag_size(keys.cipher)),
        tx_(keys.cipher, keys.send),
        rx_(keys.cipher, keys.recv) {
    out_ = std::make_unique_for_overwrite<std::byte[]>(kSendBatch + kBatchRecords * (kSealHeaderSize + tag_));
    in_.resize(kRecvBuffer);
  }

  SealCipher cipher() const noexcept { return cipher_; }

  /// Sends the bytes of `pieces` in order (a gathered send: each piece is sealed in
  /// records of its own, several pieces to a batch).
  IoResult send(int fd, std::span<const iovec> pieces) {
    size_t len = 0;
    for (const iovec& piece : pieces) len += piece.iov_len;
    if (len == 0) return moved(0);
    if (credit_ > 0) {  // sealed and sent, not yet reported: offered again in fewer bytes
      const size_t n = std::min(len, credit_);
      credit_ -= n;
      return moved(n);
    }
    if (tx_error_ != 0) return failure(tx_error_);
    size_t reported = 0;
    for (;;) {
      IoResult stop = moved(0);  // what ended the sends: would block, or an error
      while (out_off_ < out_end_) {
        const IoResult r = raw_send_some(fd, out_.get() + out_off_, out_end_ - out_off_);
        if (!r.moved()) {
          stop = r;
          break;
        }
        out_off_ += r.bytes;
      }
      // Every record wholly in the kernel counts as sent at once, even while the rest of
      // its batch is not: the peer may open and act on it now, so a caller that counts
      // what it sent (the control stream's replay, HANDLED) must know.
      const size_t whole = sent_plain();
      const size_t n = std::min(whole - out_reported_, len - reported);
      reported += n;
      credit_ = whole - out_reported_ - n;
      out_reported_ = whole;
      if (stop.error()) {
        tx_error_ = stop.err;  // told once what was sent is told
        return reported > 0 ? moved(reported) : stop;
      }
      if (stop.would_block()) return reported > 0 ? moved(reported) : stop;
      if (credit_ > 0) return moved(reported);
      out_end_ = out_off_ = out_plain_ = out_reported_ = 0;
      batch_count_ = batch_sent_ = 0;
      if (reported == len) return moved(reported);
      seal_batch(pieces, reported);
    }
  }

  size_t take_sent(size_t most) noexcept {
    const size_t n = std::min(most, credit_);
    credit_ -= n;
    return n;
  }

  IoResult recv(int fd, std::byte* dst, size_t len) {
    if (len == 0) return moved(0);
    size_t got = 0;
    bool drained = false;
    for (;;) {
      if (plain_off_ < plain_end_) {
        const size_t n = std::min(len - got, plain_end_ - plain_off_);
        std::memcpy(dst + got, in_.data() + plain_off_, n);
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
        const size_t whole = kSealHeaderSize + plen + tag_;
        if (have >= whole) {
          // A record whose plaintext fits in what the caller asked for opens straight
          // into its buffer (the copy out of in_ cost about 7% of a sealed stream's
          // receiving CPU). Else it opens where it lies: the plaintext takes the
          // ciphertext's place in in_, delivered from there before anything is read
          // into in_ again.
          std::byte* record = in_.data() + in_begin_;
          const bool direct = len - got >= plen;
          if (!rx_.open(record, plen, direct ? dst + got : record + kSealHeaderSize)) {
            // Whatever the cipher left in the caller's buffer is not delivered as valid
            // (the receive fails), and it holds zeros, not bytes of no meaning.
            if (direct) sodium_memzero(dst + got, plen);
            plain_off_ = plain_end_ = 0;
            rx_error_ = EBADMSG;
            continue;
          }
          ++opened_;
          in_begin_ += whole;
          if (direct) {
            got += plen;
            if (got == len) return moved(got);
            continue;
          }
          plain_off_ = in_begin_ - whole + kSealHeaderSize;
          plain_end_ = plain_off_ + plen;
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
      // Move the part of a record left at the back to the front only when a whole record
      // might not fit behind it (not after every read: that copied most bytes twice).
      if (have == 0) {
        in_begin_ = in_end_ = 0;
      } else if (in_begin_ > 0 && in_.size() - in_end_ < kSealHeaderSize + kSealRecordMax + tag_) {
        std::memmove(in_.data(), in_.data() + in_begin_, have);
        in_begin_ = 0;
        in_end_ = have;
      }
      const size_t space = std::min(in_.size() - in_end_, kRecvPiece);
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
  /// The plaintext of the records of the batch in out_ that are wholly in the kernel.
  size_t sent_plain() noexcept {
    while (batch_sent_ < batch_count_ && batch_[batch_sent_].cipher_end <= out_off_) ++batch_sent_;
    return batch_sent_ == 0 ? 0 : batch_[batch_sent_ - 1].plain_end;
  }

  /// Seals the next batch: from byte `skip` of what `pieces` hold, at most kSendBatch
  /// bytes in at most kBatchRecords records, none of them across two pieces.
  void seal_batch(std::span<const iovec> pieces, size_t skip) {
    std::array<std::span<const std::byte>, kBatchRecords> plan;
    size_t planned = 0, len = 0;
    std::span<const std::byte> after;  // what the caller offers next, past this batch
    for (const iovec& piece : pieces) {
      if (skip >= piece.iov_len) {
        skip -= piece.iov_len;
        continue;
      }
      std::span<const std::byte> rest(static_cast<const std::byte*>(piece.iov_base) + skip, piece.iov_len - skip);
      skip = 0;
      while (!rest.empty() && planned < kBatchRecords && len < kSendBatch) {
        const size_t n = std::min({rest.size(), kSealRecordMax, kSendBatch - len});
        plan[planned++] = rest.first(n);
        len += n;
        rest = rest.subspan(n);
      }
      if (planned == kBatchRecords || len == kSendBatch) {
        after = rest.first(std::min(rest.size(), kSealRecordMax));
        break;
      }
    }
    size_t at = 0;
    size_t plain = 0;
    prefetch(plan[0].data(), plan[0].size());
    for (size_t i = 0; i < planned; ++i) {
      // The caller's next record while this one is sealed (also past this batch: the
      // caller offers those bytes next): AEGIS reads its input one block after another
      // and, reading memory no cache holds, seals 2.6 GB/s here instead of 4.8 with
      // the next record already on its way (bench/results/encryption.md).
      const std::span<const std::byte> next = i + 1 < planned ? plan[i + 1] : after;
      prefetch(next.data(), next.size());
      tx_.seal(plan[i], out_.get() + at);
      at += kSealHeaderSize + plan[i].size() + tag_;
      plain += plan[i].size();
      batch_[i] = {.cipher_end = at, .plain_end = plain};
    }
    batch_count_ = planned;
    batch_sent_ = 0;
    out_end_ = at;
    out_off_ = 0;
    out_plain_ = len;
    out_reported_ = 0;
  }

  // Send side.
  SealCipher cipher_;
  size_t tag_;  // seal_tag_size(cipher_)
  Direction tx_;
  std::unique_ptr<std::byte[]> out_;  // sealed records, [out_off_, out_end_) not yet in the kernel
  size_t out_end_ = 0;
  size_t out_off_ = 0;
  size_t out_plain_ = 0;     // plaintext bytes the records in out_ hold
  size_t out_reported_ = 0;  // of those, in records wholly sent and counted (reported or credit_)
  struct BatchRecord {
    size_t cipher_end = 0;  // where the record ends in out_
    size_t plain_end = 0;   // the plaintext bytes of the batch up to its end
  };
  std::array<BatchRecord, kBatchRecords> batch_{};  // the records in out_
  size_t batch_count_ = 0;
  size_t batch_sent_ = 0;  // of those, wholly in the kernel
  size_t credit_ = 0;        // sent plaintext bytes not yet reported
  int tx_error_ = 0;
  // Receive side.
  Direction rx_;
  std::vector<std::byte> in_;  // ciphertext read, [in_begin_, in_end_) not yet opened
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  // The last record opened, in place in in_: [plain_off_, plain_end_) not yet delivered.
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
  switch (cipher) {
    case SealCipher::kAes256Gcm: return "aes256gcm";
    case SealCipher::kAegis256: return "aegis256";
    case SealCipher::kAegis128l: return "aegis128l";
    case SealCipher::kChacha20Poly1305: break;
  }
  return "chacha20poly1305";
}

bool aes256gcm_available() noexcept {
  ensure_sodium();
  return crypto_aead_aes256gcm_is_available() == 1;
}

bool cipher_available(SealCipher cipher) noexcept {
  switch (cipher) {
    case SealCipher::kAes256Gcm: return aes256gcm_available();
    case SealCipher::kAegis256:
    case SealCipher::kAegis128l: return REMORA_SEAL_HAVE_AEGIS == 1;
    case SealCipher::kChacha20Poly1305: return true;
  }
  return false;
}

std::string cipher_missing(SealCipher cipher) {
  if (cipher_available(cipher)) return {};
  if (cipher == SealCipher::kAes256Gcm)
    return "this CPU lacks the AES and CLMUL instructions libsodium's AES-256-GCM needs";
  return fmt::format(
      "this build's libsodium ({}) lacks it (1.0.19 or later has it; scripts/lib/sodium.sh builds 1.0.22)",
      sodium_version());
}

std::string_view sodium_version() noexcept { return sodium_version_string(); }

uint8_t offered_ciphers(EncryptMode mode) noexcept {
  switch (mode) {
    case EncryptMode::kOff: return 0;
    case EncryptMode::kOn: {
      uint8_t bits = cipher_bit(SealCipher::kChacha20Poly1305);
      if (aes256gcm_available()) {
        bits |= cipher_bit(SealCipher::kAes256Gcm);
        if (cipher_available(SealCipher::kAegis256)) {
          bits |= cipher_bit(SealCipher::kAegis256) | cipher_bit(SealCipher::kAegis128l);
        }
      }
      return bits;
    }
    case EncryptMode::kAes256Gcm: return cipher_bit(SealCipher::kAes256Gcm);
    case EncryptMode::kChacha20Poly1305: return cipher_bit(SealCipher::kChacha20Poly1305);
    case EncryptMode::kAegis256: return cipher_bit(SealCipher::kAegis256);
    case EncryptMode::kAegis128l: return cipher_bit(SealCipher::kAegis128l);
  }
  return 0;
}

std::optional<SealCipher> preferred_cipher(uint8_t bits) noexcept {
  for (SealCipher c : kSealCiphers) {
    if ((bits & cipher_bit(c)) != 0) return c;
  }
  return std::nullopt;
}

std::optional<SealCipher> single_cipher(uint8_t bits) noexcept {
  for (SealCipher c : kSealCiphers) {
    if (bits == cipher_bit(c)) return c;
  }
  return std::nullopt;
}

std::string_view offer_word(uint8_t bits) noexcept {
  if (bits == 0) return "off";
  if (std::optional<SealCipher> one = single_cipher(bits)) return cipher_name(*one);
  return "on";
}

Status seal_socket(int fd, const SealKeys& keys) {
  if (fd < 0) return Status(StatusCode::kInvalidArgument, "seal_socket: no socket");
  if (static_cast<size_t>(fd) >= kPageSize * kPages) {
    return Status(StatusCode::kNoResource, "seal_socket: descriptor " + std::to_string(fd) +
                                               " beyond the sealing layer's table (1048576 descriptors)");
  }
  ensure_sodium();
  if (std::string why = cipher_missing(keys.cipher); !why.empty()) {
    return Status(StatusCode::kUnsupported, fmt::format("{}: {}", cipher_name(keys.cipher), why));
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
  const iovec piece{.iov_base = const_cast<void*>(data), .iov_len = len};  // only read
  *out = s->send(fd, std::span(&piece, 1));
  return true;
}

bool sealed_send_gathered(int fd, const iovec* pieces, int count, IoResult* out) noexcept {
  SealedSocket* s = find(fd);
  if (s == nullptr) return false;
  *out = s->send(fd, std::span(pieces, static_cast<size_t>(std::max(count, 0))));
  return true;
}

size_t sealed_take_sent(int fd, size_t most) noexcept {
  SealedSocket* s = find(fd);
  return s == nullptr ? 0 : s->take_sent(most);
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
  std::vector<std::byte> out(kSealHeaderSize + plaintext.size() + seal_tag_size(cipher));
  d.seal(plaintext, out.data());
  return out;
}

Result<std::vector<std::byte>> open_record(SealCipher cipher, const SealKey& key, uint64_t counter,
                                           std::span<const std::byte> record) {
  ensure_sodium();
  const size_t tag = seal_tag_size(cipher);
  if (record.size() < kSealHeaderSize + tag) {
    return Status(StatusCode::kInvalidArgument, fmt::format("a record is at least {} bytes", kSealHeaderSize + tag));
  }
  const uint32_t plen = core::load_u32(record.data());
  if (plen == 0 || plen > kSealRecordMax || record.size() != kSealHeaderSize + plen + tag) {
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
