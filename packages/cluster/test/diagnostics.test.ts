/** What members publish on node:diagnostics_channel, by name as any tool subscribes. */
import diagnostics_channel from "node:diagnostics_channel";
import { afterEach, expect, it } from "vitest";
import { type ClusterChangeMessage, type ClusterInvalidRecordMessage, type ClusterStoreMessage, join, registryStore, serveRegistry } from "../src/index.js";
import { createContext } from "./context.js";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it("publishes changes, bad records and the store's comings and goings", async () => {
  const seen: { channel: string; message: unknown }[] = [];
  for (const channel of ["tensorpipe:cluster:change", "tensorpipe:cluster:invalidRecord", "tensorpipe:cluster:store"]) {
    const on = (message: unknown) => seen.push({ channel, message });
    diagnostics_channel.subscribe(channel, on);
    cleanups.push(() => diagnostics_channel.unsubscribe(channel, on));
  }
  const host = await createContext({ name: "registry" });
  cleanups.push(() => host.close());
  let registry = await serveRegistry(host, { listen: "uv://127.0.0.1:0" });
  const url = registry.url;
  const members = [];
  for (const name of ["alpha", "beta", "garbled"]) {
    const context = await createContext({ name });
    cleanups.push(() => context.close());
    if (name === "garbled") {
      const store = registryStore(context, url);
      cleanups.push(() => store.close());
      await store.claim(name, "{not json", { lost: () => undefined });
      continue;
    }
    members.push(await join(context, { listen: "uv://127.0.0.1:0", store: registryStore(context, url) }));
  }
  const [alpha] = members;
  await expect
    .poll(() => seen.find((s) => s.channel === "tensorpipe:cluster:invalidRecord" && (s.message as ClusterInvalidRecordMessage).member === alpha))
    .toBeDefined();
  await expect
    .poll(() =>
      seen.some(
        (s) =>
          s.channel === "tensorpipe:cluster:change" &&
          (s.message as ClusterChangeMessage).member === alpha &&
          (s.message as ClusterChangeMessage).change.type === "joined" &&
          (s.message as ClusterChangeMessage).change.member.name === "beta",
      ),
    )
    .toBe(true);
  registry.close();
  await expect
    .poll(() => seen.some((s) => s.channel === "tensorpipe:cluster:store" && (s.message as ClusterStoreMessage).error?.code === "ERR_TP_UNAVAILABLE"))
    .toBe(true);
  registry = await serveRegistry(host, { listen: url });
  await expect
    .poll(
      () =>
        seen.some(
          (s) =>
            s.channel === "tensorpipe:cluster:store" &&
            (s.message as ClusterStoreMessage).member === alpha &&
            (s.message as ClusterStoreMessage).error === undefined,
        ),
      {
        timeout: 5000,
      },
    )
    .toBe(true);
});
