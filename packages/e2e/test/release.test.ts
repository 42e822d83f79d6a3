/**
 * What a user installs: every publishable package packed as it would be
 * published, installed with npm into an empty project on a PATH with no
 * compiler, cmake or make, then used for real. The native packages must run
 * from the binaries inside their tarballs, and say how to build one where
 * none fits.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const packagesDir = fileURLToPath(new URL("../../", import.meta.url));
const PUBLISHED = [
  "core",
  "transport-uv",
  "transport-shm",
  "channel-basic",
  "channel-cma",
  "channel-mpt",
  "cuda",
  "channel-cuda-basic",
  "channel-cuda-ipc",
  "channel-cuda-gdr",
  "rendezvous",
  "metrics",
  "cluster",
  "cli",
];
/** What installs with npm --offline, with nothing but the tarballs: the cluster's etcd client comes from the registry. */
const OFFLINE = PUBLISHED.filter((name) => name !== "cluster");
const NATIVE: Record<string, string> = {
  "transport-uv": "tensorpipe_uv",
  "transport-shm": "tensorpipe_shm",
  "channel-cma": "tensorpipe_cma",
  "channel-mpt": "tensorpipe_mpt",
  cuda: "tensorpipe_cuda",
  "channel-cuda-ipc": "tensorpipe_cuda_ipc",
  "channel-cuda-gdr": "tensorpipe_cuda_gdr",
};

// Debian's arm64 Node under qemu-user (scripts/arm64-node.sh), and whether
// the addons were cross-built (scripts/cross-prebuilds.sh). CI makes both
// and sets TP_REQUIRE_ARM64: there, their absence fails the tests below.
const arm64Node = fileURLToPath(new URL("../../../.ci/out/arm64-node/node", import.meta.url));
const arm64 = existsSync(arm64Node) && Object.keys(NATIVE).every((name) => existsSync(join(packagesDir, name, "build-linux-arm64")));
const skipArm64 = !arm64 && !process.env.TP_REQUIRE_ARM64;

/**
 * A program that moves `mib` MiB over uv+basic, shm+`shmChannel` and
 * uv+mpt between two contexts, as an installed app would, and prints what
 * each pair negotiated and whether the bytes arrived.
 */
function transferScript(shmChannel: "cma" | "basic", mib: number): string {
  return `import { CPU_DEVICE, Context } from "@tensorpipe/core";
import { registerUvTransport } from "@tensorpipe/transport-uv";
import { registerShmTransport } from "@tensorpipe/transport-shm";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerCmaChannel } from "@tensorpipe/channel-cma";
import { registerMptChannel } from "@tensorpipe/channel-mpt";
const results = [];
let threadsUnavailable;
for (const [url, register] of [
  ["uv://127.0.0.1:0", (c) => { registerUvTransport(c); registerBasicChannel(c); }],
  ["shm://*", (c) => { registerShmTransport(c); ${shmChannel === "cma" ? "registerCmaChannel" : "registerBasicChannel"}(c); }],
  ["uv://127.0.0.1:0", (c) => { registerUvTransport(c); threadsUnavailable = registerMptChannel(c).threadsUnavailable(); }],
]) {
  const a = new Context(), b = new Context();
  register(a); register(b);
  const listener = await a.listen(url);
  const [client, server] = await Promise.all([b.connect(listener.addresses()[0]), listener.accept()]);
  const data = new Uint8Array(${mib} << 20).map((_, i) => i * 7);
  const written = client.write({ tensors: [{ buffer: data, targetDevice: CPU_DEVICE }] });
  await server.readDescriptor();
  const into = new Uint8Array(${mib} << 20);
  await server.read({ payloads: [], tensors: [{ buffer: into }] });
  await written;
  results.push({ transport: client.transport, channel: client.channelFor(CPU_DEVICE, CPU_DEVICE), equal: Buffer.compare(data, into) === 0 });
  await a.close(); await b.close();
}
console.log(JSON.stringify({ arch: process.arch, results, threadsUnavailable }));
`;
}

