// datapath/devmem_tx_path.h — devmem TCP send driven by an endpoint: a message of
// device memory goes from the device to the wire with no copy through host memory. The
// memory's domain exports the range as a dmabuf (MemoryDomain::export_dmabuf), the NIC
// named by REMORA_DEVMEM_IFNAME binds it for transmit (netdev bind-tx), and each chunk
// is one sendmsg(MSG_ZEROCOPY) whose iov holds the offset into the dmabuf and whose
// control data names the binding (zerocopy/devmem_tx.h). The NIC reads the memory after
// sendmsg returns, so the send completes only once the kernel has reported every one of
// its sendmsgs complete on the stream's error queue (ZerocopyTracker); the binding is
// dropped then.
//
// DevmemTxSend is one transfer's export and binding; DevmemSource its ChunkSource;
// DevmemTxStreams the per-stream SO_ZEROCOPY switch and completion trackers of one
// endpoint. The kernel calls go through DevmemTxKernel: the system calls, except in tests,
// which put a stand-in of the kernel and NIC there (no NIC here can bind: every bind-tx
// on this project's machines is refused, see docs/device-memory.md).
//
// Scope of this version: message sends (Endpoint::send), chunked puts (Endpoint::put;
// the put completes once its RESP came and the kernel reported its sendmsgs done; an
// inline put travels in its PUT frame) and chunked gets a peer makes of a registered
// region of device memory (the target's reply; the get completes once the kernel
// reported the reply's sendmsgs done, and the region stays bracketed until then).
// Bindings: memory inside a registered region is sent through one binding of the whole
// region, made on its first devmem send and kept, for every endpoint of the context, until
// the region is deregistered (DevmemTxBindingCache: registration is where remora pays
// such costs once); other memory is exported and bound per transfer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "datapath/chunk_io.h"
#include "mem/region_access.h"
#include "net/io.h"
#include "net/socket.h"
#include "remora/memory.h"
#include "remora/status.h"
#include "zerocopy/devmem_tx.h"

namespace remora::detail {

/// What a devmem put's sendmsgs are registered under: its operation id with this bit (a
/// message send's are its send id).
inline constexpr uint64_t kDevmemPutCookie = uint64_t{1} << 63;
/// A served get's: this bit with the target's own number for it (the peer's operation
/// ids are the peer's to choose, so they never go into a cookie).
inline constexpr uint64_t kDevmemServedGetCookie = uint64_t{1} << 62;

/// A bind-tx that succeeded: its id, and what keeps it bound (the netlink socket; the
/// kernel unbinds when it goes).
struct DevmemTxBinding {
  uint32_t id = 0;
  std::shared_ptr<void> hold;
};

/// The kernel calls of devmem TX. The real ones unless a test put a stand-in there.
struct DevmemTxKernel {
  /// bind-tx of `dmabuf_fd` on `ifindex` (zerocopy::DevmemBinding::bind_tx).
  std::function<Result<DevmemTxBinding>(uint32_t ifindex, int dmabuf_fd)> bind_tx;
  /// One devmem sendmsg (zerocopy::send_devmem).
  std::function<net::IoResult(int fd, uint32_t binding_id, uint64_t dmabuf_offset, size_t len)> send;
};

/// The kernel calls endpoints use from now on (read when an endpoint makes its first
/// devmem send).
std::shared_ptr<const DevmemTxKernel> devmem_tx_kernel();
/// Tests only: a stand-in of the kernel and NIC; nullptr puts the system calls back.
void set_devmem_tx_kernel_for_tests(std::shared_ptr<const DevmemTxKernel> kernel);

/// One transfer's dmabuf and binding.
struct DevmemTxSend {
  std::shared_ptr<const DevmemTxKernel> kernel;
  DevmemTxBinding binding;
  uint64_t offset = 0;  ///< of the transfer's first byte in the dmabuf
  uint64_t length = 0;
  bool region_binding = false;  ///< the binding of a registered region (DevmemTxBindingCache), kept after this send

  /// Exports [ptr, ptr + len) of `domain` and binds it for transmit on `ifindex`. The
  /// refusal (the domain's, or the kernel's with its errno and message) otherwise.
  static Result<std::unique_ptr<DevmemTxSend>> make(std::shared_ptr<const DevmemTxKernel> kernel, MemoryDomain& domain,
                                                    const void* ptr, size_t len, uint32_t ifindex,
                                                    const std::string& ifname);
};

/// The transmit bindings of registered regions of device memory, shared by the endpoints
/// of one context (see the top of this file). The first devmem send from inside a live
/// region exports the region's pages and binds them on the interface; later sends from
/// anywhere in the region, by any endpoint, use that binding. Deregistration lets it go
/// (sends still using it hold it until the kernel reports them done; then the kernel
/// unbinds). Memory in no registered region is bound per send, as before. Thread-safe.
class DevmemTxBindingCache {
 public:
  explicit DevmemTxBindingCache(const MemoryRegistry& registry);
  ~DevmemTxBindingCache();
  DevmemTxBindingCache(const DevmemTxBindingCache&) = delete;
  DevmemTxBindingCache& operator=(const DevmemTxBindingCache&) = delete;

