// libibverbs over Unix sockets, so that cuda-gdr's own code (its addon, its
// channel) runs for real on machines without RDMA. One device, "emu_ibv0",
// with one active RoCE port; reliable-connection queue pairs whose sends
// reach the peer's posted receives over a stream socket per direction;
// GPU memory registered through the CUDA emulator's peer-memory call, as a
// real NIC reaches it through nvidia-peermem. Loaded in libibverbs' place
// with TENSORPIPE_IBVERBS=<path to libtensorpipe_ibverbs_emulator.so>.
//
// The exported calls are those the addons resolve with dlsym; the inline
// ones of verbs.h (post_send, post_recv, poll_cq, req_notify_cq) reach
// this library through the context's ops table, as they reach a provider.
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace {

// GIDs of this emulator: a link-local prefix, a mark, then the pid that
// owns the queue pairs, which is where a peer connects.
constexpr uint8_t kGidMark[4] = {'T', 'P', 'E', 'V'};

struct Device {
  ibv_device device;
};

struct Context {
  ibv_context context;  // first: the library hands out &context
};

struct CompChannel {
  ibv_comp_channel channel;  // first
  int writeFd;
};

struct Cq {
  ibv_cq cq;  // first
  std::mutex mu;
  std::deque<ibv_wc> done;
  bool armed = false;
};

struct Mr {
  ibv_mr mr;    // first
  char* bytes;  // where the emulator reads and writes the registered range
  void* mapped = nullptr;
  size_t mappedLength = 0;
};

struct Work {
  uint64_t wrId;
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

struct Qp {
  ibv_qp qp;  // first
  std::mutex mu;
  std::condition_variable changed;
  std::deque<Work> sends;
  std::deque<Work> recvs;
  bool failed = false;
  int listenFd = -1;
  int outFd = -1;
  int inFd = -1;
  pid_t peerPid = 0;
  uint32_t peerQpn = 0;
  std::thread sender;
  std::thread receiver;
};

std::atomic<uint32_t> nextQpn{0x100};
std::atomic<uint32_t> nextKey{1};
std::mutex registry;
std::map<uint32_t, Mr*> mrs;

std::string SocketName(pid_t pid, uint32_t qpn) {
  return "tp-ibv-emu/" + std::to_string(pid) + "/" + std::to_string(qpn);
}

sockaddr_un Address(pid_t pid, uint32_t qpn, socklen_t* length) {
  sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  std::string name = SocketName(pid, qpn);
  // Abstract: nothing left on disk.
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

void Complete(ibv_cq* cq, const Work& w, ibv_wc_status status, ibv_wc_opcode opcode, uint32_t bytes, uint32_t qpn) {
  auto* c = reinterpret_cast<Cq*>(cq);
  ibv_wc wc = {};
  wc.wr_id = w.wrId;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = bytes;
  wc.qp_num = qpn;
  std::lock_guard<std::mutex> lock(c->mu);
  c->done.push_back(wc);
  if (c->armed && c->cq.channel != nullptr) {
    c->armed = false;
    ibv_cq* token = cq;
    ssize_t r = write(reinterpret_cast<CompChannel*>(c->cq.channel)->writeFd, &token, sizeof token);
    (void)r;
  }
}

// The bytes of a work request, or nullptr where its key does not cover them.
char* Bytes(const Work& w) {
  std::lock_guard<std::mutex> lock(registry);
  auto it = mrs.find(w.lkey);
  if (it == mrs.end()) return nullptr;
  const ibv_mr& mr = it->second->mr;
  uint64_t base = reinterpret_cast<uintptr_t>(mr.addr);
  if (w.addr < base || w.addr + w.length > base + mr.length) return nullptr;
  return it->second->bytes + (w.addr - base);
}

bool WriteAll(int fd, const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Everything posted completes as flushed; called with q->mu held.
void FlushLocked(Qp* q) {
  q->failed = true;
  for (const Work& w : q->sends) Complete(q->qp.send_cq, w, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, q->qp.qp_num);
  for (const Work& w : q->recvs) Complete(q->qp.recv_cq, w, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, q->qp.qp_num);
  q->sends.clear();
  q->recvs.clear();
  q->changed.notify_all();
}

// Sends in order, each as a length and its bytes; a send completes once its
// bytes are on their way, as the sender may then reuse them.
void SendLoop(Qp* q) {
  for (;;) {
    std::unique_lock<std::mutex> lock(q->mu);
    q->changed.wait(lock, [&] { return q->failed || !q->sends.empty(); });
    if (q->failed) return;
    Work w = q->sends.front();
    lock.unlock();
    char* bytes = Bytes(w);
    uint32_t header = w.length;
    bool ok = bytes != nullptr && WriteAll(q->outFd, &header, sizeof header) && WriteAll(q->outFd, bytes, w.length);
    lock.lock();
    if (q->failed) return;
    q->sends.pop_front();
    if (ok) {
      Complete(q->qp.send_cq, w, IBV_WC_SUCCESS, IBV_WC_SEND, w.length, q->qp.qp_num);
    } else {
      // The peer is gone (retries exhausted) or the key was wrong; the
      // queue pair goes to the error state, as an RC one does.
      Complete(q->qp.send_cq, w, bytes ? IBV_WC_RETRY_EXC_ERR : IBV_WC_LOC_PROT_ERR, IBV_WC_SEND, 0, q->qp.qp_num);
      q->qp.state = IBV_QPS_ERR;
      FlushLocked(q);
      return;
    }
  }
}

// Lands each incoming send in the oldest posted receive, waiting for one
// (receiver not ready: retried for ever).
void ReceiveLoop(Qp* q) {
  int fd = accept4(q->listenFd, nullptr, nullptr, SOCK_CLOEXEC);
  std::unique_lock<std::mutex> lock(q->mu);
  if (fd < 0 || q->failed) {
    if (fd >= 0) close(fd);
    return;
  }
  q->inFd = fd;
  for (;;) {
    lock.unlock();
    uint32_t length;
    bool ok = ReadAll(fd, &length, sizeof length);
    lock.lock();
    if (!ok || q->failed) return;
    q->changed.wait(lock, [&] { return q->failed || !q->recvs.empty(); });
    if (q->failed) return;
    Work w = q->recvs.front();
    q->recvs.pop_front();
    char* bytes = w.length >= length ? Bytes(Work{w.wrId, w.addr, length, w.lkey}) : nullptr;
    lock.unlock();
    ok = bytes != nullptr && ReadAll(fd, bytes, length);
    lock.lock();
    if (q->failed) return;
    if (!ok) {
      Complete(q->qp.recv_cq, w, w.length < length ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0,
               q->qp.qp_num);
      q->qp.state = IBV_QPS_ERR;
      FlushLocked(q);
      return;
    }
    Complete(q->qp.recv_cq, w, IBV_WC_SUCCESS, IBV_WC_RECV, length, q->qp.qp_num);
  }
}

int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  auto* q = reinterpret_cast<Qp*>(qp);
  std::lock_guard<std::mutex> lock(q->mu);
  for (; wr != nullptr; wr = wr->next) {
    if ((q->qp.state != IBV_QPS_RTS && !q->failed) || wr->opcode != IBV_WR_SEND || wr->num_sge != 1) {
      *bad = wr;
      return EINVAL;
    }
    Work w{wr->wr_id, wr->sg_list[0].addr, wr->sg_list[0].length, wr->sg_list[0].lkey};
    // In the error state what is posted completes as flushed, as on a NIC.
    if (q->failed)
      Complete(q->qp.send_cq, w, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, q->qp.qp_num);
    else
      q->sends.push_back(w);
  }
  q->changed.notify_all();
  return 0;
}

int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto* q = reinterpret_cast<Qp*>(qp);
  std::lock_guard<std::mutex> lock(q->mu);
  for (; wr != nullptr; wr = wr->next) {
    if (q->qp.state == IBV_QPS_RESET || wr->num_sge != 1) {
      *bad = wr;
      return EINVAL;
    }
    Work w{wr->wr_id, wr->sg_list[0].addr, wr->sg_list[0].length, wr->sg_list[0].lkey};
    if (q->failed) {
      Complete(q->qp.recv_cq, w, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, q->qp.qp_num);
      continue;
    }
    q->recvs.push_back(w);
  }
  q->changed.notify_all();
  return 0;
}

int PollCq(ibv_cq* cq, int n, ibv_wc* out) {
  auto* c = reinterpret_cast<Cq*>(cq);
  std::lock_guard<std::mutex> lock(c->mu);
  int i = 0;
  for (; i < n && !c->done.empty(); i++) {
    out[i] = c->done.front();
    c->done.pop_front();
  }
  return i;
}

// The next completion after this call signals the channel, as on a NIC.
int ReqNotifyCq(ibv_cq* cq, int) {
  auto* c = reinterpret_cast<Cq*>(cq);
  std::lock_guard<std::mutex> lock(c->mu);
  c->armed = true;
  return 0;
}

// Stops the queue pair's threads and closes its sockets; idempotent.
void Stop(Qp* q) {
  bool accepting;
  {
    std::lock_guard<std::mutex> lock(q->mu);
    if (!q->failed) FlushLocked(q);
    accepting = q->receiver.joinable() && q->inFd < 0;
    for (int fd : {q->outFd, q->inFd}) {
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
    }
  }
  if (accepting) {
    // Wakes a receiver still waiting for its peer: it sees the failure and goes.
    socklen_t length;
    sockaddr_un a = Address(getpid(), q->qp.qp_num, &length);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      connect(fd, reinterpret_cast<sockaddr*>(&a), length);
      close(fd);
    }
  }
  if (q->sender.joinable()) q->sender.join();
  if (q->receiver.joinable()) q->receiver.join();
  for (int* fd : {&q->listenFd, &q->outFd, &q->inFd}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

Device* TheDevice() {
  static Device* d = [] {
    auto* dev = new Device{};
    std::strcpy(dev->device.name, "emu_ibv0");
    std::strcpy(dev->device.dev_name, "uverbs-emu0");
    dev->device.node_type = IBV_NODE_CA;
    dev->device.transport_type = IBV_TRANSPORT_IB;
    return dev;
  }();
  return d;
}

using PeerMemoryFn = int (*)(uint64_t, size_t, uint64_t*);

// The CUDA emulator's peer-memory call, where it is loaded (its path is
// TENSORPIPE_CUDA_DRIVER, as for the addons).
PeerMemoryFn PeerMemory() {
  static PeerMemoryFn fn = [] {
    const char* path = getenv("TENSORPIPE_CUDA_DRIVER");
    void* lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
    return lib ? reinterpret_cast<PeerMemoryFn>(dlsym(lib, "tensorpipe_emulator_peer_memory")) : nullptr;
  }();
  return fn;
}

// Whether the process can read and write [addr, addr + length) itself:
// host memory. Device pointers are mapped without access.
bool HostReadable(void* addr, size_t length) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (f == nullptr) return false;
  char line[512];
  uintptr_t at = reinterpret_cast<uintptr_t>(addr);
  uintptr_t end = at + length;
  while (at < end && fgets(line, sizeof line, f) != nullptr) {
    uintptr_t lo, hi;
    char perms[5];
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3) continue;
    if (lo <= at && at < hi) {
      if (perms[0] != 'r' || perms[1] != 'w') break;
      at = hi;
    }
  }
  fclose(f);
  return at >= end;
}

}  // namespace