function npmCli(): string {
  const npm = execFileSync("sh", ["-c", "command -v npm"], { encoding: "utf8" }).trim();
  return realpathSync(npm);
}

describe("the published packages", () => {
  const root = mkdtempSync(join(tmpdir(), "tp-release-"));
  const packs = join(root, "packs");
  const app = join(root, "app");
  const bin = join(root, "bin");
  const tarballs: Record<string, string> = {};
  // Only node itself: no cc, c++, cmake, make or python to fall back on.
  const bareEnv = () => ({ PATH: bin, HOME: root, npm_config_cache: join(root, "npm-cache"), npm_config_update_notifier: "false" });

  beforeAll(() => {
    mkdirSync(packs);
    mkdirSync(app);
    mkdirSync(bin);
    symlinkSync(process.execPath, join(bin, "node"));
    for (const name of PUBLISHED) {
      const before = new Set(readdirSync(packs));
      execFileSync("pnpm", ["pack", "--pack-destination", packs], { cwd: join(packagesDir, name), stdio: "pipe" });
      tarballs[name] = join(packs, readdirSync(packs).find((f) => !before.has(f))!);
    }
  }, 120_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  const listing = (name: string) => execFileSync("tar", ["tzf", tarballs[name]!], { encoding: "utf8" }).trim().split("\n");
  const manifest = (name: string) =>
    JSON.parse(execFileSync("tar", ["xzOf", tarballs[name]!, "package/package.json"], { encoding: "utf8" })) as Record<string, unknown>;

  /** Runs `node` (this one, or the arm64 one) in the installed app, with nothing but node on PATH. */
  const runInApp = (node: string, args: string[]) => execFileSync(node, args, { cwd: app, env: bareEnv(), encoding: "utf8", timeout: 120_000 });

  function expectTransfers(node: string, arch: string, shmChannel: "cma" | "basic", mib: number): void {
    const script = `transfer-${arch}.js`;
    writeFileSync(join(app, script), transferScript(shmChannel, mib));
    expect(JSON.parse(runInApp(node, [script]))).toEqual({
      arch,
      results: [
        { transport: "uv", channel: "basic", equal: true },
        { transport: "shm", channel: shmChannel, equal: true },
        { transport: "uv", channel: "mpt", equal: true },
      ],
      threadsUnavailable: null,
    });
  }

  const doctorOn = (node: string) =>
    JSON.parse(runInApp(node, [join(app, "node_modules/@tensorpipe/cli/dist/main.js"), "doctor", "--json"])) as {
      backends: { name: string; installed: boolean; viable: boolean; reason?: string }[];
    };

  it("ship typed ESM, a README, and real version ranges", () => {
    for (const name of PUBLISHED) {
      const files = listing(name);
      const m = manifest(name);
      expect(m.type).toBe("module");
      expect(files).toContain("package/README.md");
      // What each release changed, as changesets wrote it.
      expect(files).toContain("package/CHANGELOG.md");
      if (name === "cli") {
        // A command only: nothing to import.
        expect(m.bin).toEqual({ tensorpipe: "./dist/main.js" });
        expect(m.exports).toEqual({ "./package.json": "./package.json" });
      } else if (name === "metrics") {
        // One entry point per monitoring stack, none for the package itself.
        expect(Object.keys(m.exports as object)).toEqual(["./package.json", "./prometheus", "./opentelemetry"]);
        for (const f of ["prometheus.js", "prometheus.d.ts", "opentelemetry.js", "opentelemetry.d.ts"]) expect(files).toContain(`package/dist/${f}`);
      } else {
        expect(files).toContain("package/dist/index.js");
        expect(files).toContain("package/dist/index.d.ts");
      }
      // A backend author's guide and the API report it promises are where the author is.
      if (name === "core")
        for (const f of ["docs/backends.md", "docs/security.md", "docs/wire-protocol.md", "api/index.api.txt", "api/backend.api.txt", "api/testing.api.txt"])
          expect(files).toContain(`package/${f}`);
      // A store author's guide, and the security page the README links.
      if (name === "cluster")
        for (const f of ["docs/cluster.md", "docs/security.md", "dist/testing.js", "dist/testing.d.ts"]) expect(files).toContain(`package/${f}`);
      // Tools that report versions resolve it.
      expect((m.exports as Record<string, unknown>)["./package.json"], name).toBe("./package.json");
      // Measurement lives in the private bench package.
      expect(
        files.filter((f) => /baseline|zmq|svg-plot|progress-bar/.test(f)),
        name,
      ).toEqual([]);
      expect(JSON.stringify(m.dependencies ?? {})).not.toContain("workspace:");
      expect(JSON.stringify(m.peerDependencies ?? {})).not.toContain("workspace:");
      expect(files.some((f) => f.includes("/test/") || f.startsWith("package/build/"))).toBe(false);
      // What npm shows and checks: the Node it needs, and words to find it by.
      expect(m.engines, name).toEqual({ node: ">=20" });
      expect((m.keywords as string[] | undefined)?.length, name).toBeGreaterThan(0);
    }
  });

  it("state the glibc and libstdc++ the linux-x64 prebuilds need, as their symbol versions say", () => {
    const versions = (prefix: string, text: string) => [...text.matchAll(new RegExp(`${prefix}_([0-9.]+)`, "g"))].map((m) => m[1]!);
    const newest = (vs: string[]) => vs.sort((a, b) => a.localeCompare(b, undefined, { numeric: true })).at(-1)!;
    const needed: Record<"GLIBC" | "GLIBCXX", string[]> = { GLIBC: [], GLIBCXX: [] };
    for (const [name, addon] of Object.entries(NATIVE)) {
      const out = join(root, `${addon}.node`);
      writeFileSync(out, execFileSync("tar", ["xzOf", tarballs[name]!, `package/prebuilds/linux-x64/${addon}.node`]));
      const symbols = execFileSync("objdump", ["-T", out], { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
      needed.GLIBC.push(...versions("GLIBC", symbols));
      needed.GLIBCXX.push(...versions("GLIBCXX", symbols));
    }
    const readme = readFileSync(join(packagesDir, "../README.md"), "utf8");
    expect(readme).toContain(`glibc ${newest(needed.GLIBC)} and`);
    expect(readme).toContain(`GLIBCXX_${newest(needed.GLIBCXX)}, or later`);
  });

  it("ship each native addon prebuilt for linux-x64, with its sources for a rebuild", () => {
    for (const [name, addon] of Object.entries(NATIVE)) {
      const files = listing(name);
      expect(files).toContain(`package/prebuilds/linux-x64/${addon}.node`);
      expect(files).toContain("package/CMakeLists.txt");
    }
  });

  it.skipIf(skipArm64)("ship each native addon prebuilt for linux-arm64 too", () => {
    expect(arm64, "run scripts/cross-prebuilds.sh and scripts/arm64-node.sh first").toBe(true);
    for (const [name, addon] of Object.entries(NATIVE)) {
      const files = listing(name);
      expect(files).toContain(`package/prebuilds/linux-arm64/${addon}.node`);
      const header = execFileSync("tar", ["xzOf", tarballs[name]!, `package/prebuilds/linux-arm64/${addon}.node`]).subarray(0, 20);
      // ELF, 64-bit, little-endian, e_machine 183: AArch64.
      expect([...header.subarray(0, 6)]).toEqual([0x7f, 0x45, 0x4c, 0x46, 2, 1]);
      expect(header.readUInt16LE(18)).toBe(183);
    }
  });

  it("install with npm on a machine without a compiler and move tensors", () => {
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    execFileSync(process.execPath, [npmCli(), "install", "--offline", "--no-audit", "--no-fund", ...OFFLINE.map((name) => tarballs[name]!)], {
      cwd: app,
      env: bareEnv(),
      stdio: "pipe",
    });
    // mpt's lanes run on the prebuilt addon's threads (threadsUnavailable: null).
    expectTransfers(process.execPath, "x64", "cma", 4);
    for (const b of doctorOn(process.execPath).backends) {
      expect(b, b.name).toMatchObject({ installed: true });
      // A GPU channel on a machine without one says so (its prebuilt addon
      // loaded and probed: no "did not load"); everything else works.
      if (b.name === "cuda-gdr" && !b.viable)
        expect(b.reason).toMatch(/^no RDMA: |no InfiniBand or RoCE device|no RDMA device has an active port|no CUDA driver|no GPU|nvidia-peermem/);
      else if (b.name.startsWith("cuda-") && !b.viable) expect(b.reason).toMatch(/no CUDA driver|no GPU|did not start/);
      else expect(b, b.name).toMatchObject({ viable: true });
    }
  }, 120_000);

  it("give a pipe in memory from @tensorpipe/core/testing to a test run without vitest", () => {
    // vitest is an optional peer dependency: only the conformance suites need it.
    expect(existsSync(join(app, "node_modules/vitest"))).toBe(false);
    const script = join(app, "memory-pipe.mjs");
    writeFileSync(
      script,
      `import { memoryPipePair } from "@tensorpipe/core/testing";
const { client, server } = memoryPipePair();
await client.write({ metadata: "in memory" });
console.log((await server.readMessage()).metadata);
`,
    );
    expect(runInApp(process.execPath, [script]).trim()).toBe("in memory");
  });

  it("run `tensorpipe bench` as installed: every pair here and node:net, timed against its own peer", () => {
    const out = runInApp(process.execPath, [join(app, "node_modules/@tensorpipe/cli/dist/main.js"), "bench", "--quick", "--sizes", "8,64K"]);
    expect(out).toMatch(/negotiation picks shm\+cma/);
    for (const series of ["uv+basic", "uv+mpt", "shm+cma", "default pair", "node:net"])
      expect(out).toMatch(new RegExp(`^(64 KiB|8 B)? +${series.replace("+", "\\+")} +\\d+\\.\\d`, "m"));
    expect(out).toMatch(/^ {2}shm\+cma +\d+\.\d\dx GB\/s, \d+\.\d\dx round trip$/m);
  }, 120_000);

  // An arm64 machine, emulated: Debian's own arm64 Node (18) under
  // qemu-user loads the linux-arm64 prebuilds from the same install.
  it.skipIf(skipArm64)(
    "load the linux-arm64 prebuilds with Debian's arm64 Node under qemu-user and move tensors",
    () => {
      expect(arm64, "run scripts/cross-prebuilds.sh and scripts/arm64-node.sh first").toBe(true);
      // qemu-user has no process_vm_readv: shm goes with basic there.
      expectTransfers(arm64Node, "arm64", "basic", 1);
      for (const b of doctorOn(arm64Node).backends) {
        expect(b, b.name).toMatchObject({ installed: true });
        // Every addon loaded ("did not load" would name a bad binary). qemu-user
        // lacks process_vm_readv, and there is no GPU.
        expect(b.reason ?? "", b.name).not.toMatch(/did not load|no prebuilt binary/);
        if (b.name === "cma") expect(b.reason).toMatch(/not implemented here \(ENOSYS\)/);
        else if (b.name.startsWith("cuda-")) expect(b.viable).toBe(false);
        else expect(b, b.name).toMatchObject({ viable: true });
      }
    },
    240_000,
  );

  it("say how to build the addon where no prebuilt binary fits", () => {
    const prebuilds = join(app, "node_modules/@tensorpipe/transport-uv/prebuilds");
    rmSync(join(prebuilds, "linux-arm64"), { recursive: true, force: true });
    renameSync(join(prebuilds, "linux-x64"), join(prebuilds, "linux-arm64"));
    const uv = doctorOn(process.execPath).backends.find((b) => b.name === "uv")!;
    expect(uv.viable).toBe(false);
    expect(uv.reason).toMatch(/tensorpipe_uv\.node: there is no prebuilt binary for linux-x64 \(this package has linux-arm64\)/);
    expect(uv.reason).toContain(`cd ${dirname(prebuilds)} && npm install --no-save cmake-js node-addon-api @tensorpipe/native-common && npx cmake-js compile`);
    expect(readFileSync(join(dirname(prebuilds), "CMakeLists.txt"), "utf8")).toContain("tensorpipe_addon(");
  });
});
