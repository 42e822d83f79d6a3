import {
  type Channel,
  type Connection,
  type CudaBuffer,
  type TensorBuffer,
  type TensorPipeError,
  closedError,
  fromNativeError,
  protocolError,
} from "@tensorpipe/core/backend";
import { allocationOf, cudaTensor, streamReady } from "@tensorpipe/cuda";
import type { Nic, QueuePair } from "./nic.js";
import {
  decodeDescriptor,
  decodeNicCount,
  decodeReadyToReceive,
  decodeSetup,
  encodeDescriptor,
  encodeNicCount,
  encodeReadyToReceive,
  encodeSetup,
} from "./wire.js";

/** Frames on the control connections are small: the setup matrix at most. */
const MAX_CONTROL_BYTES = 8 + 64 * 64 * 32;

/** What a channel needs of its context: the NICs in use and which one each GPU uses. */
export interface NicSet {
  /** The NICs, by index. */
  nics: readonly Nic[];
  /** The index of the NIC closest to GPU `device`. */
  nicOfGpu(device: number): number;
}

interface Operation {
  tensor: CudaBuffer;
  queued: Promise<void>;
  nic: number;
}

/**
 * One end of a cuda-gdr channel, as upstream TensorPipe's cuda_gdr works.
 * After a handshake that connects one queue pair per (local NIC, remote
 * NIC), each tensor goes:
 * - sender: the NIC its GPU uses goes to the peer on the first connection
 *   (with the length), and it waits for the peer's ready-to-receive;
 * - receiver: once the work queued on its stream is done, it posts
 *   receives straight into its GPU memory and says ready-to-receive on the
 *   second connection, naming its NIC;
 * - sender: once the work queued on its stream when it sent is done, it
 *   posts sends straight from its GPU memory, in chunks of the largest
 *   message both ports take. A transfer settles when its work completes.
 * Memory is registered once per allocation and NIC (registration-cache.ts).
 * Reliable connections match sends to receives in posting order: both
 * ends post in tensor order.
 */
export class CudaGdrChannel implements Channel {
  private readonly ready: Promise<void>;
  /** qps[local NIC][remote NIC] and the largest message each carries. */
  private qps: QueuePair[][] = [];
  private chunk: number[][] = [];
  private remoteNics = 0;
  private sendPosting: Promise<unknown> = Promise.resolve();
  private recvPosting: Promise<unknown> = Promise.resolve();
  private failure?: TensorPipeError;

  constructor(
    private readonly descriptors: Connection,
    private readonly control: Connection,
    private readonly nicSet: NicSet,
  ) {
    this.ready = this.handshake();
    this.ready.catch((e: Error) => this.close(e));
  }

  private async handshake(): Promise<void> {
    const local = this.nicSet.nics;
    void this.control.write([encodeNicCount(local.length)]).catch(() => undefined);
    this.remoteNics = decodeNicCount(await this.control.read(4));
    if (this.failure) throw this.failure;
    this.qps = local.map((nic) => Array.from({ length: this.remoteNics }, () => nic.createQueuePair()));
    const setup = local.map((nic, i) =>
      this.qps[i]!.map((qp) => ({ lid: nic.address.lid, mtu: nic.address.mtu, qpn: qp.qpn, maxMsgSize: nic.address.maxMsgSize, gid: nic.address.gid })),
    );
    void this.control.write([encodeSetup(setup)]).catch(() => undefined);
    const remote = decodeSetup(await this.control.read(MAX_CONTROL_BYTES), this.remoteNics, local.length);
    if (this.failure) throw this.failure;
    this.chunk = local.map((nic, i) =>
      this.qps[i]!.map((qp, j) => {
        const peer = remote[j]![i]!;
        qp.connect(peer);
        return Math.min(nic.address.maxMsgSize, peer.maxMsgSize);
      }),
    );
  }

