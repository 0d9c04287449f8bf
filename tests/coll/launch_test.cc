// Launcher detection: every launcher's variables, precedence, store address sources and
// the malformed values that must fail naming the variable.
#include "remora/launch.h"

#include <map>

#include <gtest/gtest.h>

namespace remora {
namespace {

using Env = std::map<std::string, std::string, std::less<>>;

Result<LaunchInfo> detect(const Env& env) {
  return detect_launch([&](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

void expect_invalid(const Env& env, std::string_view names) {
  auto r = detect(env);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << (r.is_ok() ? r->launcher : "");
  EXPECT_NE(r.status().message().find(names), std::string::npos) << r.status().message();
}

TEST(Launch, Remora) {
  auto r = detect({{"REMORA_RANK", "2"}, {"REMORA_WORLD_SIZE", "4"}, {"REMORA_LOCAL_RANK", "2"},
                   {"REMORA_LOCAL_WORLD_SIZE", "4"}, {"REMORA_STORE", "127.0.0.1:29500"}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->launcher, "remora");
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->size, 4);
  EXPECT_EQ(r->local_rank, 2);
  EXPECT_EQ(r->local_size, 4);
  EXPECT_EQ(r->store_address, "127.0.0.1:29500");
}

TEST(Launch, Torchrun) {
  auto r = detect({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "node-0"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->launcher, "torchrun");
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->size, 8);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_size, 2);
  EXPECT_EQ(r->store_address, "node-0:29500");
}

TEST(Launch, OpenMpi) {
  auto r = detect({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "6"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                   {"REMORA_STORE", "[fe80::1]:7000"}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->launcher, "openmpi");
  EXPECT_EQ(r->rank, 5);
  EXPECT_EQ(r->size, 6);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_size, 3);
  EXPECT_EQ(r->store_address, "[fe80::1]:7000");
}

TEST(Launch, Mpich) {
  auto r = detect({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"},
                   {"MASTER_ADDR", "::1"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->launcher, "mpich");
  EXPECT_EQ(r->rank, 0);
  EXPECT_EQ(r->size, 2);
  EXPECT_EQ(r->local_size, 2);
  EXPECT_EQ(r->store_address, "[::1]:1234");  // an IPv6 MASTER_ADDR gets brackets
}

TEST(Launch, Slurm) {
  auto r = detect({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "3"},
                   {"REMORA_STORE", "head:29500"}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->launcher, "slurm");
  EXPECT_EQ(r->rank, 7);
  EXPECT_EQ(r->size, 16);
  EXPECT_EQ(r->local_rank, 3);
  EXPECT_GE(r->local_size, 4);  // not given: at least local_rank + 1
}

TEST(Launch, PrecedenceFollowsTheDocumentedOrder) {
  Env env{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"PMI_RANK", "2"}, {"PMI_SIZE", "3"},
          {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"RANK", "4"}, {"WORLD_SIZE", "5"},
          {"REMORA_RANK", "5"}, {"REMORA_WORLD_SIZE", "6"}, {"REMORA_STORE", "h:1"}};
  const std::vector<std::pair<std::string, std::vector<std::string>>> order{
      {"remora", {"REMORA_RANK", "REMORA_WORLD_SIZE"}}, {"torchrun", {"RANK", "WORLD_SIZE"}},
      {"openmpi", {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}}, {"mpich", {"PMI_RANK", "PMI_SIZE"}},
      {"slurm", {"SLURM_PROCID", "SLURM_NTASKS"}}};
  int expected_rank = 5;
  for (const auto& [name, vars] : order) {
    auto r = detect(env);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->launcher, name);
    EXPECT_EQ(r->rank, expected_rank--);
    env.erase(vars[0]);  // an incomplete set is skipped
  }
  expect_invalid(env, "no launcher environment");
}

TEST(Launch, RemoraStoreWinsOverMaster) {
  auto r = detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"REMORA_STORE", "a:1"}, {"MASTER_ADDR", "b"},
                   {"MASTER_PORT", "2"}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->store_address, "a:1");
}

TEST(Launch, SizeOneNeedsNoStore) {
  auto r = detect({{"REMORA_RANK", "0"}, {"REMORA_WORLD_SIZE", "1"}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->store_address, "");
  EXPECT_EQ(r->local_rank, 0);
  EXPECT_EQ(r->local_size, 1);
}

TEST(Launch, MalformedValuesNameTheVariable) {
  const Env store{{"REMORA_STORE", "h:1"}};
  auto with = [&](Env e) {
    e.insert(store.begin(), store.end());
    return e;
  };
  expect_invalid(with({{"REMORA_RANK", "x"}, {"REMORA_WORLD_SIZE", "2"}}), "REMORA_RANK");
  expect_invalid(with({{"REMORA_RANK", "-1"}, {"REMORA_WORLD_SIZE", "2"}}), "REMORA_RANK");
  expect_invalid(with({{"REMORA_RANK", "1x"}, {"REMORA_WORLD_SIZE", "2"}}), "REMORA_RANK");
  expect_invalid(with({{"REMORA_RANK", "0"}, {"REMORA_WORLD_SIZE", "0"}}), "REMORA_WORLD_SIZE");
  expect_invalid(with({{"REMORA_RANK", "0"}, {"REMORA_WORLD_SIZE", "99999999999999999999"}}), "REMORA_WORLD_SIZE");
  expect_invalid(with({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "RANK=2 is not below WORLD_SIZE=2");
  expect_invalid(with({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "zz"}}), "MPI_LOCALRANKID");
  expect_invalid(with({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                 "OMPI_COMM_WORLD_LOCAL_RANK");
  expect_invalid(with({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}}),
                 "OMPI_COMM_WORLD_LOCAL_SIZE");
  expect_invalid(with({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "5"}}), "SLURM_LOCALID");
}

TEST(Launch, StoreAddressProblemsNameTheVariable) {
  expect_invalid({{"REMORA_RANK", "0"}, {"REMORA_WORLD_SIZE", "2"}, {"REMORA_STORE", "nocolon"}}, "REMORA_STORE");
  expect_invalid({{"REMORA_RANK", "0"}, {"REMORA_WORLD_SIZE", "2"}, {"REMORA_STORE", "h:0"}}, "REMORA_STORE");
  expect_invalid({{"REMORA_RANK", "0"}, {"REMORA_WORLD_SIZE", "2"}, {"REMORA_STORE", "h:70000"}}, "REMORA_STORE");
  expect_invalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "port"}}, "MASTER_PORT");
  expect_invalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT");
  expect_invalid({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "MASTER_ADDR");
  expect_invalid({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "REMORA_STORE");
  expect_invalid({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}}, "REMORA_STORE");
}

TEST(Launch, EmptyVariablesCountAsUnset) {
  auto r = detect({{"REMORA_RANK", ""}, {"REMORA_WORLD_SIZE", "3"}, {"RANK", "1"}, {"WORLD_SIZE", "2"},
                   {"REMORA_STORE", "h:1"}});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->launcher, "torchrun");
}

}  // namespace
}  // namespace remora
