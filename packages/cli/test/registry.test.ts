import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createContext } from "../src/backends.js";
import { join, registryStore } from "@tensorpipe/cluster";
import { afterEach, describe, expect, it } from "vitest";

const main = fileURLToPath(new URL("../dist/main.js", import.meta.url));

describe("tensorpipe registry", () => {
  const cleanups: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it("serves a registry that members join, and stops on SIGTERM", async () => {
    const child = spawn(process.execPath, [main, "registry", "--listen", "uv://127.0.0.1:0"], { stdio: ["ignore", "pipe", "pipe"] });
    cleanups.push(() => child.kill("SIGKILL"));
    const [line] = (await once(createInterface({ input: child.stdout! }), "line")) as [string];
    const { registry } = JSON.parse(line) as { registry: string };
    expect(registry).toMatch(/^uv:\/\/127\.0\.0\.1:\d+$/);
    const members = [];
    for (const name of ["a", "b"]) {
      const context = await createContext({ name, transports: ["uv"], channels: ["basic"] });
      cleanups.push(() => context.close());
      members.push(await join(context, { listen: "uv://127.0.0.1:0", store: registryStore(context, registry) }));
    }
    await members[0]!.waitFor("b", { timeout: 5000 });
    for (const m of members) await m.leave();
    child.kill("SIGTERM");
    const [code] = await once(child, "exit");
    expect(code).toBe(0);
  });

  it("exits 2 with the usage without --listen", async () => {
    const child = spawn(process.execPath, [main, "registry"], { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    const [code] = await once(child, "exit");
    expect(code).toBe(2);
    expect(stderr).toContain("give --listen URL");
  });
});
