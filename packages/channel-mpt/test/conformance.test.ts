import { describeChannelConformance } from "@tensorpipe/core/testing";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { MptChannelContext } from "../src/index.js";

const MiB = 1024 * 1024;

describeChannelConformance({
  name: "mpt",
  create: () => new MptChannelContext({ lanes: 4 }),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
});

describeChannelConformance({
  name: "mpt",
  variant: "every tensor split, 3 lanes",
  create: () => new MptChannelContext({ lanes: 3, minSplit: 0 }),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
  largeTensorBytes: 64 * MiB,
});

describeChannelConformance({
  name: "mpt",
  variant: "lanes in the event loop, every tensor split",
  create: () => new MptChannelContext({ lanes: 2, minSplit: 0, threads: false }),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
  largeTensorBytes: 64 * MiB,
});

describeChannelConformance({
  name: "mpt",
  variant: "no socket to hand over",
  create: () => new MptChannelContext({ lanes: 2, minSplit: 64 * 1024 }),
  createTransport: () => new ShmTransport(),
  transportName: "shm",
  listenUrl: () => "shm://",
  largeTensorBytes: 64 * MiB,
});
