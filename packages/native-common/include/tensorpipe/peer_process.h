// Which process holds the other end of a connected socket, proven from the
// kernel's own records rather than from anything the peer says: a channel
// that acts on a peer's pid (cma's process_vm_readv) must not be pointed
// at a bystander by a hostile peer naming the bystander's pid.
//
//   AF_UNIX:           SO_PEERCRED's pid, recorded by the kernel at connect().
//   AF_INET, AF_INET6: the peer's socket, looked up by its address pair in
//                      this network namespace's socket table (sock_diag),
//                      must be among the descriptors of /proc/<pid>/fd.
//
// No privilege is needed: sock_diag answers an exact lookup to anyone, and
// /proc/<pid>/fd is readable for the processes we could ptrace (the ones
// cma could read anyway). Linux only.
#pragma once

#include <sys/types.h>

#include <array>
#include <string>

namespace tensorpipe_js {

// Whether process `pid` (of this pid namespace) holds the other end of the
// connected socket `sockfd`. On success `uids` holds its real, effective,
// saved and fs uids, read after the proof; on failure `why` says what did
// not match and where. Not proof against the peer dying and its pid being
// reused afterwards: the caller acts on a live connection's pid.
bool ProvePeerProcess(int sockfd, pid_t pid, std::array<uid_t, 4>* uids, std::string* why);

// Whether the other end of `sockfd` has closed or shut down its side: a
// proof that fails then is a peer that went, not one that lied.
bool PeerHungUp(int sockfd);

}  // namespace tensorpipe_js
