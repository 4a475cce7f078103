// TcpStore: the Store (store.h) served over TCP by one process, so ranks on many hosts can
// rendezvous without a shared file system (ZS_RENDEZVOUS=tcp://host:port).
//
// Contract
// - One process (rank 0) calls Serve(): it owns the table and a server thread that answers
//   the others on `port` on every interface (port 0 picks a free port; see port()). Its own
//   Set/Get go straight to the table. Every other process calls Connect(), which retries until
//   the server accepts or `connect_timeout` passes (the server may start later than a client).
// - Same semantics as every Store: write-once keys (a second Set is InvalidArgument), Get
//   blocks the calling thread until the key exists or its timeout passes (DeadlineExceeded
//   naming the key, the address and the time waited). The server enforces Get's timeout, so a
//   waiting client never leaves a half-answered request on its connection.
// - A lost server (the serving process exited or crashed) makes client calls fail with
//   Unavailable naming the address; a silent server fails them with DeadlineExceeded after the
//   operation's timeout plus `io_slack`.
// - Thread-safe: many threads may share one TcpStore. A client keeps a small pool of
//   connections (one per concurrently calling thread), so a thread blocked in Get never stops
//   another thread's Set.
// - The serving TcpStore must outlive every use of the store by the other processes:
//   destroying it stops the server and closes every client connection.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/topology/store.h"

namespace zs {

class TcpStoreServer;  // tcp_store.cc

struct TcpStoreOptions {
  // How long Connect (and each new pooled connection) keeps retrying a refused connection.
  std::chrono::milliseconds connect_timeout{60'000};
  // How long Set and Contains wait for the server's answer; Get waits its own timeout plus
  // io_slack.
  std::chrono::milliseconds op_timeout{60'000};
  std::chrono::milliseconds io_slack{10'000};
};

class TcpStore final : public Store {
 public:
  // Serves the table on `port` (0 = any free port) of every interface.
  static StatusOr<std::unique_ptr<TcpStore>> Serve(int port, TcpStoreOptions options = {});
  // Connects to the store served at host:port.
  static StatusOr<std::unique_ptr<TcpStore>> Connect(std::string host, int port,
                                                     TcpStoreOptions options = {});
  // Parses "tcp://host:port" (host may be a name, an IPv4 address or [IPv6]).
  static Status ParseAddress(std::string_view address, std::string* host, int* port);

  ~TcpStore() override;

  Status Set(std::string_view key, std::string_view value) override;
  StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout) override;
  bool Contains(std::string_view key) override;
  std::string Describe() const override;  // "tcp://host:port" (host "*" when serving)

  bool is_server() const { return server_ != nullptr; }
  int port() const { return port_; }

 private:
  TcpStore(std::string host, int port, TcpStoreOptions options);

  // Client side: one request/answer on a pooled connection.
  StatusOr<std::string> Call(uint8_t op, std::string_view key, std::string_view value,
                             std::chrono::milliseconds server_wait,
                             std::chrono::milliseconds client_wait, uint8_t* answer_code);
  StatusOr<int> AcquireConnection();
  void ReleaseConnection(int fd);

  const std::string host_;
  int port_;
  const TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;  // set when serving

  std::mutex pool_mu_;
  std::vector<int> idle_fds_;  // guarded by pool_mu_
};

}  // namespace zs
