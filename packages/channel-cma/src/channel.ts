import {
  type Channel,
  type Connection,
  ErrorCode,
  NopReader,
  NopWriter,
  type TensorBuffer,
  TensorPipeError,
  cpuBytes,
  fromNativeError,
  protocolError,
  writeFrame,
} from "@tensorpipe/core/backend";
import type { NativeAddon } from "./native.js";

/** How a channel copies: what its context decided for it. */
export interface Tuning {
  parallelism: number;
  /** Tensors up to this size go inline (-1: none). */
  inlineMax: number;
  hugePages: boolean;
  /**
   * The peer is upstream TensorPipe, or a tensorpipe-js that cuts tensors
   * at another size: descriptors without the length, empty completions
   * only (a failed read fails the pipe), nothing inline.
   */
  upstreamWire: boolean;
}

/** Where the receiver reads from: the sender's pid and address, and (between tensorpipe-js ends) the length. */
function encodeSource(upstreamWire: boolean, pid: number, address: bigint, length: number): Uint8Array {
  const w = new NopWriter(32)
    .structure(upstreamWire ? 2 : 3)
    .uint(pid)
    .uint(address);
  return (upstreamWire ? w : w.uint(length)).finish();
}

function decodeSource(upstreamWire: boolean, bytes: Uint8Array): { pid: number; address: bigint; length?: number } {
  const r = new NopReader(bytes, "cma descriptor");
  r.structure(upstreamWire ? 2 : 3, "cma descriptor");
  const pid = r.uint(32);
  const address = r.uintBig();
  const length = upstreamWire ? undefined : r.uint(64);
  r.end();
  return { pid, address, length };
}

/** EFAULT: the announced memory is not there (any more): the sender gave up its tensor. */
function readError(err: Error, pid: number): TensorPipeError {
  const e = fromNativeError(err, `cma read from pid ${pid}`);
  if (e.errnoName !== "EFAULT") return e;
  return new TensorPipeError(
    ErrorCode.CONNECTION_RESET,
    "the sender's tensor is not readable: it closed the pipe or freed the memory, or announced memory it does not have",
    { where: e.where, errnoName: "EFAULT", syscall: "process_vm_readv", cause: err },
  );
}

const OK = new Uint8Array(0);

/** What the sender is told of a failed read: a refusal says no more than that (no pids, no sockets of this machine). */
function answerFor(e: Error): string {
  const code = (e as TensorPipeError).code;
  if (code === ErrorCode.PERMISSION_DENIED) {
    return `${ErrorCode.PERMISSION_DENIED}: the process announced is not this pipe's peer, or runs as another user`;
  }
  return code ? `${code}: ${e.message}` : e.message || "failed";
}
const utf8 = new TextEncoder();

function denied(message: string, where: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.PERMISSION_DENIED, message, { where });
}

/** The process proven to be the peer, and the pidfd that keeps its pid from naming another. */
interface ProvenPeer {
  pid: number;
  pidfd: number;
}

/**
 * One end of a cma channel. The sender announces where its tensor lives on
 * the first connection; the receiver copies it with process_vm_readv
 * straight into its allocation and answers on the second connection (empty:
 * done, else the reason it failed) so the sender knows its memory is free.
 * Small tensors (both ends know the length) go inline on the first
 * connection instead. That, the length in the announcement and the reason
 * in a failed answer are tensorpipe-js's own: toward upstream TensorPipe
 * (ChannelContext.wireExtension) every tensor goes by address, announced
 * as {pid, address}, and answered empty.
 *
 * The pid in an announcement is the peer's word: before the first copy the
 * receiver has the transport prove, from the kernel's records, that this
 * process holds the other end of the connection and runs as this user, and
 * pins it with a pidfd; every later announcement must name it, and a copy
 * from a process that exited meanwhile (its pid free for another) fails.
 */
export class CmaChannel implements Channel {
  private lastAck: Promise<unknown> = Promise.resolve();
  private peer?: ProvenPeer;
  private closed = false;

  /** @internal Made by CmaChannelContext.createChannel(). */
  constructor(
    private readonly addon: NativeAddon,
    private readonly descriptors: Connection,
    private readonly acks: Connection,
    private readonly tuning: Tuning,
  ) {}

  /** Sends the first `length` bytes of `buffer`; resolves when the buffer may be reused. */
  send(buffer: TensorBuffer, length: number): Promise<void> {
    let bytes: Uint8Array;
    try {
      bytes = cpuBytes(buffer, length, "cma");
    } catch (e) {
      return Promise.reject(e);
    }
    // Inline tensors take the transport's own path, with no promise of ours around it.
    if (length <= this.tuning.inlineMax) return writeFrame(this.descriptors, bytes);
    // Upstream sends nothing for an empty tensor, and expects nothing.
    if (length === 0) return Promise.resolve();
    return this.sendByAddress(bytes, length);
  }

