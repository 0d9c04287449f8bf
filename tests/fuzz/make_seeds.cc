// tests/fuzz/make_seeds.cc — writes the seed corpus of the fuzz targets, each seed made
// by the encoder the library itself uses, so that the fuzzer starts from valid inputs:
//
//   ./build/fuzz/tests/fuzz/remora_fuzz_seeds tests/fuzz/corpus
//
// writes <dir>/<target>/<seed> (wire_fuzz's older seeds predate it and are kept as they
// are; its AUTH and checksummed-frame seeds are written here).
// Run it again after a format changes, and commit what it wrote.
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "coll/store_protocol.h"
#include "handle.h"
#include "remora/memory.h"
#include "remora/testing/test_device.h"
#include "seal_fuzz_key.h"
#include "wire.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/handshake.h"
#include "zerocopy/rxq_protocol.h"
#include "zerocopy/uapi.h"

namespace {

namespace fs = std::filesystem;
fs::path g_root;

void write(const std::string& target, const std::string& name, std::span<const std::byte> bytes) {
  fs::create_directories(g_root / target);
  std::ofstream(g_root / target / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s)); }

void remote_keys() {
  remora::RemoteKey k;
  k.region = remora::RegionId{7};
  k.generation = 3;
  k.secret = 0x0123456789abcdef;
  k.offset = 4096;
  k.length = 1 << 20;
  k.access = remora::Access::kRemoteRead | remora::Access::kRemoteWrite;
  write("remote_key_fuzz", "host_rw", k.serialize());
  k.access = remora::Access::kRemoteRead | remora::Access::kRemoteWrite | remora::Access::kRemoteAtomic;
  k.kind = remora::testing::kTestDeviceKind;
  k.offset = 0;
  k.length = UINT64_MAX;
  write("remote_key_fuzz", "device_whole", k.serialize());
}

void store() {
  using namespace remora::detail::store_protocol;
  const std::string value = "10.0.0.1:7100";
  std::vector<std::byte> b;
  encode_request(b, Op::kSet, "remora/rank/0", bytes_of(value), 0);
  write("store_fuzz", "set", b);
  b.clear();
  encode_request(b, Op::kGet, "remora/rank/1", {}, 30000);
  write("store_fuzz", "get", b);
  b.clear();
  std::vector<std::byte> keys;
  const std::string names[] = {"remora/rank/0", "remora/rank/1", "k"};
  encode_wait_keys(keys, names);
  encode_request(b, Op::kWait, "", keys, kNoTimeout);
  write("store_fuzz", "wait", b);
  b.clear();
  std::vector<std::byte> delta(8);
  delta[0] = std::byte{1};
  encode_request(b, Op::kAdd, "remora/arrivals", delta, 0);
  encode_request(b, Op::kCheck, "remora/arrivals", {}, 0);
  encode_request(b, Op::kRemove, "remora/arrivals", {}, 0);
  write("store_fuzz", "add_check_remove", b);
  b.clear();
  encode_reply(b, Reply::kOk, bytes_of(value));
  write("store_fuzz", "reply_ok", b);
  b.clear();
  encode_reply(b, Reply::kTimeout, bytes_of(std::string("store: timed out waiting for 1 of 2 key(s): \"k\"")));
  write("store_fuzz", "reply_timeout", b);
}

