// TcpStore specifics: addresses, connection failures, a server that goes away, the connection
// pool. The Store contract itself is checked in store_test.cc.
#include "runtime/topology/tcp_store.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace zs {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLong{20'000};

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(TcpStoreTest, ParseAddress) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(TcpStore::ParseAddress("tcp://node-7.cluster:29500", &host, &port).ok());
  EXPECT_EQ(host, "node-7.cluster");
  EXPECT_EQ(port, 29500);
  ASSERT_TRUE(TcpStore::ParseAddress("10.0.0.2:1", &host, &port).ok());
  EXPECT_EQ(host, "10.0.0.2");
  EXPECT_EQ(port, 1);
  ASSERT_TRUE(TcpStore::ParseAddress("tcp://[::1]:65535", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 65535);
  for (const char* bad : {"tcp://host", "tcp://host:", "tcp://:80", "tcp://host:0",
                          "tcp://host:65536", "tcp://host:80x", "tcp://[::1]80", "tcp://[::1"}) {
    Status s = TcpStore::ParseAddress(bad, &host, &port);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_CONTAINS(s.message(), bad);
  }
}

TEST(TcpStoreTest, ServerAndClientDescribeThemselves) {
  auto server = TcpStore::Serve(0).value();
  EXPECT_TRUE(server->is_server());
  EXPECT_GT(server->port(), 0);
  auto client = TcpStore::Connect("127.0.0.1", server->port()).value();
  EXPECT_FALSE(client->is_server());
  EXPECT_EQ(client->Describe(), "tcp://127.0.0.1:" + std::to_string(server->port()));
}

TEST(TcpStoreTest, ConnectToNothingTimesOutNamingTheAddress) {
  int port = 0;
  {
    auto server = TcpStore::Serve(0).value();  // find a port that nobody listens on afterwards
    port = server->port();
  }
  TcpStoreOptions options;
  options.connect_timeout = milliseconds(100);
  auto client = TcpStore::Connect("127.0.0.1", port, options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_CONTAINS(
      client.status().message(),
      fmt::format("cannot reach the tcp store at tcp://127.0.0.1:{} within 100 ms", port));
}

TEST(TcpStoreTest, UnknownHostIsAnError) {
  TcpStoreOptions options;
  options.connect_timeout = milliseconds(100);
  auto client = TcpStore::Connect("no-such-host.invalid", 1234, options);
  ASSERT_FALSE(client.ok());
  EXPECT_CONTAINS(client.status().message(), "no-such-host.invalid");
}

TEST(TcpStoreTest, ClientRetriesUntilTheServerStarts) {
  int port = 0;
  {
    auto probe = TcpStore::Serve(0).value();
    port = probe->port();
  }
  std::unique_ptr<TcpStore> server;
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(50));
    auto s = TcpStore::Serve(port);
    if (s.ok()) {
      ASSERT_TRUE((*s)->Set("hello", "world").ok());
      server = std::move(*s);
    }
  });
  TcpStoreOptions options;
  options.connect_timeout = kLong;
  auto client = TcpStore::Connect("localhost", port, options);
  late.join();
  if (server == nullptr) GTEST_SKIP() << "port " << port << " was taken by someone else";
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ((*client)->Get("hello", kLong).value(), "world");
}

TEST(TcpStoreTest, ServerGoingAwayFailsWaitingClients) {
  auto server = TcpStore::Serve(0).value();
  TcpStoreOptions options;
  options.connect_timeout = milliseconds(200);  // for the calls after the server is gone
  auto client = TcpStore::Connect("127.0.0.1", server->port(), options).value();
  ASSERT_TRUE(client->Set("k", "v").ok());
  StatusOr<std::string> waited = std::string();
  std::thread waiter([&] { waited = client->Get("never", kLong); });
  // Give the request a moment to reach the server; either way the Get must fail, not hang.
  std::this_thread::sleep_for(milliseconds(20));
  server.reset();
  waiter.join();
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().code(), StatusCode::kUnavailable) << waited.status().ToString();
  EXPECT_CONTAINS(waited.status().message(), "did the serving rank exit?");
  // Later calls fail too, without hanging.
  Status after = client->Set("k2", "v");
  EXPECT_FALSE(after.ok());
  EXPECT_FALSE(client->Contains("k"));
}

TEST(TcpStoreTest, SecondServerOnTheSamePortFails) {
  auto server = TcpStore::Serve(0).value();
  auto second = TcpStore::Serve(server->port());
  ASSERT_FALSE(second.ok());
  EXPECT_CONTAINS(second.status().message(),
                  fmt::format("cannot serve the tcp store on port {}", server->port()));
}

TEST(TcpStoreTest, AServerThatNeverAnswersIsADeadline) {
  // A plain listening socket that accepts but never answers (the kernel completes the
  // handshake): the client gives up after its own timeout.
  auto probe = TcpStore::Serve(0).value();
  const int port = probe->port();
  probe.reset();
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(uint16_t(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    GTEST_SKIP() << "port " << port << " was taken by someone else";
  }
  ASSERT_EQ(::listen(fd, 4), 0);
  TcpStoreOptions options;
  options.op_timeout = milliseconds(50);
  options.io_slack = milliseconds(50);
  auto client = TcpStore::Connect("127.0.0.1", port, options).value();
  Status set = client->Set("k", "v");
  EXPECT_EQ(set.code(), StatusCode::kDeadlineExceeded) << set.ToString();
  EXPECT_CONTAINS(set.message(), "no answer for key 'k' within 50 ms");
  auto get = client->Get("k", milliseconds(10));
  EXPECT_EQ(get.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_CONTAINS(get.status().message(), "no answer for key 'k' within 60 ms");
  ::close(fd);
}

TEST(TcpStoreTest, GarbageFromAPeerDoesNotStopTheServer) {
  auto server = TcpStore::Serve(0).value();
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(uint16_t(server->port()));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const char garbage[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_GT(::send(fd, garbage, sizeof(garbage), 0), 0);
  auto client = TcpStore::Connect("127.0.0.1", server->port()).value();
  ASSERT_TRUE(client->Set("still", "serving").ok());
  EXPECT_EQ(server->Get("still", kLong).value(), "serving");
  ::close(fd);
}

}  // namespace
}  // namespace zs
