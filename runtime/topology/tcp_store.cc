#include "runtime/topology/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <map>
#include <thread>

namespace zs {
namespace {

// Wire format (all integers in network byte order):
//   request: u32 body_length, then the body: u8 op, u32 wait_ms, u32 key_length, key, value
//   answer:  u32 body_length, then the body: u8 code, payload
// One request is outstanding per connection; the server answers a Get when the key appears or
// when wait_ms has passed (kTimeout), so the client's connection is always in step.
enum Op : uint8_t { kOpSet = 1, kOpGet = 2, kOpContains = 3 };
enum Answer : uint8_t { kOk = 0, kExists = 1, kTimeout = 2, kNo = 3, kMalformed = 4 };
constexpr uint32_t kMaxBody = 256u << 20;

using Clock = std::chrono::steady_clock;

void PutU32(std::string* out, uint32_t v) {
  const uint32_t n = htonl(v);
  out->append(reinterpret_cast<const char*>(&n), 4);
}

uint32_t GetU32(const char* p) {
  uint32_t n;
  std::memcpy(&n, p, 4);
  return ntohl(n);
}

std::string Frame(std::string_view body) {
  std::string out;
  out.reserve(4 + body.size());
  PutU32(&out, uint32_t(body.size()));
  out.append(body);
  return out;
}

// Writes all of `data`; false on error (errno set).
bool SendAll(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      return false;
    }
    done += size_t(n);
  }
  return true;
}

int MillisUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return int(std::min<int64_t>(left.count(), INT32_MAX));
}

}  // namespace

// ---- server ---------------------------------------------------------------------------------

class TcpStoreServer {
 public:
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(int port);
  ~TcpStoreServer();

  int port() const { return port_; }
  Status Set(std::string_view key, std::string_view value);
  StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout);
  bool Contains(std::string_view key);

 private:
  struct Conn {
    int fd = -1;
    std::string in;  // bytes received, not yet parsed
    bool waiting = false;
    std::string wait_key;
    Clock::time_point deadline;
  };

  TcpStoreServer() = default;
  void Loop();
  // Parses and answers the complete requests in c.in; false: close the connection.
  bool HandleInput(Conn& c);
  // Answers c's pending Get if its key appeared or its time ran out; false: close.
  bool MaybeAnswerWaiter(Conn& c);
  bool Answer(Conn& c, uint8_t code, std::string_view payload);
  // Inserts under mu_; false if the key existed.
  bool Insert(std::string_view key, std::string_view value);
  void Wake();

  int port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // self-pipe: a local Set or shutdown wakes the loop
  std::atomic<bool> stop_{false};
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string, std::less<>> values_;  // guarded by mu_
  std::vector<Conn> conns_;                                 // server thread only
};

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(int port) {
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(fmt::format("tcp store: port {} is not in 0..65535", port));
  }
  std::unique_ptr<TcpStoreServer> s(new TcpStoreServer());
  // Prefer a dual-stack IPv6 socket (accepts IPv4 too); fall back to IPv4 where IPv6 is off.
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int err = 0;
  if (fd >= 0) {
    int zero = 0, one = 1;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(uint16_t(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
      if (err == EADDRINUSE) {
        return UnavailableError(fmt::format(
            "cannot serve the tcp store on port {}: {} (is another job using it? pick another "
            "port in ZS_RENDEZVOUS)",
            port, std::strerror(err)));
      }
    }
  }
  if (fd < 0) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return IoError(fmt::format("tcp store: cannot create a socket: {}", std::strerror(errno)));
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(uint16_t(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      err = errno;
      ::close(fd);
      return UnavailableError(fmt::format(
          "cannot serve the tcp store on port {}: {} (is another job using it? pick another "
          "port in ZS_RENDEZVOUS)",
          port, std::strerror(err)));
    }
  }
  s->listen_fd_ = fd;
  if (::listen(fd, 512) != 0) {
    return IoError(
        fmt::format("tcp store: listen on port {} failed: {}", port, std::strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  s->port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(s->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return IoError(fmt::format("tcp store: pipe2 failed: {}", std::strerror(errno)));
  }
  s->thread_ = std::thread([raw = s.get()] { raw->Loop(); });
  return s;
}

TcpStoreServer::~TcpStoreServer() {
  stop_.store(true);
  Wake();
  if (thread_.joinable()) thread_.join();
  for (Conn& c : conns_) ::close(c.fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
}

void TcpStoreServer::Wake() {
  if (wake_[1] < 0) return;
  const char b = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);  // a full pipe already wakes the loop
}

bool TcpStoreServer::Insert(std::string_view key, std::string_view value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!values_.emplace(std::string(key), std::string(value)).second) return false;
  }
  cv_.notify_all();
  return true;
}

Status TcpStoreServer::Set(std::string_view key, std::string_view value) {
  if (!Insert(key, value)) {
    return InvalidArgumentError(
        fmt::format("tcp store served on port {}: key '{}' was already set", port_, key));
  }
  Wake();  // remote clients may be waiting for this key
  return OkStatus();
}

StatusOr<std::string> TcpStoreServer::Get(std::string_view key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return values_.find(key) != values_.end(); })) {
    return DeadlineExceededError(
        fmt::format("tcp store served on port {}: key '{}' did not appear within {} ms", port_, key,
                    timeout.count()));
  }
  return values_.find(key)->second;
}