void rxq() {
  using namespace remora::zerocopy;
  rxq::BindFlowRequest req;
  req.flow.dst_port = 5000;
  req.flow.dst_addr = {10, 0, 0, 1};
  write("rxq_fuzz", "request_tcp4", rxq::encode(req));
  req.flow.ipv6 = true;
  req.flow.src_port = 41000;
  req.flow.dst_addr = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  req.flow.src_addr = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  write("rxq_fuzz", "request_tcp6", rxq::encode(req));
  rxq::BindFlowReply rep;
  rep.binding_id = 4;
  rep.queue = 15;
  rep.rule_location = 1023;
  rep.dmabuf_size = 64 << 20;
  write("rxq_fuzz", "reply_ok", rxq::encode(rep));
  rep = {};
  rep.error = 95;
  rep.flags = rxq::kFlagStandin | rxq::kFlagRuleRefused;
  rep.message = "eth0 has no header split (ethtool -G eth0 tcp-data-split on)";
  write("rxq_fuzz", "reply_refused", rxq::encode(rep));
  write("rxq_fuzz", "request_dmabuf", rxq::encode(rxq::BindDmabufRequest{.dmabuf_size = 256 << 20}));
  rep = {};
  rep.type = rxq::kTypeBindDmabufReply;
  rep.binding_id = 5;
  rep.queue = 14;
  rep.rule_location = rxq::kNoRule;
  rep.dmabuf_size = 256 << 20;
  rep.flags = rxq::kFlagClientDmabuf;
  write("rxq_fuzz", "reply_dmabuf", rxq::encode(rep));
  write("rxq_fuzz", "request_reserve_queue", rxq::encode(rxq::ReserveQueueRequest{}));
  rep = {};
  rep.type = rxq::kTypeReserveQueueReply;
  rep.binding_id = 2;  // the ifindex
  rep.queue = 13;
  rep.rule_location = rxq::kNoRule;
  rep.flags = rxq::kFlagClientZcrx | rxq::kFlagStandin;
  write("rxq_fuzz", "reply_reserve_queue", rxq::encode(rep));
  rep = {};
  rep.binding_id = 2;  // a zcrx client's flow: the ifindex again, no size
  rep.queue = 13;
  rep.rule_location = 1022;
  rep.flags = rxq::kFlagClientZcrx;
  write("rxq_fuzz", "reply_flow_zcrx", rxq::encode(rep));
}

/// The 8-byte prefix devmem_rx_fuzz reads, then control messages as the kernel lays
/// them out.
void devmem_rx() {
  using remora::zerocopy::uapi::DmabufCmsg;
  struct Frag {
    int type;
    DmabufCmsg body;
  };
  auto seed = [](const std::string& name, uint32_t received, uint8_t flags, const std::vector<Frag>& frags) {
    std::vector<cmsghdr> control(frags.size() * CMSG_SPACE(sizeof(DmabufCmsg)) / sizeof(cmsghdr) + 1);
    msghdr msg{};
    msg.msg_control = control.data();
    msg.msg_controllen = frags.size() * CMSG_SPACE(sizeof(DmabufCmsg));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    for (const auto& f : frags) {
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = f.type;
      c->cmsg_len = CMSG_LEN(sizeof(DmabufCmsg));
      std::memcpy(CMSG_DATA(c), &f.body, sizeof f.body);
      c = CMSG_NXTHDR(&msg, c);
    }
    std::vector<std::byte> b(8);
    std::memcpy(b.data(), &received, 4);
    b[4] = std::byte{flags};
    b[5] = std::byte{5};  // binding ids 5 and 9 are ours
    b[6] = std::byte{9};
    b[7] = std::byte{2};
    const auto* p = reinterpret_cast<const std::byte*>(control.data());
    b.insert(b.end(), p, p + msg.msg_controllen);
    write("devmem_rx_fuzz", name, b);
  };
  using remora::zerocopy::uapi::kScmDevmemDmabuf;
  using remora::zerocopy::uapi::kScmDevmemLinear;
  seed("dmabuf_two", 8192, 0,
       {{kScmDevmemDmabuf, {0, 4096, 1, 5, 0}}, {kScmDevmemDmabuf, {65536, 4096, 2, 9, 0}}});
  seed("mixed_linear", 4196, 2,
       {{kScmDevmemLinear, {0, 100, 0, 0, 0}}, {kScmDevmemDmabuf, {4096, 4096, 3, 5, 0}}});
  seed("truncated", 4096, 1, {{kScmDevmemDmabuf, {0, 4096, 1, 5, 0}}});
}

void nccl_handle() {
  using namespace remora::nccl_plugin;
  Handle h{};
  h.magic = kHandleMagic;
  h.version = kHandleVersion;
  h.port = 43210;
  std::snprintf(h.host, sizeof h.host, "%s", "10.1.2.3");
  for (size_t i = 0; i < h.secret.size(); ++i) h.secret[i] = static_cast<uint8_t>(i * 17 + 3);
  std::vector<std::byte> b(NCCL_NET_HANDLE_MAXSIZE);
  encode_handle(h, std::span<std::byte, NCCL_NET_HANDLE_MAXSIZE>(b.data(), b.size()));
  write("nccl_handle_fuzz", "listen_ipv4", b);
  std::snprintf(h.host, sizeof h.host, "%s", "[fe80::1%eth0]");
  h.stage = 3;
  encode_handle(h, std::span<std::byte, NCCL_NET_HANDLE_MAXSIZE>(b.data(), b.size()));
  write("nccl_handle_fuzz", "connecting_ipv6", b);
  const Hello hello{kHandleMagic, h.secret};
  write("nccl_handle_fuzz", "hello", std::as_bytes(std::span(&hello, 1)));
}

