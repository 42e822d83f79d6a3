// A peer made of upstream C++ TensorPipe (Debian's libtensorpipe-dev), for
// the interop tests and upstream-interop.js: it listens or connects with the
// transports and channels it is told, and echoes every message it receives
// on every pipe, each tensor with a target device where the sender gave one
// and without where it gave none; or it times round trips of one tensor
// against an echoing peer. Its listening URLs, each pipe's errors and the
// timings go to stdout as JSON lines; it exits when stdin closes (bench:
// when done).
//
//   upstream_peer listen  <transports> <channels>
//   upstream_peer connect <transports> <channels> <url> [pipes]
//   upstream_peer bench   <transports> <channels> <url> <bytes> <round trips>
#include <tensorpipe/tensorpipe.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::mutex outMutex;

void Say(const std::string& line) {
  std::lock_guard<std::mutex> lock(outMutex);
  std::cout << line << std::endl;
}

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The priorities PyTorch's TensorPipe agent gives them, so that the peer
// chooses as a C++ user's process would.
std::shared_ptr<tensorpipe::Context> MakeContext(const std::string& transports, const std::string& channels) {
  auto context = std::make_shared<tensorpipe::Context>();
  for (const auto& t : Split(transports)) {
    if (t == "uv")
      context->registerTransport(0, t, tensorpipe::transport::uv::create());
    else if (t == "shm")
      context->registerTransport(200, t, tensorpipe::transport::shm::create());
    else
      throw std::runtime_error("unknown transport " + t);
  }
  for (const auto& c : Split(channels)) {
    if (c == "basic")
      context->registerChannel(0, c, tensorpipe::channel::basic::create());
    else if (c == "cma")
      context->registerChannel(1200, c, tensorpipe::channel::cma::create());
    else if (c == "mpt") {
      std::vector<std::shared_ptr<tensorpipe::transport::Context>> lanes;
      std::vector<std::shared_ptr<tensorpipe::transport::Listener>> listeners;
      for (int i = 0; i < 2; i++) {
        auto lane = tensorpipe::transport::uv::create();
        listeners.push_back(lane->listen("127.0.0.1"));
        lanes.push_back(lane);
      }
      context->registerChannel(100, c, tensorpipe::channel::mpt::create(std::move(lanes), std::move(listeners)));
    } else
      throw std::runtime_error("unknown channel " + c);
  }
  return context;
}

// Memory for what is being echoed, given back when the echo is written and
// taken again for the next message of that size, as the Node peer reuses
// its own: the measurement is of the pipe, not of fresh pages.
class BufferPool {
 public:
  struct Block {
    std::unique_ptr<uint8_t[]> bytes;
    size_t size;
  };

  Block Take(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->size == size) {
        Block b = std::move(*it);
        free_.erase(it);
        return b;
      }
    }
    return Block{std::unique_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(size, 1)]), size};
  }

  void Give(Block b) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() < kKept) free_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kKept = 256;
  std::mutex mutex_;
  std::vector<Block> free_;
};

BufferPool pool;

// One message being echoed: the memory it landed in, kept until the echo is written.
struct Echo {
  tensorpipe::Descriptor descriptor;
  std::vector<BufferPool::Block> payloads;
  std::vector<BufferPool::Block> tensors;

  ~Echo() {
    for (auto& b : payloads) pool.Give(std::move(b));
    for (auto& b : tensors) pool.Give(std::move(b));
  }
};

void EchoNext(std::shared_ptr<tensorpipe::Pipe> pipe, int id);

void Failed(int id, const char* what, const tensorpipe::Error& error) {
  Say("{\"pipe\":" + std::to_string(id) + ",\"error\":" + Quoted(std::string(what) + ": " + error.what()) + "}");
}

void EchoNext(std::shared_ptr<tensorpipe::Pipe> pipe, int id) {
  pipe->readDescriptor([pipe, id](const tensorpipe::Error& error, tensorpipe::Descriptor descriptor) {
    if (error) return Failed(id, "readDescriptor", error);
    auto echo = std::make_shared<Echo>();
    echo->descriptor = std::move(descriptor);
    tensorpipe::Allocation allocation;
    for (const auto& p : echo->descriptor.payloads) {
      echo->payloads.push_back(pool.Take(p.length));
      allocation.payloads.push_back({echo->payloads.back().bytes.get()});
    }
    for (const auto& t : echo->descriptor.tensors) {
      echo->tensors.push_back(pool.Take(t.length));
      allocation.tensors.push_back({tensorpipe::CpuBuffer{echo->tensors.back().bytes.get()}});
    }
    pipe->read(std::move(allocation), [pipe, id, echo](const tensorpipe::Error& error) {
      if (error) return Failed(id, "read", error);
      tensorpipe::Message message;
      message.metadata = echo->descriptor.metadata;
      for (size_t i = 0; i < echo->payloads.size(); i++) {
        message.payloads.push_back(
            {echo->payloads[i].bytes.get(), echo->payloads[i].size, echo->descriptor.payloads[i].metadata});
      }
      for (size_t i = 0; i < echo->tensors.size(); i++) {
        tensorpipe::Message::Tensor t;
        t.buffer = tensorpipe::CpuBuffer{echo->tensors[i].bytes.get()};
        t.length = echo->tensors[i].size;
        t.metadata = echo->descriptor.tensors[i].metadata;
        if (echo->descriptor.tensors[i].targetDevice.has_value())
          t.targetDevice = tensorpipe::Device{tensorpipe::kCpuDeviceType, 0};
        message.tensors.push_back(std::move(t));
      }
      pipe->write(std::move(message), [id, echo](const tensorpipe::Error& error) {
        if (error) Failed(id, "write", error);
      });
      EchoNext(pipe, id);
    });
  });
}

