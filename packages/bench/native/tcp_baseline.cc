// The limit the uv transport is held against in `tensorpipe bench`: frames
// over one loopback TCP connection (TCP_NODELAY, as the transport sets it)
// with blocking calls, no Node, event loop or JS between.
//
//   tcp_baseline pingpong|stream SIZE COUNT
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "baseline_main.h"

namespace tensorpipe_js {
namespace {

using baseline::Die;

class SocketEnd : public baseline::FdEnd {
 public:
  explicit SocketEnd(int fd) : FdEnd(fd) {
    int on = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) != 0) Die("setsockopt");
  }

  // Header and body in one gather write, as the transport writes a frame.
  void WriteFrame(const char* p, uint64_t n) override {
    uint64_t header = n;
    struct iovec iov[2] = {{&header, 8}, {const_cast<char*>(p), n}};
    Gather(iov, 2);
  }
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
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener, 1) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
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
