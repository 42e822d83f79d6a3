import { Deferred, ErrorCode, TensorPipeError, closedError } from "@tensorpipe/core/backend";
import type { NativeAddon, NativeNic, NicAddress } from "./native.js";
import { RegistrationCache } from "./registration-cache.js";

/** Work requests outstanding per queue pair and direction; more wait their turn. */
export const QUEUE_DEPTH = 64;
/**
 * Work requests outstanding on one NIC, all its queue pairs together; more
 * wait their turn. Its completion queue holds twice as many: completions
 * of a queue pair destroyed with work outstanding may still be in it
 * after their slots here are given back.
 */
export const NIC_DEPTH = 4096;

interface Posted {
  qp: QueuePair;
  settle(status: number): void;
}

/**
 * One RDMA device port in use by a channel context: its address, its
 * registrations, and the completions of every queue pair on it,
 * dispatched to the transfers that posted them.
 */
export class Nic {
  /** What a peer needs to reach this NIC. */
  readonly address: NicAddress;
  /** Memory registered with this NIC. */
  readonly registrations: RegistrationCache;
  private readonly native: NativeNic;
  private readonly posted = new Map<number, Posted>();
  /** Queue pairs with work that waits for room on the NIC, in the order they asked. */
  private readonly starved = new Set<() => void>();
  private nextWr = 1;

  /** @internal Made by CudaGdrChannelContext for each RDMA device it uses. */
  constructor(
    addon: NativeAddon,
    /** The RDMA device's name ("mlx5_0"). */
    readonly name: string,
    port: number,
    gidIndex: number,
  ) {
    if (!addon.IbvNic) throw new TensorPipeError(ErrorCode.NOT_VIABLE, `${addon.probe().reason}`);
    this.native = new addon.IbvNic(name, port, gidIndex, 2 * NIC_DEPTH, (ids, statuses) => {
      ids.forEach((id, i) => {
        const posted = this.posted.get(id);
        // Completions of a queue pair already torn down have nobody to tell.
        if (!posted) return;
        this.posted.delete(id);
        posted.settle(statuses[i]!);
      });
      this.feedStarved();
    });
    this.address = this.native.address();
    this.registrations = new RegistrationCache({
      register: (base, size) => this.native.registerMemory(base, size),
      deregister: (id) => this.native.deregisterMemory(id),
    });
  }

  /** A new reliable-connected queue pair on this NIC. */
  createQueuePair(): QueuePair {
    return new QueuePair(this, this.native);
  }

  /**
   * Posts for `qp` through `post` with a fresh work request id, if the NIC
   * has room, and settles with its completion; else returns null and calls
   * `wake` once it may have room.
   */
  post(qp: QueuePair, post: (wrId: number) => void, wake: () => void): Promise<void> | null {
    if (this.posted.size >= NIC_DEPTH) {
      this.starved.add(wake);
      return null;
    }
    const wrId = this.nextWr++;
    post(wrId);
    const done = new Deferred<void>();
    this.posted.set(wrId, {
      qp,
      settle: (status) => {
        if (status === 0) done.resolve();
        else done.reject(new TensorPipeError(ErrorCode.CONNECTION_RESET, `cuda-gdr: RDMA transfer on ${this.name} failed: ${this.native.statusText(status)}`));
      },
    });
    return done.promise;
  }

  /** Gives back the room of `qp`'s outstanding work: it is destroyed, and its completions may never come. */
  forget(qp: QueuePair, wakers: readonly (() => void)[]): void {
    for (const wake of wakers) this.starved.delete(wake);
    for (const [wrId, posted] of this.posted) if (posted.qp === qp) this.posted.delete(wrId);
    this.feedStarved();
  }

  private feedStarved(): void {
    for (const wake of this.starved) {
      if (this.posted.size >= NIC_DEPTH) return;
      this.starved.delete(wake);
      wake();
    }
  }

  /** Destroys the queue pairs and frees the NIC's resources. */
  close(): void {
    this.registrations.clear();
    this.native.close();
    this.posted.clear();
    this.starved.clear();
  }
}

interface Waiting {
  post(wrId: number): void;
  done: Deferred<void>;
}

/**
 * A reliable-connection queue pair: sends and receives are matched in the
 * order they are posted, which the channel keeps equal on both ends. At
 * most QUEUE_DEPTH of each are outstanding, and NIC_DEPTH on the NIC; the
 * rest wait, in order.
 */
export class QueuePair {
  /** Its index on the NIC. */
  readonly id: number;
  /** Its queue pair number, for the peer to connect to. */
  readonly qpn: number;
  private readonly outstanding = { send: 0, recv: 0 };
  private readonly waiting = { send: [] as Waiting[], recv: [] as Waiting[] };
  /** Posted, not completed: a destroyed queue pair's completions may never come. */
  private readonly inFlight = new Set<Deferred<void>>();
  private readonly wake = { send: () => this.pump("send"), recv: () => this.pump("recv") };
  private failure?: Error;

  /** @internal Made by Nic.createQueuePair(). */
  constructor(
    private readonly nic: Nic,
    private readonly native: NativeNic,
  ) {
    const { id, qpn } = native.createQueuePair(QUEUE_DEPTH, QUEUE_DEPTH);
    this.id = id;
    this.qpn = qpn;
  }

  /** Connects to the peer's queue pair (to ready-to-send). */
  connect(remote: { lid: number; gid: Uint8Array; qpn: number; mtu: number }): void {
    this.native.connectQueuePair(this.id, remote);
  }

  /** Sends [ptr, ptr + length); resolves on its completion. */
  send(ptr: bigint, length: number, lkey: number): Promise<void> {
    return this.enqueue("send", (wr) => this.native.postSend(this.id, ptr, length, lkey, wr));
  }

  /** Receives into [ptr, ptr + length); resolves on its completion. */
  recv(ptr: bigint, length: number, lkey: number): Promise<void> {
    return this.enqueue("recv", (wr) => this.native.postRecv(this.id, ptr, length, lkey, wr));
  }

  private enqueue(kind: "send" | "recv", post: (wrId: number) => void): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const done = new Deferred<void>();
    this.waiting[kind].push({ post, done });
    this.pump(kind);
    return done.promise;
  }

  private pump(kind: "send" | "recv"): void {
    while (!this.failure && this.outstanding[kind] < QUEUE_DEPTH && this.waiting[kind].length > 0) {
      const { post, done } = this.waiting[kind][0]!;
      let posted: Promise<void> | null;
      try {
        posted = this.nic.post(this, post, this.wake[kind]);
      } catch (e) {
        this.waiting[kind].shift();
        done.reject(e);
        continue;
      }
      if (!posted) return;
      this.waiting[kind].shift();
      this.outstanding[kind]++;
      this.inFlight.add(done);
      posted
        .then(
          () => done.resolve(),
          (e: Error) => done.reject(e),
        )
        .finally(() => {
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
    this.nic.forget(this, [this.wake.send, this.wake.recv]);
  }
}
