import {
  type Channel,
  type Connection,
  type OperationOptions,
  Deferred,
  ErrorCode,
  Nop,
  NopReader,
  NopWriter,
  type TensorBuffer,
  TensorPipeError,
  cpuBytes,
  fromNativeError,
  protocolError,
  type TensorLanding,
  writeFrame,
} from "@tensorpipe/core/backend";
import type { NativeAddon } from "./native.js";
import { PeerSegments, RELEASE_FRAME } from "./peer-segments.js";
import { SharedPool, type SlotPlace } from "./shared-pool.js";

/** How a channel copies: what its context decided for it. */
export interface Tuning {
  parallelism: number;
  /** Tensors up to this size go inline (-1: none). */
  inlineMax: number;
  /**
   * Tensors up to this size may come inline from the peer. In pool mode
   * each end cuts at its own size (a header says how each tensor past
   * headerMin comes); otherwise both ends cut at one, and this is inlineMax.
   */
  peerInlineMax: number;
  hugePages: boolean;
  /**
   * The peer is upstream TensorPipe, or a tensorpipe-js that cuts tensors
   * at another size: descriptors without the length, empty completions
   * only (a failed read fails the pipe), nothing inline.
   */
  upstreamWire: boolean;
  /**
   * Both ends lend shared memory (Pipe.loan()): a tensor past
   * headerMin is preceded by a header saying how it comes (inline, by
   * address or by its place in the sender's pool).
   */
  pool: boolean;
  /** Bytes of this side's pool, at most. */
  poolBytes: number;
  /** Bytes of the peer's pool mapped here, at most. */
  peerPoolBytes: number;
}

/** In pool mode, tensors up to this size go inline with no header. */
const HEADER_MIN = 64 * 1024;

/** Where the receiver reads from: the sender's pid and address, and (between tensorpipe-js ends) the length. */
function encodeSource(upstreamWire: boolean, pid: number, address: bigint, length: number): Uint8Array {
  const w = new NopWriter(32)
    .structure(upstreamWire ? 2 : 3)
    .uint(pid)
    .uint(address);
  return (upstreamWire ? w : w.uint(length)).finish();
}

type Source = { pid: number; address: bigint; length?: number };

function decodeSource(upstreamWire: boolean, bytes: Uint8Array): Source {
  const r = new NopReader(bytes, "cma descriptor");
  r.structure(upstreamWire ? 2 : 3, "cma descriptor");
  const pid = r.uint(32);
  const address = r.uintBig();
  const length = upstreamWire ? undefined : r.uint(64);
  r.end();
  return { pid, address, length };
}

/** Where a lent tensor is in the sender's pool: its pid, then the place. */
function encodePlace(p: SlotPlace): Uint8Array {
  return new NopWriter(48).structure(7).uint(process.pid).uint(p.segment).uint(p.fd).uint(p.offset).uint(p.length).uint(p.slot).uint(p.generation).finish();
}

