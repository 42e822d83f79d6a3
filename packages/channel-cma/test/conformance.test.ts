import { describeChannelConformance } from "@tensorpipe/core/testing";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { CmaChannelContext } from "../src/index.js";

describeChannelConformance({
  name: "cma",
  create: () => new CmaChannelContext(),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
});

describeChannelConformance({
  name: "cma",
  create: () => new CmaChannelContext(),
  createTransport: () => new ShmTransport(),
  transportName: "shm",
  listenUrl: () => "shm://*",
});

describeChannelConformance({
  name: "cma",
  variant: "nothing inline, 3 threads, no huge pages",
  create: () => new CmaChannelContext({ inlineMax: 0, hugePages: false, parallelism: 3 }),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
  largeTensorBytes: 64 * 1024 * 1024,
});

describeChannelConformance({
  name: "cma",
  create: () => new CmaChannelContext(),
  createTransport: () => new ShmTransport(),
  transportName: "shm",
  listenUrl: () => "shm://*",
  peerProcess: new URL("./fixtures/conformance-peer.mjs", import.meta.url),
});
