import {
  type Channel,
  type Connection,
  type CudaBuffer,
  ErrorCode,
  type TensorBuffer,
  TensorPipeError,
  fromNativeError,
  protocolError,
} from "@tensorpipe/core/backend";
import { cudaTensor, streamReady } from "@tensorpipe/cuda";
import { IPC_REQUEST_BYTES, type IpcRequest, decodeIpcFrame, encodeIpcAnswer, encodeIpcAnswers, encodeIpcRequest } from "./ipc-request.js";
import type { NativeAddon } from "./native.js";

/** The longest answer a receiver sends back (the text of what failed). */
const MAX_ANSWER_BYTES = 4096;
const MAX_FRAME_BYTES = Math.max(IPC_REQUEST_BYTES, 1 + MAX_ANSWER_BYTES);

/** How a receive ends, for its answer: undefined when copied, the text of what failed, or null with no request to answer. */
type Outcome = string | undefined | null;

/** A promise with its settling functions, for frames that arrive before or after they are asked for. */
interface Waiter<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: Error): void;
}

function waiter<T>(): Waiter<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/**
 * One end of a cuda-ipc channel. Sending a tensor waits, here, until the
 * work queued on its stream is done (at once where it already is), then
 * sends its allocation's IPC handle over the channel's connection; the
 * receiver copies straight from the sender's GPU memory into its own, then
 * answers, and only then does the send settle (the sender may reuse its
 * memory). Zero-length tensors cross nothing. Both ends send at once on the
 * one connection: a single reader sorts the peer's requests (taken by
 * receives in order) from its answers (to sends, in order). The receives
 * of one turn (a message's tensors) are answered together, once all have
 * landed: one counted frame where the peer reads those (ANSWERS_EXTENSION),
 * else one write of an answer each.
 */
export class CudaIpcChannel implements Channel {
  private answers: Promise<unknown> = Promise.resolve();
  /** The peer's requests that no receive has taken yet. */
  private readonly arrived: IpcRequest[] = [];
  /** Receives waiting for the peer's next request. */
  private readonly takers: Waiter<IpcRequest>[] = [];
  /** Sends waiting for the peer's answer, oldest first. */
  private readonly unanswered: Waiter<string | undefined>[] = [];
  /** What ended the connection, once it has. */
  private failure: Error | undefined;
  /** The last request written or waiting to be: requests go in send order. */
  private requests: Promise<void> = Promise.resolve();
  /** Sends whose request waits for its tensor's stream. */
  private waiting = 0;
  /** The outcomes of this turn's receives, answered together; undefined between turns. */
  private turn: Promise<Outcome>[] | undefined;

  /** @internal Made by CudaIpcChannelContext.createChannel(). */
  constructor(
    private readonly connection: Connection,
    private readonly addon: NativeAddon,
    private readonly contextId: number,
    /** Whether the peer reads counted answers. */
    private readonly countedAnswers: boolean,
  ) {
    this.readNext();
  }

  private readNext(): void {
    this.connection.read(MAX_FRAME_BYTES).then(
      (bytes) => {
        try {
          this.take(bytes);
        } catch (e) {
          this.fail(e as Error);
          this.connection.close(e as Error);
          return;
        }
        this.readNext();
      },
      (e: Error) => this.fail(e),
    );
  }

  private take(bytes: Uint8Array): void {
    const frame = decodeIpcFrame(bytes);
    if (frame.kind === "request") {
      const taker = this.takers.shift();
      if (taker) taker.resolve(frame.request);
      else this.arrived.push(frame.request);
      return;
    }
    if (frame.kind === "answers") {
      if (frame.count === 0 || frame.count > this.unanswered.length) {
        throw protocolError(`cuda-ipc: the peer answered ${frame.count} tensors where ${this.unanswered.length} were sent`);
      }
      for (const send of this.unanswered.splice(0, frame.count)) send.resolve(undefined);
      return;
    }
    const send = this.unanswered.shift();
    if (!send) throw protocolError("cuda-ipc: the peer answered a tensor that was never sent");
    send.resolve(frame.failure);
  }

  private fail(error: Error): void {
    this.failure = error;
    for (const w of [...this.takers.splice(0), ...this.unanswered.splice(0)]) w.reject(error);
  }