/** A header in pool mode: empty (the tensor follows inline), an address (3 members) or a place (7). */
function decodeHeader(bytes: Uint8Array): "inline" | Source | (SlotPlace & { pid: number }) {
  if (bytes.byteLength === 0) return "inline";
  const r = new NopReader(bytes, "cma header");
  r.expect(Nop.Structure, "cma header");
  const members = r.uint(8);
  if (members === 3) return decodeSource(false, bytes);
  if (members !== 7) throw protocolError(`cma header has ${members} members, expected 3 or 7`);
  const place = { pid: r.uint(32), segment: r.uint(32), fd: r.uint(32), offset: r.uint(64), length: r.uint(64), slot: r.uint(32), generation: r.uint(32) };
  r.end();
  return place;
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
/** In pool mode, the header of a tensor that follows inline. */
const EMPTY = OK;

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
  /** The error that closed the channel, when one did (a peer's bad release, say). */
  private closedWith?: Error;
  /** This side's pool, made by the first loan (pool mode). */
  private pool?: SharedPool;
  /** The peer's pool as mapped here, made by the first tensor lent (pool mode). */
  private peerSegments?: PeerSegments;
  /** Senders waiting for the peer's answer, in order (pool mode: one reader takes answers and releases). */
  private readonly answers: Deferred<Uint8Array>[] = [];
  private answering = false;
  private readonly headerMin: number;
  /** Pool mode: settles once the last receive that reads a header has asked for all its frames. */
  private issuing?: Promise<void>;
  /** Pool mode only: a lent tensor for readMessage() comes as a view of the peer's pool. */
  readonly recvLent?: (length: number, landing: TensorLanding) => Promise<void>;

  /** @internal Made by CmaChannelContext.createChannel(). */
  constructor(
    private readonly addon: NativeAddon,
    private readonly descriptors: Connection,
    private readonly acks: Connection,
    private readonly tuning: Tuning,
  ) {
    this.headerMin = tuning.pool ? Math.min(tuning.inlineMax, tuning.peerInlineMax, HEADER_MIN) : Infinity;
    if (tuning.pool) this.recvLent = (length, landing) => this.receiveLent(length, landing);
  }

  /**
   * A slot of this pipe's shared pool (pool mode), else undefined: the
   * pipe gives plain memory. Up to headerMin it is plain memory too: such
   * a tensor goes inline, and a copy through the transport costs less
   * than lending it (16 KiB batches: 102,713 requests/s from reused
   * arrays, 45,651 from slots).
   */
  loan(length: number, options: OperationOptions | undefined): Promise<Uint8Array> | undefined {
    if (!this.tuning.pool || length <= this.headerMin) return undefined;
    if (this.closed) return Promise.reject(this.closedWith ?? new TensorPipeError(ErrorCode.CLOSED, "cma channel was closed", { where: "pipe loan" }));
    this.pool ??= new SharedPool(
      this.addon,
      this.tuning.poolBytes,
      () => this.acks.serveArrived?.(),
      () => this.acks.hasPendingInput?.() ?? false,
    );
    return this.pool.loan(length, options);
  }

  /** Takes back a loan of this pipe's pool that will not be sent. */
  unloan(view: Uint8Array): void {
    this.pool?.giveBack(view);
  }

  /** Sends the first `length` bytes of `buffer`; resolves when the buffer may be reused. */
  send(buffer: TensorBuffer, length: number): Promise<void> {
    let bytes: Uint8Array;
    try {
      bytes = cpuBytes(buffer, length, "cma");
    } catch (e) {
      return Promise.reject(e);
    }
    if (length <= this.headerMin) {
      // Inline tensors take the transport's own path, with no promise of ours around it.
      if (length <= this.tuning.inlineMax) return this.copied(writeFrame(this.descriptors, bytes), bytes);
      // Upstream sends nothing for an empty tensor, and expects nothing.
      if (length === 0) return Promise.resolve();
      return this.sendByAddress(bytes, length);
    }
    const place = this.pool?.send(bytes);
    if (place) {
      this.readAnswers();
      return this.descriptors.write([encodePlace(place)]);
    }
    if (length <= this.tuning.inlineMax) return this.copied(this.descriptors.write([EMPTY, bytes]), bytes);
    return this.copied(this.sendByAddress(bytes, length), bytes);
  }

  /** `sent`, after which a loan sent by copy goes back to the pool; any other memory's send as it is. */
  private copied(sent: Promise<void>, bytes: Uint8Array): Promise<void> {
    const pool = this.pool;
    if (!pool?.lends(bytes)) return sent;
    return sent.then(() => pool.giveBack(bytes));
  }

  /** Announces where the tensor lives and waits for the peer's answer that it has copied it. */
  private async sendByAddress(bytes: Uint8Array, length: number): Promise<void> {
    const address = this.addon.addressOf(bytes, this.tuning.hugePages);
    const [, answer] = await Promise.all([
      this.descriptors.write([encodeSource(this.tuning.upstreamWire, process.pid, address, length)]),
      this.tuning.pool ? this.answer() : this.acks.read(4096),
    ]);
    // `bytes` stays referenced until here: the peer has finished reading it.
    if (answer.byteLength > 0) {
      throw new TensorPipeError(ErrorCode.CONNECTION_RESET, `peer could not read the tensor: ${Buffer.from(answer).toString()}`);
    }
    if (bytes.byteLength !== length) {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        "the tensor's memory was detached (its ArrayBuffer transferred) while the peer read it, so what it read may not be what was written: keep a tensor's memory until its write resolves",
      );
    }
  }

  /** The peer's next answer (pool mode), read by the one reader of the answers' connection. */
  private answer(): Promise<Uint8Array> {
    const d = new Deferred<Uint8Array>();
    this.answers.push(d);
    this.readAnswers();
    return d.promise;
  }

  /** Reads the answers' connection while an answer is awaited or the peer holds slots of this side's pool. */
  private readAnswers(): void {
    if (this.answering || this.closed || (this.answers.length === 0 && !(this.pool && this.pool.lent > 0))) return;
    this.answering = true;
    this.acks.read(4096).then(
      (frame) => {
        this.answering = false;
        try {
          if (frame.byteLength > 0 && frame[0] === RELEASE_FRAME) this.releasesCame(frame);
          else {
            const waiting = this.answers.shift();
            if (!waiting) throw protocolError("cma peer answered a tensor that was not sent by address");
            waiting.resolve(frame);
          }
        } catch (e) {
          this.close(e as Error);
          return;
        }
        this.readAnswers();
      },
      (e: Error) => {
        this.answering = false;
        for (const d of this.answers.splice(0)) d.reject(e);
      },
    );
  }

  private releasesCame(frame: Uint8Array): void {
    if ((frame.byteLength - 1) % 8 !== 0) throw protocolError(`cma release frame of ${frame.byteLength} bytes`);
    const dv = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
    for (let at = 1; at < frame.byteLength; at += 8) {
      if (!this.pool) throw protocolError("cma peer released pool slots it was never lent");
      this.pool.released(dv.getUint32(at, true), dv.getUint32(at + 4, true));
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
    return this.take(length, target, undefined);
  }

  /** Receives `length` bytes for readMessage(): a lent tensor as a view of the peer's pool, any other into landing.make(). */
  private receiveLent(length: number, landing: TensorLanding): Promise<void> {
    return this.take(length, undefined, landing);
  }

  /**
   * Receives a tensor once every earlier receive has asked the connection
   * for its frames: one past headerMin asks for its bytes only once its
   * header came, and the frames of the next tensor come after them.
   */
  private take(length: number, given: Uint8Array | undefined, landing: TensorLanding | undefined): Promise<void> {
    const before = this.issuing;
    if (before === undefined && length <= this.headerMin) return this.receiveNow(length, given ?? landing!.make());
    let done!: () => void;
    const mine = new Promise<void>((resolve) => (done = resolve));
    this.issuing = mine;
    const issued = (): void => {
      done();
      if (this.issuing === mine) this.issuing = undefined;
    };
    if (before === undefined) return this.receiveAfterHeader(length, given, landing, issued);
    return before.then(() => {
      if (length > this.headerMin) return this.receiveAfterHeader(length, given, landing, issued);
      issued();
      return this.receiveNow(length, given ?? landing!.make());
    });
  }

  /** A tensor up to headerMin: inline, or (on upstream's wire) by address. */
  private receiveNow(length: number, target: Uint8Array): Promise<void> {
    if (length <= this.tuning.inlineMax) return this.descriptors.readInto(target);
    if (length === 0) return Promise.resolve();
    return this.answered(this.descriptors.read(64).then((frame) => this.readByAddress(decodeSource(this.tuning.upstreamWire, frame), length, target)));
  }

  /** A tensor past headerMin (pool mode): its header says how it comes; `issued` once every read of it is asked for. */
  private receiveAfterHeader(length: number, given: Uint8Array | undefined, landing: TensorLanding | undefined, issued: () => void): Promise<void> {
    const got = this.descriptors.read(64).then((frame) => {
      const header = decodeHeader(frame);
      if (header === "inline") {
        if (length > this.tuning.peerInlineMax) throw protocolError(`cma peer sent ${length} bytes inline, past ${this.tuning.peerInlineMax}`);
        const landed = this.descriptors.readInto(given ?? landing!.make());
        issued();
        return landed;
      }
      issued();
      if (header.length !== length) throw protocolError(`cma header announces ${header.length} bytes, ${length} were expected`);
      if ("segment" in header) {
        const peer = this.proven(header.pid);
        const segments = this.peerSegments ?? this.mapPeerPool();
        if (given) segments.copy(peer.pidfd, header, given);
        else {
          const { view, release } = segments.view(peer.pidfd, header);
          landing!.adopt(view, release);
        }
        return undefined;
      }
      return this.answered(this.readByAddress(header, length, given ?? landing!.make()));
    });
    // A header that never came, or would not do: what waits behind it fails on the connection too.
    got.catch(issued);
    return got;
  }

  /** The peer's pool as mapped here: made apart from any read, whose memory its closure would otherwise keep for the pipe's life. */
  private mapPeerPool(): PeerSegments {
    this.peerSegments = new PeerSegments(this.addon, this.tuning.peerPoolBytes, (frame) => {
      this.acks.write([frame]).catch(() => undefined);
    });
    return this.peerSegments;
  }

  /** Copies the tensor `source` announces into `target`; a refusal rejects, for the sender to be told it. */
  private readByAddress(source: Source, length: number, target: Uint8Array): Promise<void> {
    if (source.length !== undefined && source.length !== length) {
      return Promise.reject(protocolError(`cma descriptor announces ${source.length} bytes, ${length} were expected`));
    }
    let peer: ProvenPeer;
    try {
      peer = this.proven(source.pid);
    } catch (e) {
      return Promise.reject(e);
    }
    // Its pid may name another process by now: nothing is read by it then.
    if (this.exited(peer)) return Promise.reject(new TensorPipeError(ErrorCode.PEER_CLOSED, `the peer process ${peer.pid} has exited`, { where: "cma" }));
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
  }

  /** `copied`, answered to the sender once every earlier answer went. */
  private answered(copied: Promise<void>): Promise<void> {
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
    this.closedWith = error;
    const err = error ?? new TensorPipeError(ErrorCode.CLOSED, "cma channel was closed");
    for (const d of this.answers.splice(0)) d.reject(err);
    this.pool?.close(err);
    this.peerSegments?.close();
    if (this.peer && this.peer.pidfd >= 0) this.addon.unpinProcess(this.peer.pidfd);
  }
}
