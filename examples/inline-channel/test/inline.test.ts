import { describeChannelConformance, describeNegotiationConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "@tensorpipe/transport-uv";
import { INLINE_PRIORITY, InlineChannelContext } from "../dist/index.js";

describeChannelConformance({
  name: "inline",
  create: () => new InlineChannelContext(),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
});

describeNegotiationConformance({
  kind: "channel",
  name: "inline",
  create: () => new InlineChannelContext(),
  priority: INLINE_PRIORITY,
  transport: { name: "uv", create: () => new UvTransport(), listenUrl: "uv://127.0.0.1:0" },
});