bool TcpStoreServer::Contains(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.find(key) != values_.end();
}

bool TcpStoreServer::Answer(Conn& c, uint8_t code, std::string_view payload) {
  std::string body;
  body.reserve(1 + payload.size());
  body.push_back(char(code));
  body.append(payload);
  return SendAll(c.fd, Frame(body));
}

bool TcpStoreServer::MaybeAnswerWaiter(Conn& c) {
  if (!c.waiting) return true;
  std::string value;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(c.wait_key);
    if (it != values_.end()) {
      found = true;
      value = it->second;
    }
  }
  if (found) {
    c.waiting = false;
    return Answer(c, kOk, value);
  }
  if (Clock::now() >= c.deadline) {
    c.waiting = false;
    return Answer(c, kTimeout, "");
  }
  return true;
}

bool TcpStoreServer::HandleInput(Conn& c) {
  while (!c.waiting && c.in.size() >= 4) {
    const uint32_t body_len = GetU32(c.in.data());
    if (body_len > kMaxBody || body_len < 9) return false;  // not one of our clients
    if (c.in.size() < 4 + size_t(body_len)) return true;
    const char* body = c.in.data() + 4;
    const uint8_t op = uint8_t(body[0]);
    const uint32_t wait_ms = GetU32(body + 1);
    const uint32_t key_len = GetU32(body + 5);
    if (size_t(key_len) > body_len - 9) return false;
    std::string key(body + 9, key_len);
    std::string_view value(body + 9 + key_len, body_len - 9 - key_len);
    bool ok = true;
    switch (op) {
      case kOpSet:
        ok = Answer(c, Insert(key, value) ? kOk : kExists, "");
        break;
      case kOpContains:
        ok = Answer(c, Contains(key) ? kOk : kNo, "");
        break;
      case kOpGet:
        c.waiting = true;
        c.wait_key = std::move(key);
        c.deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
        ok = MaybeAnswerWaiter(c);
        break;
      default:
        ok = Answer(c, kMalformed, "");
        break;
    }
    c.in.erase(0, 4 + size_t(body_len));
    if (!ok) return false;
  }
  return true;
}

void TcpStoreServer::Loop() {
  std::vector<pollfd> fds;
  char buffer[64 * 1024];
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    int timeout_ms = -1;
    for (const Conn& c : conns_) {
      // A waiting connection is not read further (one request at a time), but a hang-up
      // still shows as POLLHUP/POLLERR.
      fds.push_back({c.fd, short(c.waiting ? 0 : POLLIN), 0});
      if (c.waiting) {
        const int left = MillisUntil(c.deadline);
        timeout_ms = timeout_ms < 0 ? left : std::min(timeout_ms, left);
      }
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents) {
      while (::read(wake_[0], buffer, sizeof(buffer)) > 0) {
      }
    }
    if (stop_.load()) break;
    std::vector<bool> close_conn(conns_.size(), false);
    for (size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      const short rev = fds[2 + i].revents;
      if (rev & POLLIN) {
        ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
        if (n <= 0) {
          if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
          close_conn[i] = true;
          continue;
        }
        c.in.append(buffer, size_t(n));
        if (!HandleInput(c)) close_conn[i] = true;
      } else if (rev & (POLLHUP | POLLERR | POLLNVAL)) {
        close_conn[i] = true;
      }
    }
    // Any Set (local or remote) may have released a waiter; deadlines may have passed.
    for (size_t i = 0; i < conns_.size(); ++i) {
      if (close_conn[i]) continue;
      if (!MaybeAnswerWaiter(conns_[i]) || !HandleInput(conns_[i])) close_conn[i] = true;
    }
    for (size_t i = conns_.size(); i-- > 0;) {
      if (close_conn[i]) {
        ::close(conns_[i].fd);
        conns_.erase(conns_.begin() + long(i));
      }
    }
    if (fds[1].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conns_.push_back(Conn{fd, {}, false, {}, {}});
      }
    }
  }
}