extern "C" {

ibv_device** EmuGetDeviceList(int* n) __asm__("ibv_get_device_list");
void EmuFreeDeviceList(ibv_device** list) __asm__("ibv_free_device_list");
const char* EmuGetDeviceName(ibv_device* d) __asm__("ibv_get_device_name");
ibv_context* EmuOpenDevice(ibv_device* d) __asm__("ibv_open_device");
int EmuCloseDevice(ibv_context* c) __asm__("ibv_close_device");
int EmuQueryPort(ibv_context* c, uint8_t port, ibv_port_attr* attr) __asm__("ibv_query_port");
int EmuQueryGid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) __asm__("ibv_query_gid");
ibv_pd* EmuAllocPd(ibv_context* c) __asm__("ibv_alloc_pd");
int EmuDeallocPd(ibv_pd* pd) __asm__("ibv_dealloc_pd");
ibv_comp_channel* EmuCreateCompChannel(ibv_context* c) __asm__("ibv_create_comp_channel");
int EmuDestroyCompChannel(ibv_comp_channel* ch) __asm__("ibv_destroy_comp_channel");
ibv_cq* EmuCreateCq(ibv_context* c, int cqe, void* cqContext, ibv_comp_channel* ch,
                    int vector) __asm__("ibv_create_cq");
