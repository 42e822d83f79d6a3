import { createContext, spawnPeer, sinkThroughput, median, pairedRatio } from "@tensorpipe/cli";
const peer = await spawnPeer("127.0.0.1", ["--transports", "shm"]);
const url = peer.urls.find((u) => u.startsWith("shm://"));
const specs = process.argv.slice(2);
const pipes = [];
for (const ch of specs) {
  const ctx = await createContext({ transports: ["shm"], channels: [ch] });
  pipes.push({ ch, ctx, pipe: await ctx.connect(url), g: [] });
}
const data = new Uint8Array(1 << 20).fill(1);
for (const p of pipes) await sinkThroughput(p.pipe, data, 200);
for (let t = 0; t < 40; t++) {
  const order = [...pipes].sort(() => Math.random() - 0.5);
  for (const p of order) p.g.push(await sinkThroughput(p.pipe, data, 100));
}
console.log(pipes.map((p, i) => `${i}:${p.ch} ${median(p.g).toFixed(1)} r${pairedRatio(p.g, pipes[1].g).toFixed(2)}`).join("  "));
for (const p of pipes) await p.ctx.close();
await peer.stop();
