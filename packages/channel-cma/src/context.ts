import { statSync } from "node:fs";
import { availableParallelism } from "node:os";
import {
  type Channel,
  type ChannelContext,
  type Connection,
  CPU_DEVICE,
  type DeviceDescriptor,
  type Endpoint,
  ErrorCode,
  type PipeInfo,
  OptionChecks,
  TensorPipeError,
  type TransportMedium,
  VIABLE,
  type Viability,
  notViable,
} from "@tensorpipe/core/backend";
import { CmaChannel, type Tuning } from "./channel.js";
import { loadAddon } from "./native.js";
import { MAX_POOL_BYTES } from "./shared-pool.js";
import { describeCmaMismatch, upstreamCmaDescriptor } from "./upstream-descriptor.js";

/** Options of the cma channel. */
export interface CmaChannelOptions {
  /**
   * Copier threads that take the chunks of large tensors being received in
   * turn, oldest read first: 1 to 64 (default: the cores, at most 4). One
   * set serves every pipe of the thread (main or worker), started by its
   * first large read with the largest number asked for, and joined when
   * it goes.
   */
  parallelism?: number | undefined;
  /**
   * Tensors up to this size travel inline on the channel's connection: for
   * them a copy through the transport beats process_vm_readv. Default: by
   * the pipe's transport (defaultInlineMax). It is this end's: between
   * two ends that lend shared memory each cuts what it sends at its own,
   * and between others both cut at the smaller of the two. With an end of
   * a version before 0.2, set differently, every tensor is read by address,
   * as with upstream TensorPipe.
   */
  inlineMax?: number | undefined;
  /**
   * Turn the 2 MiB pages inside large tensors sent again into huge pages
   * (off the loop, once per buffer, at its second transfer: a buffer sent
   * once is left as it is) so that later copies of them run at memcpy
   * speed (default true).
   */
  hugePages?: boolean | undefined;
  /**
   * Bytes of shared memory each pipe may lend through Pipe.loan(), at
   * most: 4 KiB to 1 GiB (default 256 MiB). A pipe's pool grows with the
   * loans its peer holds, a segment at a time; a loan past the bound
   * waits for the peer to release one. Segments wholly free for 5 s go
   * back to the system. The peer maps up to 1 GiB of a pool.
   */
  poolBytes?: number | undefined;
}

const check = new OptionChecks("CmaChannelOptions");
const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;
/** The most copier threads a Node thread may ask for. */
const MAX_PARALLELISM = 64;

/**
 * Up to where a copy through the transport beats process_vm_readv, which
 * pins every page it reads. Measured with `tensorpipe bench` on 2 cores:
 * over shm the ring is faster up to its 4 MiB (11.2 against 8.1 GB/s at
 * 4 MiB, 8.3 against 11.8 at 8 MiB); over TCP they meet at 128 KiB.
 */
export function defaultInlineMax(medium: TransportMedium | undefined): number {
  return medium === "shared-memory" ? 4 * MiB : 128 * KiB;
}

/** This process's network namespace, as its wire extension names it ("" when /proc cannot say). */
let networkNamespace: string | undefined;
function thisNetworkNamespace(): string {
  if (networkNamespace === undefined) {
    try {
      networkNamespace = `;net:${statSync("/proc/self/ns/net").ino}`;
    } catch {
      networkNamespace = "";
    }
  }
  return networkNamespace;
}

/** A peer's wire extension as this version writes it, read; undefined for any other (an older tensorpipe-js's, or none). */
interface PeerExtension {
  /** Where the peer cuts inline tensors: bytes, or "auto" (the default for the transport both ends share). */
  inlineMax: number | "auto";
  pool: boolean;
  /** `;net:<inode>`, or "" when the peer could not read it. */
  network: string;
}

const EXTENSION = /^inline:(auto|\d{1,15});per-end(;pool)?(;net:\d+)?$/;

function readExtension(extension: string | undefined): PeerExtension | undefined {
  const m = extension === undefined ? null : EXTENSION.exec(extension);
  if (!m) return undefined;
  return { inlineMax: m[1] === "auto" ? "auto" : Number(m[1]), pool: m[2] !== undefined, network: m[3] ?? "" };
}

/**
 * Cross-memory attach: tensors between processes of one machine, one user
 * and one pid namespace, copied once with process_vm_readv. A peer on
 * another machine, in another pid namespace or of another user has another
 * descriptor, so negotiation never picks cma for it.
 */
export class CmaChannelContext implements ChannelContext {
  private readonly tuning: Omit<Tuning, "inlineMax" | "peerInlineMax" | "upstreamWire" | "pool">;
  private readonly inlineMax?: number;
  private viability?: Viability;
  /** Why pipes of this context cannot lend shared memory (null: they can), once asked. */
  private poolProblem?: string | null;