  /** Sends the first `length` bytes of `buffer`; resolves when the buffer may be reused. */
  send(buffer: TensorBuffer, length: number): Promise<void> {
    return this.start(buffer, length, ({ tensor, queued, nic }) => {
      // Reactions to one promise run in the order they were added: the
      // descriptor goes and the answer is awaited in the order of the sends.
      const answered = this.ready.then(() => {
        void this.descriptors.write([encodeDescriptor({ nic, length })]).catch((e: Error) => this.close(e));
        return this.control.read(4).then((bytes) => decodeReadyToReceive(bytes, this.remoteNics));
      });
      return this.inOrder("sendPosting", async () => {
        const remoteNic = await answered;
        await queued;
        return { completion: this.transfer("send", tensor, length, nic, remoteNic) };
      });
    });
  }

  /** Receives `length` bytes into `buffer`; resolves when they have landed. */
  recv(buffer: TensorBuffer, length: number): Promise<void> {
    return this.start(buffer, length, ({ tensor, queued, nic }) => {
      const described = this.ready.then(() =>
        this.descriptors.read(12).then((bytes) => {
          const d = decodeDescriptor(bytes, this.remoteNics);
          if (d.length !== length) throw protocolError(`cuda-gdr: peer sent a tensor of ${d.length} bytes for a receive of ${length}`);
          return d;
        }),
      );
      return this.inOrder("recvPosting", async () => {
        const d = await described;
        await queued;
        const completion = this.transfer("recv", tensor, length, nic, d.nic);
        // The receives are posted: the peer may send.
        void this.control.write([encodeReadyToReceive(nic)]).catch((e: Error) => this.close(e));
        return { completion };
      });
    });
  }

  /**
   * Runs `operate` with a transfer's tensor, its NIC, and the work queued on
   * its stream now (later work is not waited for); a zero-length tensor
   * crosses nothing on either end, and bad input or a failed channel
   * rejects.
   */
  private start(buffer: TensorBuffer, length: number, operate: (op: Operation) => Promise<void>): Promise<void> {
    let op: Operation;
    try {
      const tensor = cudaTensor(buffer, length, "cuda-gdr");
      if (this.failure) throw this.failure;
      if (length === 0) return Promise.resolve();
      const queued = streamReady(tensor.stream ?? 0n, tensor.device.index);
      queued.catch(() => undefined);
      op = { tensor, queued, nic: this.nicSet.nicOfGpu(tensor.device.index) };
    } catch (e) {
      return Promise.reject(e);
    }
    return operate(op);
  }

  /**
   * Runs `post` once the previous one of its kind has posted its work (not
   * finished it) and settles with that work. Any failure fails the channel:
   * the two ends' postings would no longer match.
   */
  private inOrder(kind: "sendPosting" | "recvPosting", post: () => Promise<{ completion: Promise<void> }>): Promise<void> {
    const mine = this[kind].then(post);
    this[kind] = mine.catch(() => undefined);
    return mine
      .then(({ completion }) => completion)
      .catch((e: Error) => {
        const error = this.failure ?? fromNativeError(e, "cuda-gdr");
        this.close(error);
        throw error;
      });
  }

  /** Posts the chunks of one tensor on the queue pair for (nic, remoteNic) now; settles once all completed. */
  private transfer(kind: "send" | "recv", tensor: CudaBuffer, length: number, nic: number, remoteNic: number): Promise<void> {
    if (this.failure) throw this.failure;
    const qp = this.qps[nic]?.[remoteNic];
    const chunk = this.chunk[nic]?.[remoteNic];
    if (!qp || !chunk) throw protocolError(`cuda-gdr: no queue pair from NIC #${nic} to the peer's #${remoteNic}`);
    const held = this.nicSet.nics[nic]!.registrations.acquire(allocationOf(tensor));
    const chunks: Promise<void>[] = [];
    for (let offset = 0; offset < length; offset += chunk) {
      const n = Math.min(chunk, length - offset);
      chunks.push(qp[kind](tensor.ptr + BigInt(offset), n, held.lkey));
    }
    return Promise.all(chunks).then(
      () => held.release(),
      (e: Error) => {
        held.release();
        throw e;
      },
    );
  }

  /** Ends the channel; pending sends and receives reject with `error` (or ERR_TP_CLOSED). */
  close(error?: Error): void {
    if (this.failure) return;
    this.failure = error ? fromNativeError(error, "cuda-gdr") : closedError("cuda-gdr channel");
    for (const row of this.qps) for (const qp of row) qp.destroy(this.failure);
    this.descriptors.close(this.failure);
    this.control.close(this.failure);
  }
}
