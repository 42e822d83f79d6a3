import { describeNegotiationConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "@tensorpipe/transport-uv";
import { SHM_PRIORITY, ShmTransport } from "../src/index.js";

describeNegotiationConformance({
  kind: "transport",
  backend: { name: "shm", create: () => new ShmTransport(), listenUrl: "shm://*" },
  priority: SHM_PRIORITY,
  fallback: { name: "uv", create: () => new UvTransport(), listenUrl: "uv://127.0.0.1:0" },
});
