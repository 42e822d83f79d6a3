/** Each store that ships, through the conformance suite every store must pass. */
import { createContext } from "./context.js";
import type { Context } from "@tensorpipe/core";
import { afterAll, beforeAll, beforeEach, describe } from "vitest";
import { etcdStore, registryStore, serveRegistry } from "../src/index.js";
import type { Registry } from "../src/registry.js";
import { describeStoreConformance } from "../src/testing.js";
import { EtcdCluster, etcdMissing } from "./etcd-server.js";

const backends = { transports: ["uv"], channels: ["basic"] };
const missing = etcdMissing();

describe.skipIf(missing !== undefined)(`etcd${missing ? ` (${missing})` : ""}`, () => {
  let etcd: EtcdCluster;
  beforeAll(async () => {
    etcd = await EtcdCluster.start(1);
  });
  afterAll(() => etcd?.stop());
  let prefix = 0;
  describeStoreConformance({
    name: "etcd",
    context: (name) => createContext({ ...backends, name }),
    listen: "uv://127.0.0.1:0",
    // A prefix per test: the suite's members do not see the last test's leftovers.
    store: () => etcdStore({ hosts: etcd.hosts, prefix: `/test/${prefix}/`, ttl: 2, requestTimeout: 1000 }),
    outage: async () => {
      await etcd.nodes[0]!.kill();
      return () => etcd.nodes[0]!.start("existing");
    },
  });
  beforeEach(() => {
    prefix++;
  });
});

describe("the embedded registry", () => {
  let host: Context;
  let registry: Registry;
  let url = "";
  beforeAll(async () => {
    host = await createContext({ ...backends, name: "registry" });
    registry = await serveRegistry(host, { listen: "uv://127.0.0.1:0" });
    url = registry.url;
  });
  afterAll(() => host?.close());
  describeStoreConformance({
    name: "embedded registry",
    context: (name) => createContext({ ...backends, name }),
    listen: "uv://127.0.0.1:0",
    store: (context) => registryStore(context, url, { requestTimeout: 1000 }),
    outage: async () => {
      registry.close();
      return async () => {
        registry = await serveRegistry(host, { listen: url });
      };
    },
  });
});