  /** Announces where the tensor lives and waits for the peer's answer that it has copied it. */
  private async sendByAddress(bytes: Uint8Array, length: number): Promise<void> {
    const address = this.addon.addressOf(bytes, this.tuning.hugePages);
    const [, answer] = await Promise.all([
      this.descriptors.write([encodeSource(this.tuning.upstreamWire, process.pid, address, length)]),
      this.acks.read(4096),
    ]);
    // `bytes` stays referenced until here: the peer has finished reading it.
    if (answer.byteLength > 0 || bytes.byteLength !== length) {
      throw new TensorPipeError(ErrorCode.CONNECTION_RESET, `peer could not read the tensor: ${Buffer.from(answer).toString()}`);
    }
  }

  /** Receives `length` bytes into `buffer`; resolves when they have landed. */
  recv(buffer: TensorBuffer, length: number): Promise<void> {
    let target: Uint8Array;
    try {
      target = cpuBytes(buffer, length, "cma");
    } catch (e) {
      return Promise.reject(e);
    }
    if (length <= this.tuning.inlineMax) return this.descriptors.readInto(target);
    if (length === 0) return Promise.resolve();
    const copied = this.descriptors.read(64).then((frame) => {
      const source = decodeSource(this.tuning.upstreamWire, frame);
      if (source.length !== undefined && source.length !== length) {
        throw protocolError(`cma descriptor announces ${source.length} bytes, ${length} were expected`);
      }
      const peer = this.proven(source.pid);
      // Its pid may name another process by now: nothing is read by it then.
      if (this.exited(peer)) throw new TensorPipeError(ErrorCode.PEER_CLOSED, `the peer process ${peer.pid} has exited`, { where: "cma" });
      return new Promise<void>((resolve, reject) => {
        this.addon.readv(source.pid, source.address, length, target, this.tuning.parallelism, this.tuning.hugePages, (err) => {
          if (err) reject(readError(err, source.pid));
          else if (this.exited(peer)) {
            // Gone during the copy, its pid maybe reused at once: what landed may not be the peer's.
            target.fill(0, 0, length);
            reject(new TensorPipeError(ErrorCode.PEER_CLOSED, `the peer process ${peer.pid} exited during the copy`, { where: "cma" }));
          } else resolve();
        });
      });
    });
    // Handled below, possibly after earlier answers: not an unhandled rejection meanwhile.
    copied.catch(() => undefined);
    // Answers go out in the order tensors were announced, whichever copy
    // ends first. Upstream's wire has no word for a failed read: the pipe
    // fails instead, and the sender with it.
    const answered = this.lastAck.then(() =>
      copied.then(
        () => this.acks.write([OK]),
        (e: Error) => (this.tuning.upstreamWire ? Promise.reject(e) : this.acks.write([utf8.encode(answerFor(e))]).then(() => Promise.reject(e))),
      ),
    );
    this.lastAck = answered.catch(() => undefined);
    return answered;
  }

  /** The peer proven for this channel, proving `pid` on the first large read; ERR_TP_PERMISSION_DENIED when it is not the peer. */
  private proven(pid: number): ProvenPeer {
    const where = `cma read from pid ${pid}`;
    if (this.closed) throw new TensorPipeError(ErrorCode.CLOSED, "cma channel was closed", { where });
    if (this.peer) {
      if (pid !== this.peer.pid) throw denied(`peer announced memory of pid ${pid}, but the process at the other end is ${this.peer.pid}`, where);
      return this.peer;
    }
    if (!this.descriptors.provePeerProcess) {
      throw denied("the pipe's transport cannot prove which process is at the other end, so cma will not read from it", where);
    }
    let pidfd: number;
    try {
      pidfd = this.addon.pinProcess(pid);
    } catch (e) {
      // No such process: a peer that went says so (ERR_TP_PEER_CLOSED) through its connection.
      this.descriptors.provePeerProcess(pid);
      throw e;
    }
    try {
      // After the pin: a pid reused since then cannot pass for the peer.
      const { uids } = this.descriptors.provePeerProcess(pid);
      const uid = process.geteuid?.() ?? -1;
      if (uids.some((u) => u !== uid)) {
        throw denied(`peer process ${pid} runs as uids ${uids.join("/")} and this one as ${uid}: cma never reads across users`, where);
      }
    } catch (e) {
      this.addon.unpinProcess(pidfd);
      throw e;
    }
    this.peer = { pid, pidfd };
    return this.peer;
  }

  /** Whether the proven peer is gone, so that its pid may name another process now. */
  private exited(peer: ProvenPeer): boolean {
    // Closed, its pidfd is gone: the copy counts for nothing now anyway.
    if (this.closed) return true;
    if (peer.pidfd >= 0) return this.addon.processExited(peer.pidfd);
    // No pidfd (before Linux 5.3, or closed meanwhile): prove it again.
    try {
      this.descriptors.provePeerProcess!(peer.pid);
      return false;
    } catch {
      return true;
    }
  }

  /** Ends the channel; pending sends and receives reject with `error` (or ERR_TP_CLOSED). */
  close(error?: Error): void {
    this.descriptors.close(error);
    this.acks.close(error);
    if (this.closed) return;
    this.closed = true;
    if (this.peer && this.peer.pidfd >= 0) this.addon.unpinProcess(this.peer.pidfd);
  }
}
