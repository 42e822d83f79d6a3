import { Deferred, ErrorCode, TensorPipeError, closedError } from "@tensorpipe/core";
import type { NativeAddon, NativeNic, NicAddress } from "./native.js";
import { RegistrationCache } from "./registration-cache.js";

/** Work requests outstanding per queue pair and direction; more wait their turn. */
export const QUEUE_DEPTH = 64;

/**
 * One RDMA device port in use by a channel context: its address, its
 * registrations, and the completions of every queue pair on it,
 * dispatched to the transfers that posted them.
 */
export class Nic {
  readonly address: NicAddress;
  readonly registrations: RegistrationCache;
  private readonly native: NativeNic;
  private readonly posted = new Map<number, (status: number) => void>();
  private nextWr = 1;

  constructor(
    addon: NativeAddon,
    readonly name: string,
    port: number,
    gidIndex: number,
  ) {
    if (!addon.IbvNic) throw new TensorPipeError(ErrorCode.NOT_VIABLE, `${addon.probe().reason}`);
    this.native = new addon.IbvNic(name, port, gidIndex, (ids, statuses) => {
      ids.forEach((id, i) => {
        const done = this.posted.get(id);
        this.posted.delete(id);
        // Completions of a queue pair already torn down have nobody to tell.
        done?.(statuses[i]!);
      });
    });
    this.address = this.native.address();
    this.registrations = new RegistrationCache({
      register: (base, size) => this.native.registerMemory(base, size),
      deregister: (id) => this.native.deregisterMemory(id),
    });
  }

  createQueuePair(): QueuePair {
    return new QueuePair(this, this.native);
  }

  /** Posts through `post` with a fresh work request id; settles with its completion. */
  track(post: (wrId: number) => void): Promise<void> {
    const wrId = this.nextWr++;
    const done = new Deferred<void>();
    post(wrId);
    this.posted.set(wrId, (status) => {
      if (status === 0) done.resolve();
      else done.reject(new TensorPipeError(ErrorCode.CONNECTION_RESET, `cuda-gdr: RDMA transfer on ${this.name} failed: ${this.native.statusText(status)}`));
    });
    return done.promise;
  }

  close(): void {
    this.registrations.clear();
    this.native.close();
    this.posted.clear();
  }
}

interface Waiting {
  run(): Promise<void>;
  done: Deferred<void>;
}

/**
 * A reliable-connection queue pair: sends and receives are matched in the
 * order they are posted, which the channel keeps equal on both ends. At
 * most QUEUE_DEPTH of each are outstanding; the rest wait, in order.
 */
export class QueuePair {
  readonly id: number;
  readonly qpn: number;
  private readonly outstanding = { send: 0, recv: 0 };
  private readonly waiting = { send: [] as Waiting[], recv: [] as Waiting[] };
  /** Posted, not completed: a destroyed queue pair's completions may never come. */
  private readonly inFlight = new Set<Deferred<void>>();
  private failure?: Error;

  constructor(
    private readonly nic: Nic,
    private readonly native: NativeNic,
  ) {
    const { id, qpn } = native.createQueuePair(QUEUE_DEPTH, QUEUE_DEPTH);
    this.id = id;
    this.qpn = qpn;
  }

  connect(remote: { lid: number; gid: Uint8Array; qpn: number; mtu: number }): void {
    this.native.connectQueuePair(this.id, remote);
  }

  send(ptr: bigint, length: number, lkey: number): Promise<void> {
    return this.enqueue("send", () => this.nic.track((wr) => this.native.postSend(this.id, ptr, length, lkey, wr)));
  }

  recv(ptr: bigint, length: number, lkey: number): Promise<void> {
    return this.enqueue("recv", () => this.nic.track((wr) => this.native.postRecv(this.id, ptr, length, lkey, wr)));
  }

  private enqueue(kind: "send" | "recv", run: () => Promise<void>): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const done = new Deferred<void>();
    this.waiting[kind].push({ run, done });
    this.pump(kind);
    return done.promise;
  }

  private pump(kind: "send" | "recv"): void {
    while (!this.failure && this.outstanding[kind] < QUEUE_DEPTH && this.waiting[kind].length > 0) {
      const { run, done } = this.waiting[kind].shift()!;
      this.outstanding[kind]++;
      this.inFlight.add(done);
      let posted: Promise<void>;
      try {
        posted = run();
      } catch (e) {
        this.outstanding[kind]--;
        this.inFlight.delete(done);
        done.reject(e);
        continue;
      }
      posted.then(
        () => done.resolve(),
        (e: Error) => done.reject(e),
      ).finally(() => {
        this.outstanding[kind]--;
        this.inFlight.delete(done);
        this.pump(kind);
      });
    }
  }

  /** Everything posted or waiting rejects with `error`; the queue pair is gone. */
  destroy(error: Error = closedError("cuda-gdr queue pair")): void {
    if (this.failure) return;
    this.failure = error;
    for (const w of [...this.waiting.send, ...this.waiting.recv]) w.done.reject(error);
    for (const d of this.inFlight) d.reject(error);
    this.inFlight.clear();
    this.waiting.send.length = 0;
    this.waiting.recv.length = 0;
    this.native.destroyQueuePair(this.id);
  }
}
