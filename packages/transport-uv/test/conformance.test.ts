import { describeTransportConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "../src/index.js";

describeTransportConformance({
  name: "uv (IPv4)",
  create: () => new UvTransport(),
  listenAddress: () => "127.0.0.1:0",
  lendsFrames: true,
});

describeTransportConformance({
  name: "uv (IPv6)",
  create: () => new UvTransport(),
  listenAddress: () => "[::1]:0",
  largeFrameBytes: 16 * 1024 * 1024,
  lendsFrames: true,
});
