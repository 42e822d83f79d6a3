/**
 * Context, Listener and Pipe close at the end of an `await using` block,
 * as node:net's Server does.
 */
import { Context, ErrorCode, type Pipe } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerUvTransport } from "@tensorpipe/transport-uv";
import { expect, it } from "vitest";

it("closes a context, its listener and its pipes when an `await using` block ends", async () => {
  let kept: { context: Context; pipe: Pipe; accepted: Pipe } | undefined;
  {
    await using context = new Context();
    registerUvTransport(context);
    registerBasicChannel(context);
    await using listener = await context.listen("uv://127.0.0.1:0");
    await using pipe = await context.connect(listener.url());
    const accepted = await listener.accept();
    kept = { context, pipe, accepted };
    expect([context.isClosed, listener.isClosed, pipe.isClosed, accepted.isClosed]).toEqual([false, false, false, false]);
  }
  expect([kept.context.isClosed, kept.pipe.isClosed, kept.accepted.isClosed]).toEqual([true, true, true]);
  expect((await kept.pipe.closed).code).toBe(ErrorCode.CLOSED);
  expect((await kept.accepted.closed).code).toBe(ErrorCode.CLOSED);
  await expect(kept.context.connect("uv://127.0.0.1:1")).rejects.toMatchObject({ code: ErrorCode.CLOSED });
});
