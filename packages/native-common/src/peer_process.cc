// Which process holds the other end of a connected socket (peer_process.h).
#include "tensorpipe/peer_process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace tensorpipe_js {

namespace {

std::string Errno(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

// One end of a TCP connection, in the form sock_diag speaks: v4-mapped IPv6
// addresses as plain IPv4 (the kernel hashes such sockets by their IPv4
// pair, whatever their family).
struct Endpoint {
  int family = AF_UNSPEC;
  uint32_t addr[4] = {0, 0, 0, 0};  // network byte order; IPv4 in addr[0]
  uint16_t port = 0;                // network byte order
  uint32_t scope = 0;               // a link-local IPv6 address's interface

  bool From(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET) {
      const auto& in = reinterpret_cast<const sockaddr_in&>(ss);
      family = AF_INET;
      addr[0] = in.sin_addr.s_addr;
      port = in.sin_port;
      return true;
    }
    if (ss.ss_family == AF_INET6) {
      const auto& in6 = reinterpret_cast<const sockaddr_in6&>(ss);
      port = in6.sin6_port;
      if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
        family = AF_INET;
        std::memcpy(&addr[0], &in6.sin6_addr.s6_addr[12], 4);
      } else {
        family = AF_INET6;
        std::memcpy(addr, &in6.sin6_addr, 16);
        scope = in6.sin6_scope_id;
      }
      return true;
    }
    return false;
  }

  // Whether an address of sock_diag's answer (of family `f`) is this one.
  // An IPv6 socket that carries IPv4 is found by its IPv4 pair, and
  // answers with its v4-mapped addresses.
  bool Matches(int f, const __be32 a[4], __be16 p) const {
    if (p != port) return false;
    if (f == family) return std::memcmp(a, addr, family == AF_INET ? 4 : 16) == 0;
    const auto* bytes = reinterpret_cast<const in6_addr*>(a);
    return f == AF_INET6 && family == AF_INET && IN6_IS_ADDR_V4MAPPED(bytes) &&
           std::memcmp(&bytes->s6_addr[12], addr, 4) == 0;
  }

  std::string ToString() const {
    char text[INET6_ADDRSTRLEN] = "?";
    inet_ntop(family, addr, text, sizeof text);
    std::string host = family == AF_INET6 ? "[" + std::string(text) + "]" : std::string(text);
    return host + ":" + std::to_string(ntohs(port));
  }
};

// Sends one NETLINK_SOCK_DIAG request and reads the kernel's answer into
// `buffer`: its length, or -1 with `why`.
ssize_t SockDiagExchange(const void* request, size_t length, char* buffer, size_t capacity, std::string* why) {
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) {
    *why = Errno("socket(AF_NETLINK, NETLINK_SOCK_DIAG)", errno);
    return -1;
  }
  // The kernel answers inside sendmsg(); the bound is only a safety net.
  timeval timeout{1, 0};
  setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  ssize_t sent;
  do {
    sent = sendto(nl, request, length, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    *why = Errno("sock_diag request", errno);
    close(nl);
    return -1;
  }
  ssize_t n;
  do {
    n = recv(nl, buffer, capacity, 0);
  } while (n < 0 && errno == EINTR);
  int recvErrno = errno;
  close(nl);
  if (n < 0) *why = Errno("sock_diag answer", recvErrno);
  return n;
}

// The inode of the TCP socket whose own address is `self` and whose peer is
// `other`, from NETLINK_SOCK_DIAG. Returns false with `why` when there is
// none in this network namespace (the peer is on another machine, in
// another namespace, or gone).
bool FindTcpSocketInode(const Endpoint& self, const Endpoint& other, uint64_t* inode, std::string* why) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 body;
  } request{};
  request.header.nlmsg_len = sizeof request;
  request.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  request.header.nlmsg_flags = NLM_F_REQUEST;  // one socket, by its address pair: no dump
  request.header.nlmsg_seq = 1;
  request.body.sdiag_family = static_cast<uint8_t>(self.family);
  request.body.sdiag_protocol = IPPROTO_TCP;
  request.body.idiag_states = ~0u;
  std::memcpy(request.body.id.idiag_src, self.addr, sizeof self.addr);
  request.body.id.idiag_sport = self.port;
  std::memcpy(request.body.id.idiag_dst, other.addr, sizeof other.addr);
  request.body.id.idiag_dport = other.port;
  request.body.id.idiag_if = self.scope;  // a socket bound to a link-local address is found on its interface only
  request.body.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  request.body.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  alignas(nlmsghdr) char buffer[8192];
  ssize_t n = SockDiagExchange(&request, sizeof request, buffer, sizeof buffer, why);
  if (n < 0) return false;
  const std::string where = "TCP socket " + self.ToString() + " -> " + other.ToString();
  auto* h = reinterpret_cast<nlmsghdr*>(buffer);
  int len = static_cast<int>(n);
  for (; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
    if (h->nlmsg_seq != request.header.nlmsg_seq) continue;
    if (h->nlmsg_type == NLMSG_ERROR) {
      auto* err = static_cast<nlmsgerr*>(NLMSG_DATA(h));
      if (err->error == -ENOENT) {
        *why = "no " + where + " on this machine (in this network namespace): the peer is not a local process";
      } else {
        *why = Errno(("sock_diag lookup of " + where).c_str(), -err->error);
      }
      return false;
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
    auto* msg = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
    // The lookup falls back to a listener on the same local port when no
    // connected socket matches: only the exact pair is the peer's socket.
    if (msg->idiag_state == TCP_LISTEN || !self.Matches(msg->idiag_family, msg->id.idiag_src, msg->id.idiag_sport) ||
        !other.Matches(msg->idiag_family, msg->id.idiag_dst, msg->id.idiag_dport)) {
      *why = "no " + where + " on this machine (in this network namespace): the peer is not a local process";
      return false;
    }
    // A socket in TIME_WAIT or still in the handshake belongs to no process.
    if (msg->idiag_inode == 0) {
      *why = where + " belongs to no process (inode 0, state " + std::to_string(msg->idiag_state) + ")";
      return false;
    }
    *inode = msg->idiag_inode;
    return true;
  }
  *why = "sock_diag gave no answer for " + where;
  return false;
}