void AcceptNext(std::shared_ptr<tensorpipe::Listener> listener, int id) {
  listener->accept([listener, id](const tensorpipe::Error& error, std::shared_ptr<tensorpipe::Pipe> pipe) {
    if (error) {
      Say("{\"listener\":\"error\",\"error\":" + Quoted(error.what()) + "}");
      return;
    }
    EchoNext(pipe, id);
    AcceptNext(listener, id + 1);
  });
}

// Writes one tensor of `bytes` and reads its echo into `landing`, `rounds`
// times (after as many untimed), and says the round trips' p50 and the
// wall time of the timed ones.
int Bench(const std::shared_ptr<tensorpipe::Context>& context, const std::string& url, size_t bytes, int rounds) {
  auto pipe = context->connect(url);
  std::vector<uint8_t> data(bytes, 7), landing(bytes);
  auto roundTrip = [&]() -> std::string {
    std::promise<std::string> done;
    tensorpipe::Message message;
    tensorpipe::Message::Tensor t;
    t.buffer = tensorpipe::CpuBuffer{data.data()};
    t.length = bytes;
    t.targetDevice = tensorpipe::Device{tensorpipe::kCpuDeviceType, 0};
    message.tensors.push_back(std::move(t));
    pipe->write(std::move(message), [](const tensorpipe::Error&) {});
    pipe->readDescriptor([&](const tensorpipe::Error& error, tensorpipe::Descriptor) {
      if (error) return done.set_value(error.what());
      tensorpipe::Allocation allocation;
      allocation.tensors.push_back({tensorpipe::CpuBuffer{landing.data()}});
      pipe->read(std::move(allocation),
                 [&](const tensorpipe::Error& error) { done.set_value(error ? error.what() : ""); });
    });
    return done.get_future().get();
  };
  std::vector<double> samples;
  double seconds = 0;
  for (int phase = 0; phase < 2; phase++) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < rounds; i++) {
      auto t0 = std::chrono::steady_clock::now();
      std::string error = roundTrip();
      if (!error.empty()) {
        Say("{\"error\":" + Quoted(error) + "}");
        return 1;
      }
      if (phase == 1)
        samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::sort(samples.begin(), samples.end());
  Say("{\"bytes\":" + std::to_string(bytes) + ",\"rounds\":" + std::to_string(rounds) +
      ",\"p50Us\":" + std::to_string(samples[samples.size() / 2]) + ",\"seconds\":" + std::to_string(seconds) + "}");
  pipe->close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc < 4 || (mode != "listen" && mode != "connect" && mode != "bench") || (mode == "connect" && argc < 5) ||
      (mode == "bench" && argc < 7)) {
    std::cerr << "usage: upstream_peer listen <transports> <channels>\n"
                 "       upstream_peer connect <transports> <channels> <url> [pipes]\n"
                 "       upstream_peer bench <transports> <channels> <url> <bytes> <round trips>\n";
    return 2;
  }
  auto context = MakeContext(argv[2], argv[3]);
  if (mode == "bench") {
    int rc = Bench(context, argv[4], std::stoull(argv[5]), std::stoi(argv[6]));
    context->close();
    context->join();
    return rc;
  }
  std::shared_ptr<tensorpipe::Listener> listener;
  std::vector<std::shared_ptr<tensorpipe::Pipe>> pipes;
  if (mode == "listen") {
    std::vector<std::string> urls;
    for (const auto& t : Split(argv[2])) urls.push_back(t == "shm" ? "shm://" : t + "://127.0.0.1");
    listener = context->listen(urls);
    std::string line = "{\"pid\":" + std::to_string(getpid()) + ",\"urls\":[";
    bool first = true;
    for (const auto& t : Split(argv[2])) {
      line += (first ? "" : ",") + Quoted(listener->url(t));
      first = false;
    }
    Say(line + "]}");
    AcceptNext(listener, 0);
  } else {
    int count = argc > 5 ? std::stoi(argv[5]) : 1;
    for (int i = 0; i < count; i++) {
      pipes.push_back(context->connect(argv[4]));
      EchoNext(pipes.back(), i);
    }
    Say("{\"pid\":" + std::to_string(getpid()) + ",\"connected\":" + std::to_string(count) + "}");
  }
  // Until stdin closes: the test's end, or the test runner gone.
  char buffer[256];
  while (read(STDIN_FILENO, buffer, sizeof buffer) > 0) {
  }
  context->close();
  context->join();
  return 0;
}
