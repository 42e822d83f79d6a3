import { createContext, spawnPeer, sinkThroughput, pairedRatio } from "@tensorpipe/cli";
const peer = await spawnPeer("127.0.0.1", []);
const url = peer.urls.find((u) => u.startsWith("shm://"));
const mk = async (ch) => { const c = await createContext({ transports: ["shm"], channels: [ch] }); return { c, p: await c.connect(url) }; };
const A = await mk("cma"), B = await mk("basic");
const size = Number(process.argv[2] ?? 65536), count = Number(process.argv[3] ?? 250), quads = Number(process.argv[4] ?? 20);
const data = new Uint8Array(size).fill(1);
await sinkThroughput(A.p, data, 1000); await sinkThroughput(B.p, data, 1000);
for (let rep = 0; rep < 5; rep++) {
  const a = [], b = [];
  for (let q = 0; q < quads; q++) {
    a.push(await sinkThroughput(A.p, data, count)); b.push(await sinkThroughput(B.p, data, count));
    b.push(await sinkThroughput(B.p, data, count)); a.push(await sinkThroughput(A.p, data, count));
  }
  console.log(`rep ${rep}: cma/basic ${pairedRatio(a, b).toFixed(3)}`);
}
await A.c.close(); await B.c.close(); await peer.stop();