int EmuDestroyCq(ibv_cq* cq) __asm__("ibv_destroy_cq");
int EmuGetCqEvent(ibv_comp_channel* ch, ibv_cq** cq, void** cqContext) __asm__("ibv_get_cq_event");
void EmuAckCqEvents(ibv_cq* cq, unsigned n) __asm__("ibv_ack_cq_events");
ibv_qp* EmuCreateQp(ibv_pd* pd, ibv_qp_init_attr* init) __asm__("ibv_create_qp");
int EmuModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask) __asm__("ibv_modify_qp");
int EmuDestroyQp(ibv_qp* qp) __asm__("ibv_destroy_qp");
ibv_mr* EmuRegMr(ibv_pd* pd, void* addr, size_t length, int access) __asm__("ibv_reg_mr");
int EmuDeregMr(ibv_mr* mr) __asm__("ibv_dereg_mr");
const char* EmuWcStatusStr(ibv_wc_status s) __asm__("ibv_wc_status_str");

ibv_device** EmuGetDeviceList(int* n) {
  auto** list = static_cast<ibv_device**>(calloc(2, sizeof(ibv_device*)));
  if (list == nullptr) return nullptr;
  list[0] = &TheDevice()->device;
  if (n) *n = 1;
  return list;
}

void EmuFreeDeviceList(ibv_device** list) { free(list); }

