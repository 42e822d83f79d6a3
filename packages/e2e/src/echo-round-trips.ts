import { type Allocation, CPU_DEVICE, type Message, type Pipe } from "@tensorpipe/core";

/**
 * Round trips of an 8-byte tensor between two pipes of this process, the
 * server echoing it back, each loop reusing its own message and allocation
 * objects: what they allocate per round trip is the library's. The function
 * returned runs `n` of them and checks that the last echo landed.
 */
export function echoRoundTrips(client: Pipe, server: Pipe): (n: number) => Promise<void> {
  const message: Message = { tensors: [{ buffer: new Uint8Array(8).fill(7), targetDevice: CPU_DEVICE }] };
  const echo: Message = { tensors: [{ buffer: new Uint8Array(8), targetDevice: CPU_DEVICE }] };
  const back: Allocation = { payloads: [], tensors: [{ buffer: new Uint8Array(8) }] };
  const landing: Allocation = { payloads: [], tensors: [{ buffer: echo.tensors![0]!.buffer }] };
  const serve = async (n: number) => {
    for (let i = 0; i < n; i++) {
      await server.readDescriptor();
      await server.read(landing);
      await server.write(echo);
    }
  };
  return async (n) => {
    const served = serve(n);
    for (let i = 0; i < n; i++) {
      await client.write(message);
      await client.readDescriptor();
      await client.read(back);
    }
    await served;
    if ((back.tensors[0]!.buffer as Uint8Array)[7] !== 7) throw new Error("the echo did not land");
  };
}