  /** Sends the first `length` bytes of `buffer`; resolves when the buffer may be reused. */
  send(buffer: TensorBuffer, length: number): Promise<void> {
    let exported: ReturnType<NativeAddon["exportTensor"]>;
    let tensor: CudaBuffer;
    try {
      tensor = cudaTensor(buffer, length, "cuda-ipc");
      if (length === 0) return Promise.resolve();
      exported = this.addon.exportTensor(tensor.device.index, tensor.ptr, tensor.stream ?? 0n);
    } catch (e) {
      return Promise.reject(fromNativeError(e, "cuda-ipc export"));
    }
    const request = encodeIpcRequest({ memHandle: exported.memHandle, offset: exported.offset, length });
    let written: Promise<void>;
    if (exported.ready && this.waiting === 0) {
      written = this.connection.write([request]);
    } else {
      this.waiting++;
      const ready = exported.ready ? undefined : streamReady(tensor.stream ?? 0n, tensor.device.index);
      // Handled below, once the requests before it are written; not an unhandled rejection meanwhile.
      ready?.catch(() => undefined);
      written = this.requests
        .then(() => ready)
        .then(
          () => this.connection.write([request]),
          (e: Error) => {
            // The answers read below are matched to requests in order: one never sent breaks that.
            this.connection.close(e);
            throw e;
          },
        )
        .finally(() => this.waiting--);
    }
    this.requests = written.catch(() => undefined);
    // Requests go out in send order, so answers come back in it.
    const answered = waiter<string | undefined>();
    if (this.failure) answered.reject(this.failure);
    else this.unanswered.push(answered);
    return Promise.all([written, answered.promise]).then(([, failure]) => {
      if (failure !== undefined) throw new TensorPipeError(ErrorCode.SYSTEM, `the peer could not copy the tensor: ${failure}`);
    });
  }

  /** Receives `length` bytes into `buffer`; resolves when they have landed. */
  recv(buffer: TensorBuffer, length: number): Promise<void> {
    let tensor: CudaBuffer;
    try {
      tensor = cudaTensor(buffer, length, "cuda-ipc");
    } catch (e) {
      return Promise.reject(e);
    }
    if (length === 0) return Promise.resolve();
    const request = this.nextRequest().then((r) => {
      if (r.length !== length) throw protocolError(`cuda-ipc: peer sent a tensor of ${r.length} bytes for a receive of ${length}`);
      return r;
    });
    const copied = request.then(
      (r) =>
        new Promise<void>((resolve, reject) => {
          try {
            this.addon.importCopy(this.contextId, tensor.device.index, r.memHandle, r.offset, tensor.ptr, length, tensor.stream ?? 0n, (err) =>
              err ? reject(fromNativeError(err, "cuda-ipc copy")) : resolve(),
            );
          } catch (e) {
            reject(fromNativeError(e, "cuda-ipc copy"));
          }
        }),
    );
    const outcome = request.then(
      () =>
        copied.then(
          () => undefined,
          (e: Error) => e.message.slice(0, MAX_ANSWER_BYTES / 4),
        ),
      () => null,
    );
    if (!this.turn) {
      const turn: Promise<Outcome>[] = (this.turn = []);
      queueMicrotask(() => {
        this.turn = undefined;
        this.answers = this.answers.then(() => this.answer(turn));
      });
    }
    this.turn.push(outcome);
    return copied;
  }

  /** Answers a turn's receives, in the order their requests came, once each has landed or failed. */
  private async answer(turn: readonly Promise<Outcome>[]): Promise<void> {
    const outcomes = (await Promise.all(turn)).filter((o) => o !== null);
    if (outcomes.length === 0) return;
    const frames =
      this.countedAnswers && outcomes.every((o) => o === undefined) ? [encodeIpcAnswers(outcomes.length)] : outcomes.map((o) => encodeIpcAnswer(o));
    await this.connection.write(frames).catch(() => undefined);
  }

  private nextRequest(): Promise<IpcRequest> {
    const r = this.arrived.shift();
    if (r) return Promise.resolve(r);
    if (this.failure) return Promise.reject(this.failure);
    const taker = waiter<IpcRequest>();
    this.takers.push(taker);
    return taker.promise;
  }

  /** Ends the channel; pending sends and receives reject with `error` (or ERR_TP_CLOSED). */
  close(error?: Error): void {
    this.connection.close(error);
  }
}