// The NIXL plugin's three formats, each behind the byte that selects its decoder.
void nixl_wire() {
  using namespace remora::nixl_plugin;
  auto seed = [](const char* name, uint8_t which, std::span<const std::byte> body) {
    std::vector<std::byte> b{std::byte{which}};
    b.insert(b.end(), body.begin(), body.end());
    write("nixl_wire_fuzz", name, b);
  };
  const std::string info = encode_conn_info(
      {.host = "b16e5fa0-497a-49ee-ab09-0451f71a17bc/4026531833", .addresses = {"10.0.0.1:7100", "127.0.0.1:7100"}});
  seed("conn_info", 0, std::as_bytes(std::span(info.data(), info.size())));
  PublicData pd;
  pd.kind = MemKind::kVram;
  pd.base = 0x7f0000001000;
  pd.key.region = remora::RegionId{3};
  pd.key.generation = 2;
  pd.key.secret = 0x1122334455667788ULL;
  pd.key.length = 1 << 20;
  pd.key.access = remora::Access::kRemoteRead | remora::Access::kRemoteWrite;
  const std::string pub = encode_public_data(pd);
  seed("public_data", 1, std::as_bytes(std::span(pub.data(), pub.size())));
  const std::vector<std::byte> note = encode_notification("prefill-0", "request 42 done").value();
  seed("notification", 2, note);
}

