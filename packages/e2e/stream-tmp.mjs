import { withShmPeer } from "/work/main/packages/e2e/dist/script.js";
import { sinkThroughput } from "@tensorpipe/cli";
const size = Number(process.argv[2] ?? 64 * 2 ** 20);
const seconds = Number(process.argv[3] ?? 10);
await withShmPeer({ channels: ["cma"] }, async (pipe, peer) => {
  console.error("peer", peer.pid, "me", process.pid);
  const data = new Uint8Array(size).fill(1);
  const batch = Math.max(2, Math.ceil((384 * 2 ** 20) / size));
  const t0 = performance.now();
  const g = [];
  while (performance.now() - t0 < seconds * 1000) g.push(await sinkThroughput(pipe, data, batch));
  g.sort((a, b) => a - b);
  console.log("median GB/s", g[g.length >> 1].toFixed(2), "turns", g.length);
});