// ---- TcpStore -------------------------------------------------------------------------------

TcpStore::TcpStore(std::string host, int port, TcpStoreOptions options)
    : host_(std::move(host)), port_(port), options_(options) {}

TcpStore::~TcpStore() {
  for (int fd : idle_fds_) ::close(fd);
}

Status TcpStore::ParseAddress(std::string_view address, std::string* host, int* port) {
  std::string_view rest = address;
  if (rest.substr(0, 6) == "tcp://") rest.remove_prefix(6);
  std::string_view h, p;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return InvalidArgumentError(
          fmt::format("'{}' is not a tcp address: expected tcp://[ipv6]:port", address));
    }
    h = rest.substr(1, close - 1);
    p = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgumentError(
          fmt::format("'{}' is not a tcp address: expected tcp://host:port", address));
    }
    h = rest.substr(0, colon);
    p = rest.substr(colon + 1);
  }
  int value = -1;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (h.empty() || p.empty() || ec != std::errc() || end != p.data() + p.size() || value < 1 ||
      value > 65535) {
    return InvalidArgumentError(fmt::format(
        "'{}' is not a tcp address: expected tcp://host:port with a port in 1..65535", address));
  }
  *host = std::string(h);
  *port = value;
  return OkStatus();
}

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Serve(int port, TcpStoreOptions options) {
  ZS_ASSIGN_OR_RETURN(auto server, TcpStoreServer::Start(port));
  std::unique_ptr<TcpStore> store(new TcpStore("*", server->port(), options));
  store->server_ = std::move(server);
  return store;
}

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(std::string host, int port,
                                                      TcpStoreOptions options) {
  std::unique_ptr<TcpStore> store(new TcpStore(std::move(host), port, options));
  ZS_ASSIGN_OR_RETURN(int fd, store->AcquireConnection());
  store->ReleaseConnection(fd);
  return store;
}

std::string TcpStore::Describe() const { return fmt::format("tcp://{}:{}", host_, port_); }

namespace {

// One connection attempt to `ai`, bounded by `deadline`; returns the fd or -1 with errno set.
int ConnectOnce(const addrinfo* ai, Clock::time_point deadline) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) return -1;
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      int err = errno;
      ::close(fd);
      errno = err;
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    int r = ::poll(&p, 1, std::max(1, MillisUntil(deadline)));
    int err = 0;
    socklen_t len = sizeof(err);
    if (r <= 0) {
      err = r == 0 ? ETIMEDOUT : errno;
    } else {
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      ::close(fd);
      errno = err;
      return -1;
    }
  }
  // Back to blocking mode: Call() bounds its reads with poll.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

StatusOr<int> TcpStore::AcquireConnection() {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!idle_fds_.empty()) {
      int fd = idle_fds_.back();
      idle_fds_.pop_back();
      return fd;
    }
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string port = std::to_string(port_);
  const int gai = ::getaddrinfo(host_.c_str(), port.c_str(), &hints, &list);
  if (gai != 0) {
    return UnavailableError(fmt::format("tcp store {}: cannot resolve host '{}': {}", Describe(),
                                        host_, ::gai_strerror(gai)));
  }
  const auto start = Clock::now();
  const auto deadline = start + options_.connect_timeout;
  auto delay = std::chrono::milliseconds(5);
  int last_err = 0;
  while (true) {
    for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
      int fd = ConnectOnce(ai, deadline);
      if (fd >= 0) {
        ::freeaddrinfo(list);
        return fd;
      }
      last_err = errno;
    }
    if (Clock::now() >= deadline) break;
    // The serving rank may not be listening yet: retry with a growing pause.
    std::this_thread::sleep_for(std::min(delay, std::chrono::milliseconds(MillisUntil(deadline))));
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
  ::freeaddrinfo(list);
  return DeadlineExceededError(fmt::format(
      "cannot reach the tcp store at {} within {} ms: {} (is rank 0 running and serving it?)",
      Describe(), options_.connect_timeout.count(), std::strerror(last_err)));
}

