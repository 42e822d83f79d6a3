import { describeNegotiationConformance } from "@tensorpipe/core/testing";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { CMA_PRIORITY, CmaChannelContext } from "../src/index.js";

for (const transport of [
  { name: "uv", create: () => new UvTransport(), listenUrl: "uv://127.0.0.1:0" },
  { name: "shm", create: () => new ShmTransport(), listenUrl: "shm://*" },
]) {
  describeNegotiationConformance({ kind: "channel", name: "cma", create: () => new CmaChannelContext(), priority: CMA_PRIORITY, transport });
}
