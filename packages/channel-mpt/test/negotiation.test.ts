import { describeNegotiationConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "@tensorpipe/transport-uv";
import { MPT_PRIORITY, MptChannelContext } from "../src/index.js";

describeNegotiationConformance({
  kind: "channel",
  name: "mpt",
  create: () => new MptChannelContext(),
  priority: MPT_PRIORITY,
  transport: { name: "uv", create: () => new UvTransport(), listenUrl: "uv://127.0.0.1:0" },
});
