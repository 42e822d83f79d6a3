import { createContext, spawnPeer, readmeRoundTrip, CBaseline, C_SERIES } from "@tensorpipe/cli";
const peer = await spawnPeer("127.0.0.1", []);
const url = peer.urls.find((u) => u.startsWith("shm://"));
const ctx = await createContext({});
const pipe = await ctx.connect(url);
const extra = Number(process.argv[4] ?? 0);
const others = [];
for (let i = 0; i < extra; i++) {
  const c = await createContext({ transports: ["shm"], channels: [["cma", "basic", "mpt"][i % 3]] });
  others.push(c); await c.connect(url);
}
const ring = CBaseline.named(C_SERIES.shmRing);
const data = new Uint8Array(8).fill(1), back = new Uint8Array(8);
const mode = process.argv[2] ?? "ring";
const warm = Number(process.argv[3] ?? 0);
for (let i = 0; i < warm; i++) await readmeRoundTrip(pipe, data, back);
const pre = Number(process.argv[5] ?? 3);
const byPos = Array.from({ length: 100 }, () => []);
const all = [];
for (let t = 0; t < 60; t++) {
  if (mode === "ring") await ring.roundTrips(8, 2000);
  else if (mode === "sleep") await new Promise((r) => setTimeout(r, 5));
  for (let i = 0; i < pre; i++) await readmeRoundTrip(pipe, data, back);
  for (let i = 0; i < 100; i++) {
    const t0 = performance.now();
    await readmeRoundTrip(pipe, data, back);
    const us = (performance.now() - t0) * 1000;
    byPos[i].push(us); all.push(us);
  }
}
all.sort((a, b) => a - b);
const p = (q) => all[Math.floor(q * (all.length - 1))];
const p99 = p(0.99);
console.log(mode, warm, extra, pre, [0.5, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999].map((q) => `p${q * 100} ${p(q).toFixed(1)}`).join(" "));
const slowAt = byPos.map((xs) => xs.filter((x) => x >= p99).length);
console.log("slow (>= p99) by position in turn:", slowAt.slice(0, 10).join(","), "| rest", slowAt.slice(10).reduce((a, b) => a + b, 0));
const med = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
console.log("median by position:", byPos.slice(0, 8).map((xs) => med(xs).toFixed(1)).join(","), "... pos 50:", med(byPos[50]).toFixed(1));
for (const c of others) await c.close(); await ctx.close(); await peer.stop();
