#include "runtime/topology/launch_info.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>

#include "runtime/topology/tcp_store.h"

namespace zs {
namespace {

using Env = std::map<std::string, std::string>;

StatusOr<LaunchInfo> Detect(const Env& env) {
  return DetectLaunchFrom([&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

// The error message of a detection that must fail.
std::string ErrorOf(const Env& env) {
  auto info = Detect(env);
  EXPECT_FALSE(info.ok()) << info->ToString();
  if (info.ok()) return "";
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  return info.status().message();
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(LaunchInfoTest, NothingSetIsASingleRank) {
  LaunchInfo info = Detect({}).value();
  EXPECT_EQ(info.launcher, "single");
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 1);
  EXPECT_EQ(info.rendezvous, "");
}

TEST(LaunchInfoTest, Zerorun) {
  LaunchInfo info = Detect({{"ZS_RANK", "2"},
                            {"ZS_WORLD_SIZE", "4"},
                            {"ZS_LOCAL_RANK", "0"},
                            {"ZS_LOCAL_SIZE", "2"},
                            {"ZS_RENDEZVOUS", "/tmp/rdzv"}})
                        .value();
  EXPECT_EQ(info.launcher, "zerorun");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 2);
  EXPECT_TRUE(info.local_known);
  EXPECT_EQ(info.rendezvous, "/tmp/rdzv");
}

TEST(LaunchInfoTest, ZerorunWithoutLocalVariablesGuessesOneHost) {
  LaunchInfo info =
      Detect({{"ZS_RANK", "1"}, {"ZS_WORLD_SIZE", "3"}, {"ZS_RENDEZVOUS", "tcp://h:1234"}}).value();
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 3);
  EXPECT_FALSE(info.local_known);
}

TEST(LaunchInfoTest, OursWinOverOtherLaunchers) {
  LaunchInfo info = Detect({{"ZS_RANK", "1"},
                            {"ZS_WORLD_SIZE", "2"},
                            {"ZS_RENDEZVOUS", "/r"},
                            {"OMPI_COMM_WORLD_RANK", "0"},
                            {"OMPI_COMM_WORLD_SIZE", "5"}})
                        .value();
  EXPECT_EQ(info.launcher, "zerorun");
  EXPECT_EQ(info.world_size, 2);
}

TEST(LaunchInfoTest, ZerorunErrorsNameTheVariables) {
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", "1"}}), "ZS_RANK='1' is set but ZS_WORLD_SIZE is not");
  EXPECT_CONTAINS(ErrorOf({{"ZS_WORLD_SIZE", "4"}}), "ZS_WORLD_SIZE='4' is set but ZS_RANK");
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", "one"}, {"ZS_WORLD_SIZE", "4"}}),
                  "ZS_RANK='one' is not an integer");
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", "1"}, {"ZS_WORLD_SIZE", "4k"}}),
                  "ZS_WORLD_SIZE='4k' is not an integer");
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", " 1"}, {"ZS_WORLD_SIZE", "4"}}), "ZS_RANK=' 1'");
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", "4"}, {"ZS_WORLD_SIZE", "4"}, {"ZS_RENDEZVOUS", "/r"}}),
                  "ZS_RANK=4 is outside 0..3 (ZS_WORLD_SIZE=4)");
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", "-1"}, {"ZS_WORLD_SIZE", "4"}, {"ZS_RENDEZVOUS", "/r"}}),
                  "ZS_RANK=-1 is outside");
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", "0"}, {"ZS_WORLD_SIZE", "0"}}),
                  "ZS_WORLD_SIZE=0 must be at least 1");
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", "0"}, {"ZS_WORLD_SIZE", "2"}, {"ZS_LOCAL_RANK", "0"}}),
                  "ZS_LOCAL_RANK and ZS_LOCAL_SIZE must be set together (only ZS_LOCAL_RANK");
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", "0"},
                           {"ZS_WORLD_SIZE", "4"},
                           {"ZS_LOCAL_RANK", "2"},
                           {"ZS_LOCAL_SIZE", "2"},
                           {"ZS_RENDEZVOUS", "/r"}}),
                  "ZS_LOCAL_RANK=2 is outside 0..1 (ZS_LOCAL_SIZE=2)");
  EXPECT_CONTAINS(ErrorOf({{"ZS_RANK", "0"},
                           {"ZS_WORLD_SIZE", "4"},
                           {"ZS_LOCAL_RANK", "0"},
                           {"ZS_LOCAL_SIZE", "8"},
                           {"ZS_RENDEZVOUS", "/r"}}),
                  "ZS_LOCAL_SIZE=8 is outside 1..4 (ZS_WORLD_SIZE=4)");
}

