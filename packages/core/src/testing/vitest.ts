/**
 * vitest, for the conformance suites, where it is installed: the rest of
 * `@tensorpipe/core/testing` (the memory pipe, the protocol's messages,
 * captured sessions) works in any test runner, or none, without it.
 */
import { ErrorCode, TensorPipeError } from "../errors.js";

type Vitest = typeof import("vitest");

const loaded: Vitest | undefined = await import("vitest").catch(() => undefined);

function absent(): never {
  throw new TensorPipeError(
    ErrorCode.NOT_VIABLE,
    "the conformance suites of @tensorpipe/core/testing run under vitest: npm install -D vitest, and run them with it",
  );
}

const vitest =
  loaded ?? ({ afterAll: absent, afterEach: absent, beforeAll: absent, beforeEach: absent, describe: absent, expect: absent, it: absent } as unknown as Vitest);

export const { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } = vitest;

/**
 * Each conformance test's and hook's time limit where the suite's options
 * give none: the suites move hundreds of MiB and open many pipes, which
 * outlasts vitest's default 5 s on a loaded machine.
 */
export const SUITE_TIMEOUT_MS = 60_000;
