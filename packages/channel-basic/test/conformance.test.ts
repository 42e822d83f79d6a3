import { describeChannelConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "@tensorpipe/transport-uv";
import { BasicChannelContext } from "../src/index.js";

describeChannelConformance({
  name: "basic",
  create: () => new BasicChannelContext(),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
});
