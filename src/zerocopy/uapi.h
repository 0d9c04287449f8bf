// zerocopy/uapi.h — the kernel interface constants and structs for devmem TCP, the
// netdev and ethtool generic netlink families and io_uring zero-copy receive (zcrx) that
// the system headers of the build host may lack (Debian 12's linux-libc-dev 6.1 has no
// linux/netdev.h, no SO_DEVMEM_*, no zcrx structs).
//
// Everything here is remora's own spelling of the upstream uAPI (values and layouts from
// include/uapi/linux/{netdev.h,uio.h,io_uring.h,ethtool_netlink*.h} and
// include/uapi/asm-generic/socket.h), in a namespace, so nothing clashes with newer
// system headers. Where the build host's headers do define a name, a static_assert checks
// that both agree; every struct's size and field offsets are pinned by static_asserts.
// The socket option numbers are asm-generic's (x86_64, arm64, riscv, ...); alpha, mips,
// parisc and sparc number them differently and are refused at compile time.
#pragma once

#include <linux/version.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>

#if defined(__alpha__) || defined(__mips__) || defined(__hppa__) || defined(__sparc__)
#error "zerocopy/uapi.h: SO_DEVMEM_* use other numbers on this architecture (alpha, mips, parisc, sparc)"
#endif

namespace remora::zerocopy::uapi {

// ---- Socket options and recvmsg/sendmsg flags (asm-generic/socket.h, linux/socket.h) ----

/// recvmsg flag: deliver devmem fragments as cmsgs (without it, devmem skbs give EFAULT).
inline constexpr int kMsgSockDevmem = 0x2000000;
/// SOL_SOCKET cmsg: `frag_size` bytes landed in the iov (header-split miss).
inline constexpr int kScmDevmemLinear = 78;
/// SOL_SOCKET cmsg: a fragment in the bound dmabuf (RX); the binding id on TX.
inline constexpr int kScmDevmemDmabuf = 79;
/// setsockopt(SOL_SOCKET): give fragments' tokens back (array of DmabufToken).
inline constexpr int kSoDevmemDontneed = 80;
/// MSG_ZEROCOPY and SO_ZEROCOPY (in the 6.1 headers already; kept here for one place).
inline constexpr int kMsgZerocopy = 0x4000000;
inline constexpr int kSoZerocopy = 60;

// Where the build host's headers know these names (the kernel's asm/socket.h the SO_ and
// SCM_ ones, glibc the MSG_ ones, each from its own release on), they must agree.
#ifdef SO_DEVMEM_DONTNEED
static_assert(SO_DEVMEM_DONTNEED == kSoDevmemDontneed && SCM_DEVMEM_LINEAR == kScmDevmemLinear &&
              SCM_DEVMEM_DMABUF == kScmDevmemDmabuf);
#endif
#ifdef MSG_SOCK_DEVMEM
static_assert(MSG_SOCK_DEVMEM == kMsgSockDevmem);
#endif
#ifdef SO_ZEROCOPY
static_assert(SO_ZEROCOPY == kSoZerocopy && MSG_ZEROCOPY == kMsgZerocopy);
#endif

/// The payload of SCM_DEVMEM_DMABUF / SCM_DEVMEM_LINEAR on receive (linux/uio.h
/// `struct dmabuf_cmsg`). For LINEAR only frag_size is meaningful.
struct DmabufCmsg {
  uint64_t frag_offset;  ///< where the fragment starts in the dmabuf
  uint32_t frag_size;    ///< bytes in the fragment
  uint32_t frag_token;   ///< token to give back with SO_DEVMEM_DONTNEED
  uint32_t dmabuf_id;    ///< binding id (bind-rx's reply) the fragment belongs to
  uint32_t flags;        ///< reserved
};
static_assert(sizeof(DmabufCmsg) == 24);
static_assert(offsetof(DmabufCmsg, frag_offset) == 0);
static_assert(offsetof(DmabufCmsg, frag_size) == 8);
static_assert(offsetof(DmabufCmsg, frag_token) == 12);
static_assert(offsetof(DmabufCmsg, dmabuf_id) == 16);
static_assert(offsetof(DmabufCmsg, flags) == 20);

/// One element of SO_DEVMEM_DONTNEED's array (linux/uio.h `struct dmabuf_token`):
/// tokens [token_start, token_start + token_count).
struct DmabufToken {
  uint32_t token_start;
  uint32_t token_count;
  friend bool operator==(const DmabufToken&, const DmabufToken&) = default;
};
static_assert(sizeof(DmabufToken) == 8);
static_assert(offsetof(DmabufToken, token_count) == 4);

/// The kernel's limits on one SO_DEVMEM_DONTNEED call (net/core/sock.c): more than
/// kMaxDontneedTokens array entries is EINVAL; past kMaxDontneedFrags tokens summed over
/// token_count it stops freeing and returns the count so far.
inline constexpr uint32_t kMaxDontneedTokens = 128;
inline constexpr uint32_t kMaxDontneedFrags = 1024;

// ---- Generic netlink family "netdev", version 1 (linux/netdev.h) ----

inline constexpr char kNetdevFamilyName[] = "netdev";
inline constexpr uint8_t kNetdevFamilyVersion = 1;

// Commands.
inline constexpr uint8_t kNetdevCmdDevGet = 1;
inline constexpr uint8_t kNetdevCmdQueueGet = 10;
inline constexpr uint8_t kNetdevCmdBindRx = 13;  // 6.12
inline constexpr uint8_t kNetdevCmdBindTx = 15;  // 6.16
// dev-get reply attributes.
inline constexpr uint16_t kNetdevADevIfindex = 1;
inline constexpr uint16_t kNetdevADevXdpFeatures = 3;            // u64
inline constexpr uint16_t kNetdevADevXdpZcMaxSegs = 4;           // u32
inline constexpr uint16_t kNetdevADevXdpRxMetadataFeatures = 5;  // u64
inline constexpr uint16_t kNetdevADevXskFeatures = 6;            // u64
// queue-get attributes.
inline constexpr uint16_t kNetdevAQueueId = 1;
inline constexpr uint16_t kNetdevAQueueIfindex = 2;
inline constexpr uint16_t kNetdevAQueueType = 3;
inline constexpr uint16_t kNetdevAQueueNapiId = 4;
inline constexpr uint16_t kNetdevAQueueDmabuf = 5;   // u32: the dmabuf binding id bound to the queue
inline constexpr uint16_t kNetdevAQueueIoUring = 6;  // nest: an io_uring zcrx provider holds the queue
inline constexpr uint16_t kNetdevAQueueXsk = 7;      // nest: an AF_XDP socket holds the queue
// Queue types.
inline constexpr uint32_t kNetdevQueueTypeRx = 0;
inline constexpr uint32_t kNetdevQueueTypeTx = 1;
// bind-rx / bind-tx attributes.
inline constexpr uint16_t kNetdevADmabufIfindex = 1;  // u32
inline constexpr uint16_t kNetdevADmabufQueues = 2;   // nest, multi-attr: {kNetdevAQueueId, kNetdevAQueueType}
inline constexpr uint16_t kNetdevADmabufFd = 3;       // u32
inline constexpr uint16_t kNetdevADmabufId = 4;       // u32, the reply

#if __has_include(<linux/netdev.h>)
}  // namespace remora::zerocopy::uapi
#include <linux/netdev.h>
namespace remora::zerocopy::uapi {
static_assert(NETDEV_CMD_DEV_GET == kNetdevCmdDevGet && NETDEV_CMD_QUEUE_GET == kNetdevCmdQueueGet);
static_assert(NETDEV_A_QUEUE_DMABUF == kNetdevAQueueDmabuf && NETDEV_QUEUE_TYPE_RX == kNetdevQueueTypeRx);
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
static_assert(NETDEV_CMD_BIND_RX == kNetdevCmdBindRx && NETDEV_A_DMABUF_FD == kNetdevADmabufFd);
static_assert(NETDEV_A_DMABUF_QUEUES == kNetdevADmabufQueues && NETDEV_A_DMABUF_ID == kNetdevADmabufId);
#endif
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 16, 0)
static_assert(NETDEV_CMD_BIND_TX == kNetdevCmdBindTx);
#endif
#endif