// The inode of the socket at the other end of the Unix socket `sockfd`,
// from NETLINK_SOCK_DIAG (UNIX_DIAG_PEER): the socket the peer holds,
// whichever process holds it now.
bool FindUnixPeerInode(int sockfd, uint64_t* inode, std::string* why) {
  struct stat st {};
  if (fstat(sockfd, &st) != 0) {
    *why = Errno("fstat", errno);
    return false;
  }
  struct {
    nlmsghdr header;
    unix_diag_req body;
  } request{};
  request.header.nlmsg_len = sizeof request;
  request.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  request.header.nlmsg_flags = NLM_F_REQUEST;  // one socket, by its inode: no dump
  request.header.nlmsg_seq = 1;
  request.body.sdiag_family = AF_UNIX;
  request.body.udiag_states = ~0u;
  request.body.udiag_ino = static_cast<uint32_t>(st.st_ino);
  request.body.udiag_show = UDIAG_SHOW_PEER;
  request.body.udiag_cookie[0] = INET_DIAG_NOCOOKIE;
  request.body.udiag_cookie[1] = INET_DIAG_NOCOOKIE;
  alignas(nlmsghdr) char buffer[8192];
  ssize_t n = SockDiagExchange(&request, sizeof request, buffer, sizeof buffer, why);
  if (n < 0) return false;
  const std::string where = "Unix socket (inode " + std::to_string(st.st_ino) + ")";
  int len = static_cast<int>(n);
  for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
    if (h->nlmsg_type == NLMSG_ERROR) {
      *why = Errno(("sock_diag lookup of " + where).c_str(), -static_cast<nlmsgerr*>(NLMSG_DATA(h))->error);
      return false;
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(unix_diag_msg))) continue;
    auto* msg = static_cast<unix_diag_msg*>(NLMSG_DATA(h));
    if (msg->udiag_ino != st.st_ino) continue;
    int attrs = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(unix_diag_msg)));
    for (auto* a = reinterpret_cast<rtattr*>(msg + 1); RTA_OK(a, attrs); a = RTA_NEXT(a, attrs)) {
      if (a->rta_type != UNIX_DIAG_PEER || RTA_PAYLOAD(a) < sizeof(uint32_t)) continue;
      uint32_t peer;
      std::memcpy(&peer, RTA_DATA(a), sizeof peer);
      if (peer == 0) break;
      *inode = peer;
      return true;
    }
    *why = where + " has no peer: the other end is gone";
    return false;
  }
  *why = "sock_diag gave no answer for " + where;
  return false;
}

// What was last read of a process's descriptor table: descriptor number
// -> socket inode (0: not a socket). Only a hint of where to look: a
// descriptor is trusted once its link has been read again.
struct DescriptorTable {
  pid_t pid = 0;
  std::unordered_map<int, uint64_t> inodeOf;
};

// The table kept for `pid`, per thread (addons run in many threads at
// once), for the last few processes asked about.
DescriptorTable& TableOf(pid_t pid) {
  thread_local std::array<DescriptorTable, 8> tables;
  thread_local size_t next = 0;
  for (auto& t : tables) {
    if (t.pid == pid) return t;
  }
  DescriptorTable& t = tables[next++ % tables.size()];
  t.pid = pid;
  t.inodeOf.clear();
  return t;
}

// The inode of the socket descriptor `fd` of the directory `dir` (a
// /proc/<pid>/fd) is now; 0 when it is something else, -1 when closed.
int64_t SocketInodeAt(int dir, int fd) {
  char target[64];
  ssize_t n = readlinkat(dir, std::to_string(fd).c_str(), target, sizeof target - 1);
  if (n < 0) return -1;
  target[n] = '\0';
  unsigned long long inode = 0;
  return std::sscanf(target, "socket:[%llu]", &inode) == 1 ? static_cast<int64_t>(inode) : 0;
}

// How many closed numbers in a row past the table's last end the search for
// new descriptors.
constexpr int kNewDescriptorProbes = 16;