// The handshake's AUTH messages, frames that carry a CRC-32C (REMORA_CHECKSUM), and the
// same-host frames (HOST, PULL, PULLED), valid and a few malformed ones.
void wire() {
  using namespace remora::wire;
  AuthMessage m{.step = AuthStep::kChallenge};
  for (size_t i = 0; i < m.nonce.size(); ++i) m.nonce[i] = std::byte(i * 7 + 1);
  write("wire_fuzz", "auth_challenge", encode_auth(m));
  m.step = AuthStep::kResponse;
  for (size_t i = 0; i < m.proof.size(); ++i) m.proof[i] = std::byte(i * 13 + 5);
  write("wire_fuzz", "auth_response", encode_auth(m));
  write("wire_fuzz", "auth_confirm", encode_auth({.step = AuthStep::kConfirm, .proof = m.proof}));
  write("wire_fuzz", "auth_refused", encode_auth({.step = AuthStep::kRefused}));

  auto frame = [](const Frame& f) {
    std::vector<std::byte> b(encoded_size(f));
    b.resize(encode(f, b));
    return b;
  };
  const std::string payload = "checksummed payload";
  write("wire_fuzz", "eager_crc",
        frame(EagerFrame{.tag = remora::Tag{9}, .payload = bytes_of(payload), .has_crc = true, .crc = 0x1234abcd}));
  write("wire_fuzz", "chunk_crc",
        frame(ChunkFrame{.recv_id = 3, .offset = 1 << 20, .length = 4096, .stream = 1, .has_crc = true, .crc = 7}));

  // Same-host pulls: each side's ident, the answer that allows PULLs, a PULL of each kind
  // it is sent for (a message's chunk, a put's chunk with its CRC) and their PULLEDs.
  HostFrame host{.pid = 4242, .boot_id = {}, .netns = 4026531840, .probe_address = 0x00007f3a12345678,
                 .probe_value = 0x9e3779b97f4a7c15, .can_pull = false};
  for (size_t i = 0; i < host.boot_id.size(); ++i) host.boot_id[i] = std::byte(i * 29 + 11);
  const auto host_ident = frame(host);
  write("wire_fuzz", "host", host_ident);
  host.can_pull = true;
  host.pid = 4243;
  const auto host_can_pull = frame(host);
  write("wire_fuzz", "host_can_pull", host_can_pull);
  const auto pull = frame(PullFrame{.recv_id = 5, .offset = 0, .length = 1 << 20, .address = 0x00007f3a00100000});
  write("wire_fuzz", "pull", pull);
  const auto pull_put_crc = frame(PullFrame{.recv_id = 2, .offset = 1 << 20, .length = 4096, .address = 0x00007f3a00200000,
                                            .kind = ChunkKind::kPut, .has_crc = true, .crc = 0x1234abcd});
  write("wire_fuzz", "pull_put_crc", pull_put_crc);
  const auto pulled = frame(PulledFrame{.recv_id = 5, .length = 1 << 20});
  write("wire_fuzz", "pulled", pulled);
  std::vector<std::byte> stream;
  for (const auto& f : {host_ident, host_can_pull, pull, pulled, pull_put_crc,
                        frame(PulledFrame{.recv_id = 2, .length = 4096, .kind = ChunkKind::kPut})}) {
    stream.insert(stream.end(), f.begin(), f.end());
  }
  write("wire_fuzz", "stream_same_host", stream);
  // Malformed: kind 3, a PULLED with the CRC flag (and room for a CRC), an empty PULL,
  // a HOST with a nonzero reserved field.
  auto bad = pull;
  bad[1] = std::byte{0x03};
  write("wire_fuzz", "bad_pull_kind3", bad);
  bad = pulled;
  bad[1] = std::byte{0x80};
  bad[4] = std::byte(kPulledBodySize + kCrcSize);
  bad.insert(bad.end(), 4, std::byte{0});
  write("wire_fuzz", "bad_pulled_crc", bad);
  write("wire_fuzz", "bad_pull_empty", frame(PullFrame{.recv_id = 5, .offset = 0, .length = 0, .address = 0x1000}));
  bad = host_ident;
  bad[kFrameHeaderSize + 4] = std::byte{1};
  write("wire_fuzz", "bad_host_reserved", bad);

  // The shared-memory channel's set-up: an OFFER naming two descriptors, the ACCEPT and
  // SWITCH that follow it, a DECLINE with its reason; all four as one stream; op 5.
  const auto shm_offer = frame(ShmFrame{.op = ShmOp::kOffer, .ring_fd = 17, .wake_fd = 18});
  const auto shm_accept = frame(ShmFrame{.op = ShmOp::kAccept});
  const auto shm_switch = frame(ShmFrame{.op = ShmOp::kSwitch});
  const auto shm_decline = frame(ShmFrame{.op = ShmOp::kDecline, .code = remora::StatusCode::kAccessDenied});
  write("wire_fuzz", "shm_offer", shm_offer);
  write("wire_fuzz", "shm_decline", shm_decline);
  stream.clear();
  for (const auto& f : {shm_offer, shm_accept, shm_switch, shm_decline})
    stream.insert(stream.end(), f.begin(), f.end());
  write("wire_fuzz", "stream_shm", stream);
  bad = shm_accept;
  bad[kFrameHeaderSize] = std::byte{5};
  write("wire_fuzz", "bad_shm_op5", bad);

  // Segmented requests: a PUT and a GET naming two pieces of a key's window.
  const std::vector<remora::wire::Segment> pieces = {{.offset = 0x1000, .length = 0x30000},
                                                     {.offset = 0x10, .length = 3}};
  const std::vector<std::byte> list = remora::wire::encode_segments(pieces);
  write("wire_fuzz", "put_segments",
        frame(PutFrame{.op_id = 5, .offset = 0, .length = 0x30003, .segments = remora::wire::SegmentList(list)}));
  write("wire_fuzz", "get_segments",
        frame(GetFrame{.op_id = 6, .offset = 0, .length = 0x30003, .segments = remora::wire::SegmentList(list)}));

  // Direct mappings: a MAP REQUEST, its GRANT and a REFUSE as one stream.
  stream = frame(remora::wire::MapFrame{.op = remora::wire::MapOp::kRequest});
  for (const auto& f :
       {frame(remora::wire::MapFrame{.op = remora::wire::MapOp::kGrant, .fd = 7, .region_bytes = 1 << 22}),
        frame(remora::wire::MapFrame{.op = remora::wire::MapOp::kRefuse, .code = remora::StatusCode::kUnsupported}),
        frame(remora::wire::MapFrame{.op = remora::wire::MapOp::kCredit, .count = 64}),
        frame(remora::wire::MapFrame{.op = remora::wire::MapOp::kAck, .count = 1}),
        frame(remora::wire::PlacedFrame{.offset = 0x40, .length = 8, .notify = 7})})
    stream.insert(stream.end(), f.begin(), f.end());
  write("wire_fuzz", "stream_map", stream);
  // The short form: a numbered GRANT, then a PLACED_SHORT naming that number.
  stream =
      frame(remora::wire::MapFrame{.op = remora::wire::MapOp::kGrant, .fd = 7, .grant = 1, .region_bytes = 1 << 22});
  const auto short_placed =
      frame(remora::wire::PlacedShortFrame{.grant = 1, .length = 8, .offset = 0x40, .notify = 7, .handled = 1});
  stream.insert(stream.end(), short_placed.begin(), short_placed.end());
  write("wire_fuzz", "stream_map_short", stream);

  // A liveness probe (role 3): a control HELLO's fields.
  write("wire_fuzz", "hello_probe",
        encode_hello(Hello{.version = 1, .role = Role::kProbe, .stream_count = 1, .rma_window = 1}));

  // Failover and resumption: RECEIVED, RETIRE, REJOINED and HANDLED as one stream (a
  // resumed connection's first frame opens it), and a resume HELLO (role 4).
  stream = frame(HandledFrame{.bytes = 4096, .resumed = true});
  for (const auto& f : {frame(ReceivedFrame{.stream = 1, .chunks = 7}), frame(RetireFrame{.stream = 1, .chunks = 7}),
                        frame(RejoinedFrame{.stream = 1}), frame(HandledFrame{.bytes = 1 << 20})})
    stream.insert(stream.end(), f.begin(), f.end());
  write("wire_fuzz", "stream_failover", stream);
  write("wire_fuzz", "hello_resume",
        encode_hello(Hello{.version = 1,
                           .role = Role::kResume,
                           .endpoint_id = 0x1122334455667788,
                           .attach_token = 0x99AABBCCDDEEFF00,
                           .stream_count = 2,
                           .rma_window = 1}));
}