  /// The send of [ptr, ptr + len) of `domain` on `ifindex`: through its region's binding
  /// (made now if it is the region's first), else DevmemTxSend::make's own binding.
  Result<std::unique_ptr<DevmemTxSend>> send_for(std::shared_ptr<const DevmemTxKernel> kernel, MemoryDomain& domain,
                                                 const void* ptr, size_t len, uint32_t ifindex,
                                                 const std::string& ifname);
  /// Region bindings held now.
  size_t size() const;

 private:
  struct Shared;  // the bindings, shared with the registry's release listener
  std::shared_ptr<RegistryState> registry_;
  std::shared_ptr<Shared> shared_;
  uint64_t listener_ = 0;
};

/// The data streams of one endpoint as devmem TX uses them: SO_ZEROCOPY switched on
/// (once, on the first devmem send), and each stream's completion tracker. Not
/// thread-safe (the progress lock).
class DevmemTxStreams {
 public:
  /// SO_ZEROCOPY on `fd` (once per stream).
  Status enable(int fd);
  bool enabled(int fd) const { return trackers_.count(fd) != 0; }
  /// The sendmsg of `cookie` on `fd` sent bytes: it took the stream's next number.
  void sent(int fd, uint64_t cookie);
  /// Reads `fd`'s error queue; `released(cookie)` once per completed sendmsg.
  Status drain(int fd, const std::function<void(uint64_t cookie)>& released);
  /// `fd` is retired and closes (failover): what its error queue holds is applied, then
  /// every sendmsg on it not reported yet counts as done (`released`), since nothing
  /// more will be. Its bytes go nowhere the peer reads (the chunks go again), and the
  /// memory binding itself is the kernel's to hold while its NIC still reads.
  void abandon(int fd, const std::function<void(uint64_t cookie)>& released);
  /// Devmem TX is used on this endpoint's streams (those retired now too, adopt).
  void use() noexcept { used_ = true; }
  /// `fd` replaces a retired stream (failover): SO_ZEROCOPY on it too, if devmem TX was
  /// ever used on this endpoint's streams.
  Status adopt(int fd) { return used_ ? enable(fd) : Status::ok(); }
  /// Completions the kernel reported as copied instead (loopback always is).
  uint64_t copied() const noexcept;

 private:
  std::map<int, zerocopy::ZerocopyTracker> trackers_;
  bool used_ = false;  // enable() or use() ran
};

/// The chunks of one transfer read by the NIC from device memory, through its export
/// and binding (`send`, held until the source goes). Counts the sendmsgs not yet
/// reported complete (unreleased()).
///
/// A served get reads a peer-granted region (`access`): every sendmsg opens a bracket of
/// the region's access that its completion closes (the NIC reads the memory until then,
/// so deregistration waits for it); once the region is deregistered the rest of the
/// announced bytes go as zeros from host memory and revoked() says so, as RegionSource
/// does. Brackets still open when the source goes (the endpoint failed) are closed then.
///
/// Failover: a chunk sent again after its stream broke goes from host memory, copied out
/// of the device by `again`'s source (made at the first such chunk; a staging source
/// for resends), not by devmem: the surviving stream may leave by another NIC, which
/// holds no binding of this memory.
class DevmemSource final : public ChunkSource {
 public:
  /// Makes the source chunks sent again come from (null: none are, can_resend is false).
  using Again = std::function<Result<std::unique_ptr<ChunkSource>>()>;
  /// Each sendmsg is reported done under `cookie` (what the stream's completions are
  /// routed by: the operation's id with its kind's bit, devmem_tx_path.h's cookies).
  DevmemSource(std::unique_ptr<DevmemTxSend> send, DevmemTxStreams& streams, uint64_t cookie,
               const RegionAccess* access = nullptr, Again again = nullptr) noexcept
      : send_(std::move(send)), streams_(streams), cookie_(cookie), access_(access), make_again_(std::move(again)) {}
  ~DevmemSource() override;
  DevmemSource(const DevmemSource&) = delete;
  DevmemSource& operator=(const DevmemSource&) = delete;
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override;
  /// The host never holds these bytes: no CRC-32C (the path is not chosen with checksums on).
  std::optional<uint32_t> checksum(uint64_t, uint64_t) override { return std::nullopt; }
  bool zero_copy() const noexcept override { return true; }
  /// Sendmsgs made and not yet reported complete.
  uint64_t unreleased() const noexcept override { return pending_; }
  /// One of them was reported complete.
  void released() noexcept override;
  /// The region was deregistered before all of it was sent (a served get's).
  bool revoked() const noexcept override { return revoked_ || (again_ && again_->revoked()); }

  // --- failover: chunks sent again from host copies --------------------------------
  bool can_resend() const noexcept override { return static_cast<bool>(make_again_); }
  Status prepare_again(uint64_t offset, uint64_t len) override;
  net::IoResult write_again(int fd, uint64_t offset, uint64_t len) override;
  void chunk_sent(uint64_t offset, uint64_t length) override;
  size_t in_flight() const noexcept override { return again_ ? again_->in_flight() : 0; }

 private:
  std::unique_ptr<DevmemTxSend> send_;
  DevmemTxStreams& streams_;
  uint64_t cookie_;
  const RegionAccess* access_;
  uint64_t pending_ = 0;
  bool revoked_ = false;
  Again make_again_;
  std::unique_ptr<ChunkSource> again_;
};

}  // namespace remora::detail