// ---- Generic netlink family "ethtool", version 1 (linux/ethtool_netlink.h) ----

inline constexpr char kEthtoolFamilyName[] = "ethtool";
inline constexpr uint8_t kEthtoolFamilyVersion = 1;

// Requests (user to kernel). The kernel's replies use another numbering (below).
inline constexpr uint8_t kEthtoolMsgFeaturesGet = 11;
inline constexpr uint8_t kEthtoolMsgRingsGet = 15;
inline constexpr uint8_t kEthtoolMsgRingsSet = 16;
inline constexpr uint8_t kEthtoolMsgChannelsGet = 17;
// Replies (kernel to user).
inline constexpr uint8_t kEthtoolMsgFeaturesGetReply = 11;
inline constexpr uint8_t kEthtoolMsgRingsGetReply = 16;
inline constexpr uint8_t kEthtoolMsgChannelsGetReply = 18;
// The request/reply header nest.
inline constexpr uint16_t kEthtoolAHeaderDevIndex = 1;  // u32
inline constexpr uint16_t kEthtoolAHeaderDevName = 2;   // string
inline constexpr uint16_t kEthtoolAHeaderFlags = 3;     // u32
inline constexpr uint32_t kEthtoolFlagCompactBitsets = 1u << 0;
inline constexpr uint32_t kEthtoolFlagOmitReply = 1u << 1;

