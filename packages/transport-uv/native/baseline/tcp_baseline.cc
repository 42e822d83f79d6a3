// The limit the uv transport is held against in `tensorpipe bench`: frames
// over one loopback TCP connection (TCP_NODELAY, as the transport sets it)
// with blocking calls, no Node, event loop or JS between.
//
//   tcp_baseline pingpong|stream SIZE COUNT
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

#include "tensorpipe/baseline_main.h"

namespace tensorpipe_js {
namespace {

using baseline::Die;

class SocketEnd : public baseline::End {
 public:
  explicit SocketEnd(int fd) : fd_(fd) {
    int on = 1;
    if (setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) != 0) Die("setsockopt");
  }
  ~SocketEnd() override { close(fd_); }

  void Write(const char* p, uint64_t n) override {
    struct iovec iov = {const_cast<char*>(p), n};
    Gather(&iov, 1);
  }

  // Header and body in one gather write, as the transport writes a frame.
  void WriteFrame(const char* p, uint64_t n) override {
    uint64_t header = n;
    struct iovec iov[2] = {{&header, 8}, {const_cast<char*>(p), n}};
    Gather(iov, 2);
  }

  void Read(char* p, uint64_t n) override {
    while (n > 0) {
      ssize_t r = recv(fd_, p, n, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) Die("recv");
      p += r;
      n -= r;
    }
  }

 private:
  void Gather(struct iovec* iov, int count) {
    int at = 0;
    while (at < count) {
      ssize_t w = writev(fd_, iov + at, count - at);
      if (w < 0) {
        if (errno == EINTR) continue;
        Die("writev");
      }
      while (at < count && static_cast<size_t>(w) >= iov[at].iov_len) w -= iov[at++].iov_len;
      if (at < count) {
        iov[at].iov_base = static_cast<char*>(iov[at].iov_base) + w;
        iov[at].iov_len -= w;
      }
    }
  }

  int fd_;
};

}  // namespace
}  // namespace tensorpipe_js

int main(int argc, char** argv) {
  using namespace tensorpipe_js;
  baseline::Args a = baseline::ParseArgs(argc, argv, "");
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Die("listen");
  }
  return baseline::Run(
      a,
      [&] {
        int fd = accept(listener, nullptr, nullptr);
        if (fd < 0) Die("accept");
        return std::make_unique<SocketEnd>(fd);
      },
      [&] {
        close(listener);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Die("connect");
        return std::make_unique<SocketEnd>(fd);
      });
}