/// Programs for the ring (tests/fuzz/shm_ring_fuzz.cc reads them): capacity, then ops
/// 0 write / 1, 2 read / 3 forge the head / 4 forge the tail / 5 forge the flags, each
/// size as two bytes (kind, value).
void shm_ring() {
  auto program = [](std::initializer_list<uint8_t> ops) {
    std::vector<std::byte> b;
    for (uint8_t op : ops) b.push_back(std::byte{op});
    return b;
  };
  // 4 KiB: write 100, read 60, write to the brim (capacity-8+8), read it all (wraps).
  write("shm_ring_fuzz", "write_read_wrap", program({0, 0, 0, 100, 1, 0, 60, 0, 1, 8, 2, 2, 0xff, 1, 2, 0xff}));
  // 8 KiB: forged flags between a write and a read, then a forged head and a read.
  write("shm_ring_fuzz", "forged_flags_then_head",
        program({1, 0, 0, 200, 5, 1,   0, 0, 0,    0, 0, 0, 0, 1, 0, 0, 0, 0,
                 0, 0, 0, 1,   0, 200, 3, 0, 0x20, 0, 0, 0, 0, 0, 0, 2, 0, 255}));
  // 16 KiB: a tail forged ahead of the head, then a write.
  write("shm_ring_fuzz", "forged_tail", program({2, 0, 0, 10, 4, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 50}));
}

/// Sealed streams: the cipher byte, then two records (counters 0 and 1) sealed under
/// the harness's key; and one cut inside its second record.
void sealed() {
  using remora::net::SealCipher;
  // The cipher byte as seal_fuzz reads it: 0 ChaCha20-Poly1305, 1 AES-256-GCM, 2 AEGIS-256,
  // 3 AEGIS-128L.
  for (const auto& [cipher, byte] :
       {std::pair{SealCipher::kChacha20Poly1305, uint8_t{0}}, std::pair{SealCipher::kAes256Gcm, uint8_t{1}},
        std::pair{SealCipher::kAegis256, uint8_t{2}}, std::pair{SealCipher::kAegis128l, uint8_t{3}}}) {
    if (!remora::net::cipher_available(cipher)) continue;
    std::vector<std::byte> plain(300);
    for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<std::byte>(i * 13);
    std::vector<std::byte> b{std::byte{byte}};
    for (uint64_t counter = 0; counter < 2; ++counter) {
      const auto record = remora::net::seal_record(cipher, remora::fuzz::seal_fuzz_key(), counter, plain);
      b.insert(b.end(), record.begin(), record.end());
    }
    const std::string name(remora::net::cipher_name(cipher));
    write("seal_fuzz", name + "_two_records", b);
    b.resize(b.size() - 5);
    write("seal_fuzz", name + "_cut", b);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  wire();
  remote_keys();
  store();
  rxq();
  devmem_rx();
  nccl_handle();
  nixl_wire();
  sealed();
  shm_ring();
  return 0;
}