void TcpStore::ReleaseConnection(int fd) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  idle_fds_.push_back(fd);
}

StatusOr<std::string> TcpStore::Call(uint8_t op, std::string_view key, std::string_view value,
                                     std::chrono::milliseconds server_wait,
                                     std::chrono::milliseconds client_wait, uint8_t* answer_code) {
  if (key.size() + value.size() + 9 > kMaxBody) {
    return InvalidArgumentError(
        fmt::format("tcp store {}: key '{}' with a {}-byte value is "
                    "larger than the {}-byte limit",
                    Describe(), key, value.size(), kMaxBody));
  }
  ZS_ASSIGN_OR_RETURN(int fd, AcquireConnection());
  std::string body;
  body.push_back(char(op));
  PutU32(&body, uint32_t(std::clamp<int64_t>(server_wait.count(), 0, INT32_MAX)));
  PutU32(&body, uint32_t(key.size()));
  body.append(key);
  body.append(value);
  if (!SendAll(fd, Frame(body))) {
    const int err = errno;
    ::close(fd);
    return UnavailableError(
        fmt::format("tcp store {}: cannot send a request for key '{}': {} "
                    "(did the serving rank exit?)",
                    Describe(), key, std::strerror(err)));
  }
  const auto deadline = Clock::now() + client_wait;
  std::string in;
  char buffer[64 * 1024];
  while (in.size() < 4 || in.size() < 4 + size_t(GetU32(in.data()))) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, MillisUntil(deadline));
    if (r == 0) {
      ::close(fd);
      return DeadlineExceededError(fmt::format("tcp store {}: no answer for key '{}' within {} ms",
                                               Describe(), key,
                                               (server_wait + options_.io_slack).count()));
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return IoError(fmt::format("tcp store {}: poll failed: {}", Describe(), std::strerror(err)));
    }
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      return UnavailableError(
          fmt::format("tcp store {}: the server closed the connection while answering key '{}'{}{} "
                      "(did the serving rank exit?)",
                      Describe(), key, err ? ": " : "", err ? std::strerror(err) : ""));
    }
    in.append(buffer, size_t(n));
    if (in.size() >= 4 && (GetU32(in.data()) > kMaxBody || GetU32(in.data()) < 1)) {
      ::close(fd);
      return InternalError(fmt::format("tcp store {}: malformed answer", Describe()));
    }
  }
  ReleaseConnection(fd);
  *answer_code = uint8_t(in[4]);
  return in.substr(5);
}

Status TcpStore::Set(std::string_view key, std::string_view value) {
  if (server_) return server_->Set(key, value);
  uint8_t code = 0;
  ZS_RETURN_IF_ERROR(
      Call(kOpSet, key, value, std::chrono::milliseconds(0), options_.op_timeout, &code));
  if (code == kExists) {
    return InvalidArgumentError(
        fmt::format("tcp store {}: key '{}' was already set", Describe(), key));
  }
  if (code != kOk) {
    return InternalError(
        fmt::format("tcp store {}: Set of key '{}' got answer {}", Describe(), key, int(code)));
  }
  return OkStatus();
}

StatusOr<std::string> TcpStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  if (server_) return server_->Get(key, timeout);
  uint8_t code = 0;
  ZS_ASSIGN_OR_RETURN(std::string value,
                      Call(kOpGet, key, "", timeout, timeout + options_.io_slack, &code));
  if (code == kTimeout) {
    return DeadlineExceededError(fmt::format("tcp store {}: key '{}' did not appear within {} ms",
                                             Describe(), key, timeout.count()));
  }
  if (code != kOk) {
    return InternalError(
        fmt::format("tcp store {}: Get of key '{}' got answer {}", Describe(), key, int(code)));
  }
  return value;
}

bool TcpStore::Contains(std::string_view key) {
  if (server_) return server_->Contains(key);
  uint8_t code = 0;
  auto answer =
      Call(kOpContains, key, "", std::chrono::milliseconds(0), options_.op_timeout, &code);
  return answer.ok() && code == kOk;
}

}  // namespace zs
