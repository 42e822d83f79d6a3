/**
 * Run with test/fixtures/malloc-count.c preloaded: both ends of a pipe in
 * this process exchange 8 B tensors (echo-round-trips.ts), and the malloc
 * calls of the measured round trips are bracketed by two SIGUSR2, each of
 * which makes the counter print its count.
 *
 *   LD_PRELOAD=malloc-count.so node packages/e2e/dist/native-allocations.js TRANSPORT CHANNEL ROUNDTRIPS
 */
import { CPU_DEVICE } from "@tensorpipe/core";
import { createContext } from "@tensorpipe/bench";
import { echoRoundTrips } from "./echo-round-trips.js";

const [transport = "shm", channel = "basic", count = "5000"] = process.argv.slice(2);
const server = await createContext({ transports: [transport], channels: [channel] });
const client = await createContext({ transports: [transport], channels: [channel] });
try {
  const listener = await server.listen([transport === "shm" ? "shm://*" : "uv://127.0.0.1:0"]);
  const [serverPipe, clientPipe] = await Promise.all([listener.accept(), client.connect(listener.addresses()[0]!)]);
  const negotiated = clientPipe.channelFor(CPU_DEVICE, CPU_DEVICE);
  if (negotiated !== channel) throw new Error(`negotiated ${negotiated}, not ${channel}`);
  const roundTrips = echoRoundTrips(clientPipe, serverPipe);
  await roundTrips(3000);
  process.kill(process.pid, "SIGUSR2");
  await roundTrips(Number(count));
  process.kill(process.pid, "SIGUSR2");
} finally {
  await client.close();
  await server.close();
}
