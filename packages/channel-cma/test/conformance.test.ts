import { type ChannelConformanceOptions, describeChannelConformance } from "@tensorpipe/core/testing";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { CmaChannelContext, type CmaChannelOptions } from "../src/index.js";

const uv = { createTransport: () => new UvTransport(), transportName: "uv", listenUrl: () => "uv://127.0.0.1:0" };
const shm = { createTransport: () => new ShmTransport(), transportName: "shm", listenUrl: () => "shm://*" };

const runs: (Omit<ChannelConformanceOptions, "name" | "create"> & { options?: CmaChannelOptions })[] = [
  uv,
  shm,
  {
    ...uv,
    variant: "nothing inline, 3 threads, no huge pages",
    options: { inlineMax: 0, hugePages: false, parallelism: 3 },
    largeTensorBytes: 64 * 1024 * 1024,
  },
  // Reads that cross processes, as they do in use.
  { ...shm, peerProcess: new URL("./fixtures/conformance-peer.mjs", import.meta.url) },
];

for (const { options, ...run } of runs) describeChannelConformance({ name: "cma", create: () => new CmaChannelContext(options), ...run });
