import { describeTransportConformance } from "@tensorpipe/core/testing";
import { ShmTransport } from "../src/index.js";

describeTransportConformance({
  name: "shm",
  create: () => new ShmTransport(),
  listenAddress: () => "*",
  lendsFrames: true,
});

describeTransportConformance({
  name: "shm with a 4 KiB ring (every frame wraps and streams)",
  create: () => new ShmTransport({ ringSize: 4096 }),
  listenAddress: () => "*",
  largeFrameBytes: 32 * 1024 * 1024,
  lendsFrames: true,
});
