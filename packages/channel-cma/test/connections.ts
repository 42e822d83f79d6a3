import type { Connection } from "@tensorpipe/core/backend";
import { UvTransport } from "@tensorpipe/transport-uv";
import { expect } from "vitest";

const transport = new UvTransport();

/** A channel's two connections at both ends, over TCP: [here, there]; each joins `open`, for the test to close. */
export async function connectionPairs(open: Connection[]): Promise<{ here: Connection[]; there: Connection[] }> {
  const accepted: Connection[] = [];
  const listener = await transport.listen("127.0.0.1:0", (c) => accepted.push(c));
  const here = [await transport.connect(listener.address()), await transport.connect(listener.address())];
  await expect.poll(() => accepted.length).toBe(2);
  listener.close();
  open.push(...here, ...accepted);
  return { here, there: accepted };
}