// Whether process `pid` has a descriptor for socket `inode`. Listing a
// process's descriptors costs a microsecond each: a server holding
// thousands of pipes would list a client's every descriptor for each new
// pipe. So the descriptor where the socket was seen last is read first;
// then the numbers the table lacks, where the kernel puts new descriptors
// (holes first, then past the end); the whole list last.
bool HoldsSocket(pid_t pid, uint64_t inode, const std::string& what, std::string* why) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    int err = errno;
    *why = err == ENOENT ? "no process " + std::to_string(pid) + " (to hold " + what + ")"
                         : Errno(("cannot list " + dir + " to find " + what).c_str(), err);
    return false;
  }
  const int fdDir = dirfd(d);
  const auto wanted = static_cast<int64_t>(inode);
  DescriptorTable& table = TableOf(pid);
  auto look = [&](int fd) {
    int64_t now = SocketInodeAt(fdDir, fd);
    if (now >= 0)
      table.inodeOf[fd] = static_cast<uint64_t>(now);
    else
      table.inodeOf.erase(fd);
    return now;
  };
  bool found = false;
  int last = -1;
  for (const auto& [fd, seen] : table.inodeOf) {
    if (seen == inode && !found) found = SocketInodeAt(fdDir, fd) == wanted;
    last = std::max(last, fd);
  }
  if (!found && !table.inodeOf.empty()) {
    for (int fd = 0; fd <= last && !found; fd++) {
      if (table.inodeOf.count(fd) == 0) found = look(fd) == wanted;
    }
    for (int fd = last + 1, closed = 0; !found && closed < kNewDescriptorProbes; fd++) {
      int64_t now = look(fd);
      closed = now < 0 ? closed + 1 : 0;
      found = now == wanted;
    }
  }
  if (!found) {
    table.inodeOf.clear();
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      found = look(std::atoi(e->d_name)) == wanted || found;
    }
  }
  closedir(d);
  if (!found) *why = "process " + std::to_string(pid) + " holds no descriptor of " + what;
  return found;
}

// The "Uid:" line of /proc/<pid>/status: real, effective, saved, fs.
bool ReadUids(pid_t pid, std::array<uid_t, 4>* uids, std::string* why) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) {
    *why = Errno(("cannot read " + path).c_str(), errno);
    return false;
  }
  char line[256];
  bool found = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long r, e, s, fs;
    if (std::sscanf(line, "Uid: %lu %lu %lu %lu", &r, &e, &s, &fs) == 4) {
      *uids = {static_cast<uid_t>(r), static_cast<uid_t>(e), static_cast<uid_t>(s), static_cast<uid_t>(fs)};
      found = true;
      break;
    }
  }
  std::fclose(f);
  if (!found) *why = "no Uid line in " + path + " (the process is gone)";
  return found;
}

}  // namespace

bool PeerHungUp(int sockfd) {
  pollfd p{sockfd, POLLRDHUP, 0};
  int n;
  do {
    n = poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool ProvePeerProcess(int sockfd, pid_t pid, std::array<uid_t, 4>* uids, std::string* why) {
  if (pid <= 0) {
    *why = "pid " + std::to_string(pid) + " is not a process";
    return false;
  }
  sockaddr_storage self{};
  socklen_t selfLen = sizeof self;
  if (getsockname(sockfd, reinterpret_cast<sockaddr*>(&self), &selfLen) != 0) {
    *why = Errno("getsockname", errno);
    return false;
  }
  if (self.ss_family == AF_UNIX) {
    // Not SO_PEERCRED: that names the process that connected, even after
    // it exited and its pid went to another (a child holding the socket
    // on). The process must hold the peer's socket now.
    uint64_t inode = 0;
    if (!FindUnixPeerInode(sockfd, &inode, why)) return false;
    if (!HoldsSocket(pid, inode, "the peer's Unix socket (inode " + std::to_string(inode) + ")", why)) return false;
  } else if (self.ss_family == AF_INET || self.ss_family == AF_INET6) {
    sockaddr_storage peer{};
    socklen_t peerLen = sizeof peer;
    if (getpeername(sockfd, reinterpret_cast<sockaddr*>(&peer), &peerLen) != 0) {
      *why = Errno("getpeername", errno);
      return false;
    }
    Endpoint ours, theirs;
    if (!ours.From(self) || !theirs.From(peer) || ours.family != theirs.family) {
      *why = "the socket's addresses are of different families";
      return false;
    }
    // The peer's socket: its own address is our peer address.
    uint64_t inode = 0;
    if (!FindTcpSocketInode(theirs, ours, &inode, why)) return false;
    std::string what = "the peer's TCP socket " + theirs.ToString() + " -> " + ours.ToString() + " (inode " +
                       std::to_string(inode) + ")";
    if (!HoldsSocket(pid, inode, what, why)) return false;
  } else {
    *why = "a socket of family " + std::to_string(self.ss_family) + " cannot name its peer's process";
    return false;
  }
  // After the proof: the uids of the process that held the socket.
  return ReadUids(pid, uids, why);
}

}  // namespace tensorpipe_js
