import { describeNegotiationConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "@tensorpipe/transport-uv";
import { BASIC_PRIORITY, BasicChannelContext } from "../src/index.js";

describeNegotiationConformance({
  kind: "channel",
  name: "basic",
  create: () => new BasicChannelContext(),
  priority: BASIC_PRIORITY,
  transport: { name: "uv", create: () => new UvTransport(), listenUrl: "uv://127.0.0.1:0" },
});