TEST(LaunchInfoTest, SeveralRanksNeedARendezvous) {
  const std::string zs = ErrorOf({{"ZS_RANK", "0"}, {"ZS_WORLD_SIZE", "2"}});
  EXPECT_CONTAINS(zs, "launched by zerorun as 2 ranks, but ZS_RENDEZVOUS is not set");
  EXPECT_CONTAINS(zs, "tcp://HOST:PORT");
  EXPECT_CONTAINS(ErrorOf({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
                  "launched by mpirun as 2 ranks, but ZS_RENDEZVOUS is not set");
  EXPECT_CONTAINS(ErrorOf({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}),
                  "launched by srun as 2 ranks, but ZS_RENDEZVOUS is not set");
  // One rank needs none, whoever launched it.
  LaunchInfo one = Detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).value();
  EXPECT_EQ(one.launcher, "srun");
  EXPECT_EQ(one.world_size, 1);
}

TEST(LaunchInfoTest, OpenMpi) {
  LaunchInfo info = Detect({{"OMPI_COMM_WORLD_RANK", "5"},
                            {"OMPI_COMM_WORLD_SIZE", "8"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                            {"SLURM_PROCID", "0"},  // inherited from an sbatch step
                            {"SLURM_NTASKS", "1"},
                            {"ZS_RENDEZVOUS", "tcp://node0:29500"}})
                        .value();
  EXPECT_EQ(info.launcher, "mpirun");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_EQ(info.rendezvous, "tcp://node0:29500");
  EXPECT_CONTAINS(ErrorOf({{"OMPI_COMM_WORLD_RANK", "5"}}),
                  "OMPI_COMM_WORLD_RANK='5' is set but OMPI_COMM_WORLD_SIZE is not");
  EXPECT_CONTAINS(ErrorOf({{"OMPI_COMM_WORLD_RANK", "5"},
                           {"OMPI_COMM_WORLD_SIZE", "8"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "x"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}),
                  "OMPI_COMM_WORLD_LOCAL_RANK='x' is not an integer");
}

TEST(LaunchInfoTest, Pmi) {
  LaunchInfo info = Detect({{"PMI_RANK", "3"},
                            {"PMI_SIZE", "4"},
                            {"MPI_LOCALRANKID", "1"},
                            {"MPI_LOCALNRANKS", "2"},
                            {"ZS_RENDEZVOUS", "/shared/rdzv"}})
                        .value();
  EXPECT_EQ(info.launcher, "mpirun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 2);
  EXPECT_CONTAINS(ErrorOf({{"PMI_RANK", "3"}, {"PMI_SIZE", "3"}, {"ZS_RENDEZVOUS", "/r"}}),
                  "PMI_RANK=3 is outside 0..2 (PMI_SIZE=3)");
}

TEST(LaunchInfoTest, Slurm) {
  LaunchInfo info = Detect({{"SLURM_PROCID", "5"},
                            {"SLURM_NTASKS", "7"},
                            {"SLURM_LOCALID", "1"},
                            {"SLURM_NODEID", "2"},
                            {"SLURM_TASKS_PER_NODE", "2(x2),3"},
                            {"ZS_RENDEZVOUS", "/shared/rdzv"}})
                        .value();
  EXPECT_EQ(info.launcher, "srun");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 7);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 3);
  EXPECT_TRUE(info.local_known);
  // The step's own layout wins over the allocation's.
  LaunchInfo step = Detect({{"SLURM_PROCID", "1"},
                            {"SLURM_NTASKS", "2"},
                            {"SLURM_LOCALID", "1"},
                            {"SLURM_NODEID", "0"},
                            {"SLURM_TASKS_PER_NODE", "4"},
                            {"SLURM_STEP_TASKS_PER_NODE", "2"},
                            {"ZS_RENDEZVOUS", "/r"}})
                        .value();
  EXPECT_EQ(step.local_size, 2);
  LaunchInfo guessed =
      Detect({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"ZS_RENDEZVOUS", "/r"}}).value();
  EXPECT_FALSE(guessed.local_known);
  EXPECT_EQ(guessed.local_rank, 1);
  EXPECT_EQ(guessed.local_size, 2);

  Env bad = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"},           {"SLURM_LOCALID", "1"},
             {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", "2(x"}, {"ZS_RENDEZVOUS", "/r"}};
  EXPECT_CONTAINS(ErrorOf(bad), "SLURM_TASKS_PER_NODE='2(x' is not like '2(x3),1'");
  bad["SLURM_TASKS_PER_NODE"] = "2,2";
  bad["SLURM_NODEID"] = "2";
  EXPECT_CONTAINS(ErrorOf(bad), "SLURM_NODEID=2 is past the 2 nodes");
  bad["SLURM_NODEID"] = "0";
  bad["SLURM_LOCALID"] = "2";
  EXPECT_CONTAINS(ErrorOf(bad), "SLURM_LOCALID=2 is outside 0..1");
}

TEST(LaunchInfoTest, DetectLaunchReadsTheProcessEnvironment) {
  ASSERT_EQ(::setenv("ZS_RANK", "0", 1), 0);
  ASSERT_EQ(::setenv("ZS_WORLD_SIZE", "1", 1), 0);
  auto info = DetectLaunch();
  ::unsetenv("ZS_RANK");
  ::unsetenv("ZS_WORLD_SIZE");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, "zerorun");
}

TEST(LaunchInfoTest, OpenStoreSingleRankIsInProcess) {
  auto store = OpenStore(LaunchInfo{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  EXPECT_EQ((*store)->Get("k", std::chrono::milliseconds(10)).value(), "v");
}

TEST(LaunchInfoTest, OpenStoreDirectory) {
  const std::string dir = ::testing::TempDir() + "/launch_info_test_" + std::to_string(::getpid());
  LaunchInfo info;
  info.world_size = 2;
  info.rendezvous = dir;
  auto a = OpenStore(info);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  info.rank = 1;
  info.rendezvous = "file://" + dir;
  auto b = OpenStore(info);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->Describe(), dir);
  ASSERT_TRUE((*a)->Set("addr/0", "hello").ok());
  EXPECT_EQ((*b)->Get("addr/0", std::chrono::milliseconds(1000)).value(), "hello");
  std::filesystem::remove_all(dir);
}

TEST(LaunchInfoTest, OpenStoreTcp) {
  auto server = TcpStore::Serve(0).value();
  LaunchInfo info;
  info.rank = 1;
  info.world_size = 2;
  info.rendezvous = "tcp://127.0.0.1:" + std::to_string(server->port());
  auto client = OpenStore(info, std::chrono::milliseconds(5000));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->Set("from/1", "x").ok());
  EXPECT_EQ(server->Get("from/1", std::chrono::milliseconds(5000)).value(), "x");

  // Rank 0 serves: a port that is already taken is an error naming it.
  info.rank = 0;
  auto taken = OpenStore(info);
  ASSERT_FALSE(taken.ok());
  EXPECT_CONTAINS(taken.status().message(),
                  "cannot serve the tcp store on port " + std::to_string(server->port()));
}

TEST(LaunchInfoTest, OpenStoreBadAddresses) {
  LaunchInfo info;
  info.world_size = 2;
  info.rendezvous = "tcp://host:99999";
  auto bad_port = OpenStore(info);
  ASSERT_FALSE(bad_port.ok());
  EXPECT_CONTAINS(bad_port.status().message(), "ZS_RENDEZVOUS: 'tcp://host:99999' is not a tcp");
  info.rendezvous = "tcp://hostonly";
  EXPECT_FALSE(OpenStore(info).ok());
  info.rendezvous = "http://example.com/x";
  auto scheme = OpenStore(info);
  ASSERT_FALSE(scheme.ok());
  EXPECT_CONTAINS(scheme.status().message(), "is neither a directory nor tcp://host:port");
  info.rendezvous = "";
  EXPECT_FALSE(OpenStore(info).ok());
}

}  // namespace
}  // namespace zs