// rings-get / rings-set attributes.
inline constexpr uint16_t kEthtoolARingsHeader = 1;
inline constexpr uint16_t kEthtoolARingsRxMax = 2;
inline constexpr uint16_t kEthtoolARingsTxMax = 5;
inline constexpr uint16_t kEthtoolARingsRx = 6;
inline constexpr uint16_t kEthtoolARingsTx = 9;
inline constexpr uint16_t kEthtoolARingsRxBufLen = 10;
inline constexpr uint16_t kEthtoolARingsTcpDataSplit = 11;  // u8, EthtoolTcpDataSplit
inline constexpr uint16_t kEthtoolARingsHdsThresh = 17;     // u32 (6.13)
inline constexpr uint16_t kEthtoolARingsHdsThreshMax = 18;  // u32 (6.13)
// Values of kEthtoolARingsTcpDataSplit.
inline constexpr uint8_t kEthtoolTcpDataSplitUnknown = 0;
inline constexpr uint8_t kEthtoolTcpDataSplitDisabled = 1;
inline constexpr uint8_t kEthtoolTcpDataSplitEnabled = 2;
// channels-get attributes.
inline constexpr uint16_t kEthtoolAChannelsHeader = 1;
inline constexpr uint16_t kEthtoolAChannelsRxMax = 2;
inline constexpr uint16_t kEthtoolAChannelsTxMax = 3;
inline constexpr uint16_t kEthtoolAChannelsOtherMax = 4;
inline constexpr uint16_t kEthtoolAChannelsCombinedMax = 5;
inline constexpr uint16_t kEthtoolAChannelsRxCount = 6;
inline constexpr uint16_t kEthtoolAChannelsTxCount = 7;
inline constexpr uint16_t kEthtoolAChannelsOtherCount = 8;
inline constexpr uint16_t kEthtoolAChannelsCombinedCount = 9;
// features-get attributes.
inline constexpr uint16_t kEthtoolAFeaturesHeader = 1;
inline constexpr uint16_t kEthtoolAFeaturesHw = 2;        // bitset: features the user may change
inline constexpr uint16_t kEthtoolAFeaturesWanted = 3;    // bitset
inline constexpr uint16_t kEthtoolAFeaturesActive = 4;    // bitset: features on now
inline constexpr uint16_t kEthtoolAFeaturesNochange = 5;  // bitset
// A bitset nest.
inline constexpr uint16_t kEthtoolABitsetNomask = 1;   // flag: a list of set bits, no mask
inline constexpr uint16_t kEthtoolABitsetSize = 2;     // u32
inline constexpr uint16_t kEthtoolABitsetBits = 3;     // nest of kEthtoolABitsetBitsBit
inline constexpr uint16_t kEthtoolABitsetValue = 4;    // binary (compact form)
inline constexpr uint16_t kEthtoolABitsetMask = 5;     // binary (compact form)
inline constexpr uint16_t kEthtoolABitsetBitsBit = 1;  // nest: one bit
// One bit of a bitset's kEthtoolABitsetBits nest.
inline constexpr uint16_t kEthtoolABitsetBitIndex = 1;  // u32
inline constexpr uint16_t kEthtoolABitsetBitName = 2;   // string
inline constexpr uint16_t kEthtoolABitsetBitValue = 3;  // flag
/// The feature string of NETIF_F_NTUPLE (`ethtool -K <if> ntuple on`).
inline constexpr char kNtupleFeatureName[] = "rx-ntuple-filter";

}  // namespace remora::zerocopy::uapi
#include <linux/ethtool_netlink.h>
namespace remora::zerocopy::uapi {
static_assert(ETHTOOL_MSG_FEATURES_GET == kEthtoolMsgFeaturesGet && ETHTOOL_MSG_RINGS_GET == kEthtoolMsgRingsGet);
static_assert(ETHTOOL_MSG_RINGS_SET == kEthtoolMsgRingsSet && ETHTOOL_MSG_CHANNELS_GET == kEthtoolMsgChannelsGet);
static_assert(ETHTOOL_MSG_FEATURES_GET_REPLY == kEthtoolMsgFeaturesGetReply);
static_assert(ETHTOOL_MSG_RINGS_GET_REPLY == kEthtoolMsgRingsGetReply);
static_assert(ETHTOOL_MSG_CHANNELS_GET_REPLY == kEthtoolMsgChannelsGetReply);
static_assert(ETHTOOL_A_HEADER_DEV_INDEX == kEthtoolAHeaderDevIndex && ETHTOOL_A_HEADER_FLAGS == kEthtoolAHeaderFlags);
static_assert(ETHTOOL_A_RINGS_TCP_DATA_SPLIT == kEthtoolARingsTcpDataSplit && ETHTOOL_A_RINGS_RX == kEthtoolARingsRx);
static_assert(ETHTOOL_TCP_DATA_SPLIT_ENABLED == kEthtoolTcpDataSplitEnabled);
static_assert(ETHTOOL_A_CHANNELS_COMBINED_COUNT == kEthtoolAChannelsCombinedCount);
static_assert(ETHTOOL_A_FEATURES_ACTIVE == kEthtoolAFeaturesActive && ETHTOOL_A_FEATURES_HW == kEthtoolAFeaturesHw);
static_assert(ETHTOOL_A_BITSET_BITS == kEthtoolABitsetBits && ETHTOOL_A_BITSET_BIT_VALUE == kEthtoolABitsetBitValue);
static_assert(ETHTOOL_A_BITSET_BITS_BIT == kEthtoolABitsetBitsBit && ETHTOOL_A_BITSET_NOMASK == kEthtoolABitsetNomask);
static_assert(ETHTOOL_FLAG_COMPACT_BITSETS == kEthtoolFlagCompactBitsets);

// ---- io_uring zero-copy receive (linux/io_uring.h, 6.15; dmabuf areas 6.16) ----

inline constexpr unsigned kIoringRegisterZcrxIfq = 32;
inline constexpr uint8_t kIoringOpSendZc = 47;
inline constexpr uint8_t kIoringOpRecvZc = 58;
inline constexpr uint32_t kIoringZcrxAreaDmabuf = 1;
inline constexpr uint32_t kIoringMemRegionTypeUser = 1;
inline constexpr unsigned kIoringZcrxAreaShift = 48;
/// RECV_ZC's sqe->ioprio: multishot, which RECV_ZC requires (IORING_RECV_MULTISHOT).
inline constexpr uint16_t kIoringRecvMultishot = 1u << 1;
/// The setup flags zcrx needs (IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN | CQE32).
inline constexpr uint32_t kIoringSetupCqe32 = 1u << 11;
inline constexpr uint32_t kIoringSetupSingleIssuer = 1u << 12;
inline constexpr uint32_t kIoringSetupDeferTaskrun = 1u << 13;

/// `struct io_uring_zcrx_area_reg`: the memory the NIC receives into.
struct ZcrxAreaReg {
  uint64_t addr;  ///< page-aligned user address (ignored for a dmabuf area)
  uint64_t len;
  uint64_t rq_area_token;  ///< out: OR into refill entries' offsets
  uint32_t flags;          ///< kIoringZcrxAreaDmabuf for a dmabuf area
  uint32_t dmabuf_fd;
  uint64_t resv2[2];
};
static_assert(sizeof(ZcrxAreaReg) == 48);
static_assert(offsetof(ZcrxAreaReg, rq_area_token) == 16 && offsetof(ZcrxAreaReg, dmabuf_fd) == 28);

/// `struct io_uring_region_desc`: the memory of the refill ring.
struct RegionDesc {
  uint64_t user_addr;
  uint64_t size;
  uint32_t flags;  ///< kIoringMemRegionTypeUser: user_addr is our memory
  uint32_t id;
  uint64_t mmap_offset;
  uint64_t resv[4];
};
static_assert(sizeof(RegionDesc) == 64);
static_assert(offsetof(RegionDesc, flags) == 16 && offsetof(RegionDesc, mmap_offset) == 24);

/// `struct io_uring_zcrx_offsets`: where head, tail and entries sit in the refill ring.
struct ZcrxOffsets {
  uint32_t head;
  uint32_t tail;
  uint32_t rqes;
  uint32_t resv2;
  uint64_t resv[2];
};
static_assert(sizeof(ZcrxOffsets) == 32);

/// `struct io_uring_zcrx_ifq_reg`: IORING_REGISTER_ZCRX_IFQ's argument.
struct ZcrxIfqReg {
  uint32_t if_idx;
  uint32_t if_rxq;
  uint32_t rq_entries;
  uint32_t flags;
  uint64_t area_ptr;    ///< -> ZcrxAreaReg
  uint64_t region_ptr;  ///< -> RegionDesc
  ZcrxOffsets offsets;  ///< out
  uint32_t zcrx_id;     ///< out
  uint32_t rx_buf_len;  ///< 0: the kernel's default (was __resv2 before 6.18)
  uint64_t resv[3];
};
static_assert(sizeof(ZcrxIfqReg) == 96);
static_assert(offsetof(ZcrxIfqReg, area_ptr) == 16 && offsetof(ZcrxIfqReg, offsets) == 32);
static_assert(offsetof(ZcrxIfqReg, zcrx_id) == 64 && offsetof(ZcrxIfqReg, resv) == 72);

// Device-less zcrx (Linux 7.1, "io_uring/zcrx: implement device-less mode for zcrx"): a
// queue registered with ZCRX_REG_NODEV has no NIC under it; RECV_ZC on any TCP socket
// then has the kernel copy the payload into the area's buffers, and the refill ring is
// read only when asked to (IORING_REGISTER_ZCRX_CTRL with ZCRX_CTRL_FLUSH_RQ).

/// `io_uring_zcrx_ifq_reg.flags`: no net device; every byte copied (ZCRX_REG_NODEV).
inline constexpr uint32_t kZcrxRegNodev = 2;
/// io_uring_register opcode for a zcrx instance's controls (IORING_REGISTER_ZCRX_CTRL).
inline constexpr unsigned kIoringRegisterZcrxCtrl = 36;
/// `zcrx_ctrl.op`: take the refill ring's entries back into the area now (ZCRX_CTRL_FLUSH_RQ).
inline constexpr uint32_t kZcrxCtrlFlushRq = 0;

/// `struct zcrx_ctrl`: IORING_REGISTER_ZCRX_CTRL's argument (nr_args 0); the flush's
/// part of the union is reserved, all zero.
struct ZcrxCtrl {
  uint32_t zcrx_id;
  uint32_t op;
  uint64_t resv[2];
  uint64_t op_args[6];  ///< the union of the operations' arguments (48 bytes)
};
static_assert(sizeof(ZcrxCtrl) == 72);
static_assert(offsetof(ZcrxCtrl, op_args) == 24);

/// A refill entry (`struct io_uring_zcrx_rqe`) and the second half of a zcrx CQE.
struct ZcrxRqe {
  uint64_t off;
  uint32_t len;
  uint32_t pad;
};
static_assert(sizeof(ZcrxRqe) == 16);
struct ZcrxCqe {
  uint64_t off;
  uint64_t pad;
};
static_assert(sizeof(ZcrxCqe) == 16);

}  // namespace remora::zerocopy::uapi