  constructor(options: CmaChannelOptions = {}) {
    check.object(options);
    // Each is a thread of its own that lives as long as the Node thread.
    const parallelism = check.wholeNumber("parallelism", options.parallelism, 1, MAX_PARALLELISM) ?? Math.min(4, availableParallelism());
    const poolBytes = check.wholeNumber("poolBytes", options.poolBytes, 4 * KiB, MAX_POOL_BYTES) ?? 256 * MiB;
    this.tuning = {
      parallelism,
      hugePages: check.boolean("hugePages", options.hugePages) ?? true,
      poolBytes,
      peerPoolBytes: GiB,
    };
    const inlineMax = check.wholeNumber("inlineMax", options.inlineMax, 0);
    if (inlineMax !== undefined) this.inlineMax = inlineMax;
  }

  /** Whether the channel can work here, and if not why. */
  isViable(): Viability {
    if (!this.viability) {
      if (process.platform !== "linux") this.viability = notViable("cma needs Linux (process_vm_readv)");
      else {
        const { addon, error } = loadAddon();
        const problem = addon ? addon.probe() : `the cma addon did not load: ${error?.message}`;
        this.viability = problem ? notViable(problem) : VIABLE;
      }
    }
    return this.viability;
  }

  /** Upstream's descriptor, so that a Node process and a C++ one on one machine pair too. */
  deviceDescriptors(): readonly DeviceDescriptor[] {
    return [{ device: CPU_DEVICE, descriptor: upstreamCmaDescriptor() }];
  }

  /**
   * Between two tensorpipe-js ends, tensors up to the inline threshold go
   * inline and a failed read is told with its reason. Ends that lend cut
   * at each one's own threshold (a header says how each large tensor
   * comes); others at the smaller of the two. It names the network
   * namespace too: see createChannel(). Ends of versions before per-end
   * thresholds write no `;per-end`: with them it is upstream's wire.
   */
  wireExtension(): string {
    return `inline:${this.inlineMax ?? "auto"};per-end${this.lends() ? ";pool" : ""}${thisNetworkNamespace()}`;
  }

  /** Whether pipes here can lend shared memory (memfd and pidfd_getfd work). */
  private lends(): boolean {
    if (this.poolProblem === undefined) {
      const { addon } = loadAddon();
      this.poolProblem = addon ? addon.probeSharedSegments() : "no addon";
    }
    return this.poolProblem === null;
  }

  /** How many transport connections each channel needs. */
  numConnectionsNeeded(): number {
    return 2;
  }

  /** Which part of the two descriptors differs, and what would make them pair. */
  describeMismatch(localDescriptor: string, remoteDescriptor: string): string | undefined {
    return describeCmaMismatch(localDescriptor, remoteDescriptor);
  }

  canCommunicateWithRemote(localDescriptor: string, remoteDescriptor: string): boolean {
    return localDescriptor === remoteDescriptor;
  }

  createChannel(connections: readonly Connection[], _endpoint?: Endpoint, pipe?: PipeInfo): Channel {
    const { addon } = loadAddon();
    if (!addon) throw new TensorPipeError(ErrorCode.NOT_VIABLE, "cma addon unavailable");
    const peer = readExtension(pipe?.peerWireExtension);
    let wire: Pick<Tuning, "inlineMax" | "peerInlineMax" | "upstreamWire" | "pool">;
    if (peer === undefined) {
      wire = { inlineMax: -1, peerInlineMax: -1, upstreamWire: true, pool: false };
    } else if (peer.network !== thisNetworkNamespace()) {
      // One pid namespace, two network namespaces (containers sharing the
      // host's pids, not its network): no kernel record this side can read
      // proves which process holds the other end of a connection, so
      // nothing is read by address or lent. Every tensor goes inline, as
      // basic sends it, and the pipe works as it would have without cma.
      wire = { inlineMax: Number.MAX_SAFE_INTEGER, peerInlineMax: Number.MAX_SAFE_INTEGER, upstreamWire: false, pool: false };
    } else {
      const fallback = defaultInlineMax(pipe?.transportMedium);
      const mine = this.inlineMax ?? fallback;
      const theirs = peer.inlineMax === "auto" ? fallback : peer.inlineMax;
      const pool = peer.pool && this.lends();
      const agreed = Math.min(mine, theirs);
      wire = { inlineMax: pool ? mine : agreed, peerInlineMax: pool ? theirs : agreed, upstreamWire: false, pool };
    }
    return new CmaChannel(addon, connections[0]!, connections[1]!, { ...this.tuning, ...wire });
  }

  /** Releases what the backend holds; called by Context.close(). */
  async close(): Promise<void> {}
}