const char* EmuGetDeviceName(ibv_device* d) { return d->name; }

ibv_context* EmuOpenDevice(ibv_device* d) {
  auto* c = new Context{};
  c->context.device = d;
  c->context.cmd_fd = -1;
  c->context.async_fd = -1;
  c->context.num_comp_vectors = 1;
  c->context.ops.post_send = PostSend;
  c->context.ops.post_recv = PostRecv;
  c->context.ops.poll_cq = PollCq;
  c->context.ops.req_notify_cq = ReqNotifyCq;
  return &c->context;
}

int EmuCloseDevice(ibv_context* c) {
  delete reinterpret_cast<Context*>(c);
  return 0;
}

int EmuQueryPort(ibv_context*, uint8_t port, ibv_port_attr* attr) {
  if (port != 1) return EINVAL;
  std::memset(attr, 0, sizeof *attr);
  attr->state = IBV_PORT_ACTIVE;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = IBV_MTU_4096;
  attr->gid_tbl_len = 1;
  attr->max_msg_sz = 1u << 31;
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int EmuQueryGid(ibv_context*, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index != 0) return EINVAL;
  std::memset(gid, 0, sizeof *gid);
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  std::memcpy(gid->raw + 8, kGidMark, 4);
  uint32_t pid = static_cast<uint32_t>(getpid());
  std::memcpy(gid->raw + 12, &pid, 4);
  return 0;
}

ibv_pd* EmuAllocPd(ibv_context* c) {
  auto* pd = new ibv_pd{};
  pd->context = c;
  return pd;
}

int EmuDeallocPd(ibv_pd* pd) {
  delete pd;
  return 0;
}

ibv_comp_channel* EmuCreateCompChannel(ibv_context* c) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  auto* ch = new CompChannel{};
  ch->channel.context = c;
  ch->channel.fd = fds[0];
  ch->writeFd = fds[1];
  return &ch->channel;
}

int EmuDestroyCompChannel(ibv_comp_channel* ch) {
  auto* c = reinterpret_cast<CompChannel*>(ch);
  close(c->channel.fd);
  close(c->writeFd);
  delete c;
  return 0;
}

ibv_cq* EmuCreateCq(ibv_context* c, int cqe, void* cqContext, ibv_comp_channel* ch, int) {
  auto* cq = new Cq{};
  cq->cq.context = c;
  cq->cq.channel = ch;
  cq->cq.cq_context = cqContext;
  cq->cq.cqe = cqe;
  return &cq->cq;
}

int EmuDestroyCq(ibv_cq* cq) {
  delete reinterpret_cast<Cq*>(cq);
  return 0;
}

int EmuGetCqEvent(ibv_comp_channel* ch, ibv_cq** cq, void** cqContext) {
  ibv_cq* token;
  if (read(ch->fd, &token, sizeof token) != static_cast<ssize_t>(sizeof token)) return -1;
  *cq = token;
  *cqContext = token->cq_context;
  return 0;
}

void EmuAckCqEvents(ibv_cq*, unsigned) {}

