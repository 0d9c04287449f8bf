// `remora doctor` end to end: the JSON document's structure (every answer with state,
// detail, reason, fix, errno, errno_name, kernel_message), loopback reported with the
// kernel's reasons, CUDA honestly unprobed, and the exit code: 3 when no device path
// exists (as here) and the same number in the JSON, 1 for an interface that does not
// exist; the human report; and the report inside a network namespace with a veth pair,
// where the veth's bind attempts are refused by the kernel and say so.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "itest_util.h"
#include "support/netns.h"
#include "support/process.h"

namespace remora::itest {
namespace {

struct DoctorRun {
  int exit_code = -1;
  std::string out;
};

/// Runs `remora doctor` with `args` (behind `prefix`, e.g. ip netns exec) to its end;
/// stdout only, so the JSON parses (stderr goes to the test's).
DoctorRun doctor(std::vector<std::string> args, std::vector<std::string> prefix = {},
                 std::vector<std::string> env = {}) {
  std::vector<std::string> argv = std::move(prefix);
  argv.push_back(REMORA_TOOL_PATH);
  argv.push_back("doctor");
  argv.insert(argv.end(), args.begin(), args.end());
  Process p({.argv = argv, .env = std::move(env), .capture_stderr = false});
  EXPECT_TRUE(p.ok()) << p.error();
  DoctorRun r;
  r.out = p.read_all(std::chrono::seconds(60));
  auto st = p.wait(std::chrono::seconds(10));
  if (!st) {
    p.kill_and_reap();
    ADD_FAILURE() << "remora doctor did not finish";
    return r;
  }
  EXPECT_TRUE(WIFEXITED(*st)) << Process::describe(*st);
  r.exit_code = WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
  return r;
}

void expect_answer(const nlohmann::json& a, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(a.is_object()) << a.dump();
  for (const char* key : {"state", "detail", "reason", "fix", "kernel_message"}) {
    ASSERT_TRUE(a.contains(key) && a[key].is_string()) << key << " in " << a.dump();
  }
  ASSERT_TRUE(a.contains("errno") && a["errno"].is_number_integer()) << a.dump();
  ASSERT_TRUE(a.contains("errno_name")) << a.dump();
  const std::string state = a["state"];
  ASSERT_TRUE(state == "yes" || state == "no" || state == "unknown") << state;
  if (state == "yes") {
    EXPECT_FALSE(a["detail"].get<std::string>().empty()) << "a yes says what it found: " << a.dump();
  } else {
    EXPECT_FALSE(a["reason"].get<std::string>().empty()) << "every no says why: " << a.dump();
  }
  if (a["errno"].get<int>() != 0) {
    EXPECT_TRUE(a["errno_name"].is_string() && a["errno_name"].get<std::string>().starts_with("E")) << a.dump();
  } else {
    EXPECT_TRUE(a["errno_name"].is_null()) << a.dump();
  }
}

const nlohmann::json* find_interface(const nlohmann::json& doc, const std::string& name) {
  for (const auto& i : doc["interfaces"]) {
    if (i["name"] == name) return &i;
  }
  return nullptr;
}

void expect_interface(const nlohmann::json& i) {
  const std::string name = i["name"];
  ASSERT_TRUE(i["ifindex"].is_number_unsigned()) << name;
  for (const char* key :
       {"driver", "header_split", "header_split_settable", "ntuple", "queues", "devmem_rx", "devmem_tx", "zcrx"}) {
    expect_answer(i[key], name + " " + key);
  }
  ASSERT_TRUE(i["queues"]["counts"].is_object()) << i.dump();
  ASSERT_TRUE(i["queues"]["counts"]["rx_queue_ids"].is_array()) << i.dump();
  ASSERT_TRUE(i["device_path"].is_boolean());
}

/// Checks the document and returns it.
nlohmann::json parse_report(const DoctorRun& r) {
  nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << "not JSON:\n" << r.out;
  if (doc.is_discarded()) return {};
  for (const char* key : {"remora_version", "kernel", "hardware_note"}) {
    EXPECT_TRUE(doc[key].is_string()) << key;
  }
  EXPECT_NE(doc["hardware_note"].get<std::string>().find("devmem-capable hardware"), std::string::npos);
  for (const char* key : {"dmabuf_source", "netdev_family", "ethtool_family", "io_uring", "msg_zerocopy", "zcrx_copy",
                          "kernel_tls", "sealing", "same_host_pulls", "same_host_shared_memory", "rxq", "cuda"}) {
    expect_answer(doc["host"][key], std::string("host ") + key);
  }
  // The ciphers REMORA_ENCRYPT has here: ChaCha20-Poly1305 always, and the one `on` takes.
  const auto& sealing = doc["host"]["sealing"];
  EXPECT_EQ(sealing["state"], "yes") << sealing.dump();
  EXPECT_NE(sealing["detail"].get<std::string>().find("chacha20poly1305"), std::string::npos) << sealing.dump();
  EXPECT_NE(sealing["detail"].get<std::string>().find("REMORA_ENCRYPT=on prefers"), std::string::npos)
      << sealing.dump();
  // Kernel TLS was tried on a real socket: a yes says it is not used; a no carries the
  // kernel's errno (ENOENT where the tls module is not built, as on this project's hosts).
  const auto& ktls = doc["host"]["kernel_tls"];
  if (ktls["state"] == "yes") {
    EXPECT_NE(ktls["detail"].get<std::string>().find("does not use it"), std::string::npos) << ktls.dump();
  } else {
    EXPECT_EQ(ktls["state"], "no") << ktls.dump();
    EXPECT_NE(ktls["errno"].get<int>(), 0) << ktls.dump();
    EXPECT_NE(ktls["reason"].get<std::string>().find("TCP_ULP"), std::string::npos) << ktls.dump();
  }
  // zcrx's device-less copy mode was registered for real: a kernel before 7.1 (as on this
  // project's machines) refuses it with EINVAL, and the fix names the kernel it needs.
  const auto& zcopy = doc["host"]["zcrx_copy"];
  if (zcopy["state"] == "no" && zcopy["errno_name"] == "EINVAL") {
    EXPECT_NE(zcopy["reason"].get<std::string>().find("ZCRX_REG_NODEV"), std::string::npos) << zcopy.dump();
    EXPECT_NE(zcopy["fix"].get<std::string>().find("Linux 7.1"), std::string::npos) << zcopy.dump();
  } else if (zcopy["state"] == "yes") {
    EXPECT_NE(zcopy["reason"].get<std::string>().find("nothing is zero-copy"), std::string::npos) << zcopy.dump();
  }
  // Same-host pulls and a sibling's memfd taken and mapped were tried for real between
  // two sibling processes. As root (CI), the kernel lets one take the other's memory
  // whatever Yama says: yes, both (unless the run turned them off: below).
  const bool same_host_off =
      doc["host"]["same_host_pulls"]["reason"].get<std::string>().starts_with("REMORA_SAME_HOST=off");
  if (::geteuid() == 0 && !same_host_off) {
    EXPECT_EQ(doc["host"]["same_host_pulls"]["state"], "yes") << doc["host"]["same_host_pulls"].dump();
    EXPECT_EQ(doc["host"]["same_host_shared_memory"]["state"], "yes") << doc["host"]["same_host_shared_memory"].dump();
  }
  // No GPU driver on the machines this runs on in CI: the driver's own reason. Where one
  // loads, a yes with its devices.
  if (doc["host"]["cuda"]["state"] == "no") {
    EXPECT_NE(doc["host"]["cuda"]["reason"].get<std::string>().find("CUDA driver"), std::string::npos)
        << doc["host"]["cuda"].dump();
  } else {
    EXPECT_EQ(doc["host"]["cuda"]["state"], "yes");
    EXPECT_TRUE(doc["host"]["cuda"]["devices"].is_array());
  }
  EXPECT_TRUE(doc["host"]["cuda"]["unpack_kernel_built"].is_boolean());
  EXPECT_TRUE(doc["interfaces"].is_array());
  for (const auto& i : doc["interfaces"]) expect_interface(i);
  // The exit code is the document's, and 0 exactly when a device path was proven.
  EXPECT_EQ(doc["exit_code"], r.exit_code);
  bool any = false;
  for (const auto& i : doc["interfaces"]) any = any || i["device_path"].get<bool>();
  EXPECT_EQ(doc["device_path_available"], any);
  EXPECT_EQ(r.exit_code, any ? 0 : 3);
  return doc;
}

TEST(Doctor, JsonReportsLoopbackWithTheKernelsReasons) {
  const DoctorRun r = doctor({"--json"});
  const nlohmann::json doc = parse_report(r);
  ASSERT_FALSE(doc.is_null());
  const nlohmann::json* lo = find_interface(doc, "lo");
  ASSERT_NE(lo, nullptr) << "lo is missing from the report";
  // Loopback can do none of the device paths; each no carries what the kernel answered.
  EXPECT_EQ((*lo)["header_split"]["state"], "no");
  EXPECT_EQ((*lo)["ntuple"]["state"], "no");
  for (const char* key : {"devmem_rx", "devmem_tx"}) {
    EXPECT_EQ((*lo)[key]["state"], "no") << key;
    EXPECT_NE((*lo)[key]["errno"], 0) << key;
  }
  EXPECT_EQ((*lo)["devmem_tx"]["kernel_message"], "Driver does not support netmem TX");
  EXPECT_FALSE((*lo)["device_path"].get<bool>());
  // No NIC here binds, so no device path: exit code 3.
  EXPECT_EQ(r.exit_code, 3);
}

TEST(Doctor, OnlyTheNamedInterfacesAndAnUnknownOneFails) {
  const DoctorRun r = doctor({"--json", "-i", "lo"});
  const nlohmann::json doc = parse_report(r);
  ASSERT_EQ(doc["interfaces"].size(), 1u);
  EXPECT_EQ(doc["interfaces"][0]["name"], "lo");
  const DoctorRun bad = doctor({"--json", "-i", "remora-none0"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(bad.out.empty()) << "no half report on stdout: " << bad.out;
}

TEST(Doctor, WithoutBindAttemptsTheyAreNotTried) {
  const nlohmann::json doc = parse_report(doctor({"--json", "--no-bind", "-i", "lo"}));
  for (const char* key : {"devmem_rx", "devmem_tx", "zcrx"}) {
    EXPECT_EQ(doc["interfaces"][0][key]["state"], "unknown") << key;
    EXPECT_NE(doc["interfaces"][0][key]["reason"].get<std::string>().find("not tried"), std::string::npos) << key;
  }
}

TEST(Doctor, SaysWhetherAnRxqSteersDevmemReceiveAndHowToStartOne) {
  const nlohmann::json unset = parse_report(doctor({"--json", "--no-bind", "-i", "lo"}));
  EXPECT_EQ(unset["host"]["rxq"]["state"], "no");
  EXPECT_NE(unset["host"]["rxq"]["reason"].get<std::string>().find("REMORA_RXQ_SOCKET is unset"), std::string::npos)
      << unset["host"]["rxq"].dump();
  EXPECT_NE(unset["host"]["rxq"]["fix"].get<std::string>().find("remora rxq serve --ifname IF --socket PATH"),
            std::string::npos)
      << unset["host"]["rxq"].dump();
  const nlohmann::json gone =
      parse_report(doctor({"--json", "--no-bind", "-i", "lo"}, {"env", "REMORA_RXQ_SOCKET=/nonexistent/rxq.sock"}));
  EXPECT_EQ(gone["host"]["rxq"]["state"], "no");
  EXPECT_NE(gone["host"]["rxq"]["reason"].get<std::string>().find("connect to /nonexistent/rxq.sock: ENOENT"),
            std::string::npos)
      << gone["host"]["rxq"].dump();
}

TEST(Doctor, HumanReport) {
  const DoctorRun r = doctor({"-i", "lo"});
  EXPECT_EQ(r.exit_code, 3);
  for (const char* text :
       {"Note: Nothing in remora has run on devmem-capable hardware", "Interface lo (index", "devmem RX (bind-rx)",
        "rxq (devmem receive)",
        "kernel: EOPNOTSUPP", "CUDA driver", "Device zero-copy path: none", "Exit code 3"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << "missing '" << text << "' in:\n" << r.out;
  }
}

TEST(Doctor, VethInANetworkNamespaceIsRefusedWithReasons) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  const DoctorRun r = doctor({"--json"}, net.exec_prefix(net.ns_a()));
  const nlohmann::json doc = parse_report(r);
  ASSERT_FALSE(doc.is_null());
  // Only the namespace's own interfaces: its loopback and its end of the veth pair.
  ASSERT_EQ(doc["interfaces"].size(), 2u) << doc["interfaces"].dump();
  const nlohmann::json* veth = find_interface(doc, "rmr0");
  ASSERT_NE(veth, nullptr);
  EXPECT_EQ((*veth)["driver"]["detail"], "veth");
  for (const char* key : {"devmem_rx", "devmem_tx", "zcrx"}) {
    EXPECT_EQ((*veth)[key]["state"], "no") << key << ": " << (*veth)[key].dump();
    EXPECT_NE((*veth)[key]["errno"], 0) << key;
  }
  EXPECT_EQ((*veth)["devmem_tx"]["kernel_message"], "Driver does not support netmem TX");
  EXPECT_EQ(r.exit_code, 3);
  std::cout << "[ kernel   ] veth bind-rx: " << (*veth)["devmem_rx"]["reason"].get<std::string>() << "\n"
            << "[ kernel   ] veth zcrx: " << (*veth)["zcrx"]["reason"].get<std::string>() << "\n";
}

/// The rails section in a namespace with two veth pairs (rla0, rla1) and loopback.
TEST(Doctor, ListsTheRailsItWouldUseAndWhyNotTheOthers) {
  NetnsRails net(2);
  REMORA_NETNS_OR_SKIP(net);
  auto rails = [&](std::vector<std::string> env) {
    const DoctorRun r = doctor({"--json", "--no-bind"}, net.exec_prefix(net.ns_a()), std::move(env));
    EXPECT_EQ(r.exit_code, 3) << "the rails never change the exit code";
    const nlohmann::json doc = parse_report(r);
    if (doc.is_null() || !doc.contains("rails")) {
      ADD_FAILURE() << "no rails in " << r.out;
      return nlohmann::json();
    }
    for (const auto& [name, answer] : doc["rails"]["interfaces"].items()) expect_answer(answer, "rail " + name);
    return doc["rails"];
  };
  auto state = [](const nlohmann::json& j, const char* name) { return j["interfaces"][name]["state"]; };
  auto reason = [](const nlohmann::json& j, const char* name) { return j["interfaces"][name]["reason"]; };

  nlohmann::json j = rails({"REMORA_RAILS=rla"});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["setting"], "rla");
  EXPECT_EQ(j["error"], "");
  EXPECT_EQ(state(j, "rla0"), "yes");
  EXPECT_EQ(j["interfaces"]["rla0"]["detail"], net.addr_a(0) + "/24");
  EXPECT_EQ(state(j, "rla1"), "yes");
  EXPECT_EQ(j["interfaces"]["rla1"]["detail"], net.addr_a(1) + "/24");
  EXPECT_EQ(reason(j, "lo"), "not named by REMORA_RAILS");

  j = rails({"REMORA_RAILS=^rla1"});
  EXPECT_EQ(state(j, "rla0"), "yes");
  EXPECT_EQ(reason(j, "rla1"), "excluded by REMORA_RAILS");
  EXPECT_EQ(reason(j, "lo"), "loopback: taken only when REMORA_RAILS names it");

  j = rails({});  // unset: the interfaces that would be rails, and how to use them
  EXPECT_TRUE(j["setting"].is_null());
  for (const char* name : {"rla0", "rla1"}) {
    EXPECT_EQ(state(j, name), "no");
    EXPECT_NE(j["interfaces"][name]["fix"].get<std::string>().find("REMORA_RAILS=" + std::string(name)),
              std::string::npos);
  }

  j = rails({"REMORA_RAILS=ib"});  // what a context would refuse, with the same words
  EXPECT_NE(j["error"].get<std::string>().find("REMORA_RAILS='ib': matches no interface"), std::string::npos)
      << j.dump();
  EXPECT_EQ(reason(j, "rla0"), "not named by REMORA_RAILS");
}

TEST(Doctor, SameHostOffTurnsPullsAndSharedMemoryOffWithTheWayBack) {
  const DoctorRun r = doctor({"--json", "--no-bind", "-i", "lo"}, {}, {"REMORA_SAME_HOST=off"});
  const nlohmann::json doc = parse_report(r);
  ASSERT_FALSE(doc.is_null()) << r.out;
  for (const char* key : {"same_host_pulls", "same_host_shared_memory"}) {
    const auto& a = doc["host"][key];
    expect_answer(a, key);
    EXPECT_EQ(a["state"], "no") << a.dump();
    EXPECT_NE(a["reason"].get<std::string>().find("REMORA_SAME_HOST=off"), std::string::npos) << a.dump();
    EXPECT_NE(a["fix"].get<std::string>().find("unset REMORA_SAME_HOST"), std::string::npos) << a.dump();
  }
}

TEST(Doctor, SaysWhichThreadsMoveTheDataStreamsAndRefusesWhatAContextWould) {
  auto threads = [](std::vector<std::string> env) {
    const DoctorRun r = doctor({"--json", "--no-bind", "-i", "lo"}, {}, std::move(env));
    const nlohmann::json doc = parse_report(r);
    if (doc.is_null() || !doc.contains("rails") || !doc["rails"].contains("progress_threads")) {
      ADD_FAILURE() << "no rails.progress_threads in " << r.out;
      return nlohmann::json();
    }
    expect_answer(doc["rails"]["progress_threads"], "progress_threads");
    return doc["rails"]["progress_threads"];
  };
  // The default: one thread per rail, at most half the CPUs; without REMORA_RAILS one rail's
  // worth, the progress thread alone.
  nlohmann::json a = threads({});
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(a["state"], "no");
  EXPECT_NE(a["reason"].get<std::string>().find("REMORA_PROGRESS_THREADS=0 (one per rail, at most half the CPUs: 1 "),
            std::string::npos)
      << a.dump();

  a = threads({"REMORA_PROGRESS_THREADS=1"});
  EXPECT_EQ(a["state"], "no");
  EXPECT_NE(a["reason"].get<std::string>().find("REMORA_PROGRESS_THREADS=1: each context's progress thread alone"),
            std::string::npos)
      << a.dump();

  a = threads({"REMORA_PROGRESS_THREADS=3"});
  EXPECT_EQ(a["state"], "yes");
  EXPECT_NE(a["detail"].get<std::string>().find("2 workers send and receive"), std::string::npos) << a.dump();

  a = threads({"REMORA_PROGRESS_THREADS=65"});  // out of range: the context's own words
  EXPECT_EQ(a["state"], "no");
  EXPECT_NE(a["reason"].get<std::string>().find("REMORA_PROGRESS_THREADS"), std::string::npos) << a.dump();
  EXPECT_NE(a["reason"].get<std::string>().find("a context would refuse"), std::string::npos) << a.dump();
}

}  // namespace
}  // namespace remora::itest