ibv_qp* EmuCreateQp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (init->qp_type != IBV_QPT_RC) {
    errno = EINVAL;
    return nullptr;
  }
  auto* q = new Qp{};
  q->qp.context = pd->context;
  q->qp.pd = pd;
  q->qp.send_cq = init->send_cq;
  q->qp.recv_cq = init->recv_cq;
  q->qp.qp_context = init->qp_context;
  q->qp.qp_type = IBV_QPT_RC;
  q->qp.qp_num = nextQpn++;
  q->qp.state = IBV_QPS_RESET;
  // Listening from the start: the peer may reach ready-to-send first.
  socklen_t length;
  sockaddr_un a = Address(getpid(), q->qp.qp_num, &length);
  q->listenFd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (q->listenFd < 0 || bind(q->listenFd, reinterpret_cast<sockaddr*>(&a), length) != 0 ||
      listen(q->listenFd, 1) != 0) {
    int err = errno;
    if (q->listenFd >= 0) close(q->listenFd);
    delete q;
    errno = err;
    return nullptr;
  }
  return &q->qp;
}

int EmuModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  auto* q = reinterpret_cast<Qp*>(qp);
  if ((mask & IBV_QP_STATE) == 0) return 0;
  switch (attr->qp_state) {
    case IBV_QPS_INIT:
      q->qp.state = IBV_QPS_INIT;
      q->receiver = std::thread(ReceiveLoop, q);
      return 0;
    case IBV_QPS_RTR: {
      if ((mask & IBV_QP_AV) == 0 || (mask & IBV_QP_DEST_QPN) == 0 || !attr->ah_attr.is_global) return EINVAL;
      const uint8_t* gid = attr->ah_attr.grh.dgid.raw;
      if (std::memcmp(gid + 8, kGidMark, 4) != 0) return EINVAL;
      uint32_t pid;
      std::memcpy(&pid, gid + 12, 4);
      q->peerPid = static_cast<pid_t>(pid);
      q->peerQpn = attr->dest_qp_num;
      q->qp.state = IBV_QPS_RTR;
      return 0;
    }
    case IBV_QPS_RTS: {
      if (q->qp.state != IBV_QPS_RTR) return EINVAL;
      socklen_t length;
      sockaddr_un a = Address(q->peerPid, q->peerQpn, &length);
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return errno;
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), length) != 0) {
        int err = errno;
        close(fd);
        return err;
      }
      q->outFd = fd;
      q->qp.state = IBV_QPS_RTS;
      q->sender = std::thread(SendLoop, q);
      return 0;
    }
    case IBV_QPS_ERR:
      Stop(q);
      q->qp.state = IBV_QPS_ERR;
      return 0;
    default:
      return EINVAL;
  }
}

int EmuDestroyQp(ibv_qp* qp) {
  auto* q = reinterpret_cast<Qp*>(qp);
  Stop(q);
  delete q;
  return 0;
}

ibv_mr* EmuRegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  auto* m = new Mr{};
  if (HostReadable(addr, length)) {
    m->bytes = static_cast<char*>(addr);
  } else {
    // GPU memory: reachable only through the driver's peer memory, as a
    // real NIC's is through nvidia-peermem (EFAULT without it, as there).
    PeerMemoryFn peer = PeerMemory();
    uint64_t offset = 0;
    int fd = peer ? peer(reinterpret_cast<uintptr_t>(addr), length, &offset) : -1;
    if (fd < 0) {
      delete m;
      errno = EFAULT;
      return nullptr;
    }
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    uint64_t start = offset / page * page;
    m->mappedLength = offset - start + length;
    m->mapped = mmap(nullptr, m->mappedLength, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
    close(fd);
    if (m->mapped == MAP_FAILED) {
      delete m;
      errno = ENOMEM;
      return nullptr;
    }
    m->bytes = static_cast<char*>(m->mapped) + (offset - start);
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.lkey = m->mr.rkey = nextKey++;
  (void)access;
  std::lock_guard<std::mutex> lock(registry);
  mrs[m->mr.lkey] = m;
  return &m->mr;
}

int EmuDeregMr(ibv_mr* mr) {
  auto* m = reinterpret_cast<Mr*>(mr);
  {
    std::lock_guard<std::mutex> lock(registry);
    mrs.erase(m->mr.lkey);
  }
  if (m->mapped) munmap(m->mapped, m->mappedLength);
  delete m;
  return 0;
}

const char* EmuWcStatusStr(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    default:
      return "unknown";
  }
}

}  // extern "C"
