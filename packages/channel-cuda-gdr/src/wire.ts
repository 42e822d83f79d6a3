/**
 * The cuda-gdr channel's control frames, as upstream TensorPipe's cuda_gdr
 * exchanges them (fixed little-endian layouts here, not nop):
 * - on the second connection, once: the number of NICs each end uses, then
 *   the setup of one queue pair per (local NIC, remote NIC), a matrix;
 * - on the first connection, per tensor, from the sender: the NIC it sends
 *   from and the length;
 * - on the second connection, per tensor, from the receiver once its
 *   receives are posted: the NIC it receives on.
 */
import { protocolError } from "@tensorpipe/core/backend";

/** Far more than any machine has; bounds what a peer can make us allocate. */
export const MAX_NICS = 64;
/** Bytes of one queue pair's setup on the wire. */
export const SETUP_BYTES = 32;

/** What one queue pair's peer needs to connect to it. */
export interface QueuePairSetup {
  /** The port's local id. */
  lid: number;
  /** ibv_mtu enum value. */
  mtu: number;
  /** The queue pair number. */
  qpn: number;
  /** The largest message the port sends. */
  maxMsgSize: number;
  /** The port's GID (16 bytes). */
  gid: Uint8Array;
}

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function expectBytes(what: string, bytes: Uint8Array, length: number): DataView {
  if (bytes.byteLength !== length) throw protocolError(`cuda-gdr ${what} of ${bytes.byteLength} bytes, not ${length}`);
  return view(bytes);
}

/** The number of NICs a side uses, as sent. */
export function encodeNicCount(n: number): Uint8Array {
  const out = new Uint8Array(4);
  view(out).setUint32(0, n, true);
  return out;
}

/** Decodes a NIC count; ERR_TP_PROTOCOL beyond MAX_NICS. */
export function decodeNicCount(bytes: Uint8Array): number {
  const n = expectBytes("NIC count", bytes, 4).getUint32(0, true);
  if (n < 1 || n > MAX_NICS) throw protocolError(`cuda-gdr peer uses ${n} NICs (1 to ${MAX_NICS} allowed)`);
  return n;
}

/** rows[i][j]: the setup of the queue pair from this end's NIC i to the peer's NIC j. */
export function encodeSetup(rows: readonly (readonly QueuePairSetup[])[]): Uint8Array {
  const cols = rows[0]?.length ?? 0;
  const out = new Uint8Array(8 + rows.length * cols * SETUP_BYTES);
  const v = view(out);
  v.setUint32(0, rows.length, true);
  v.setUint32(4, cols, true);
  let at = 8;
  for (const row of rows) {
    for (const s of row) {
      v.setUint16(at, s.lid, true);
      v.setUint8(at + 2, s.mtu);
      v.setUint32(at + 4, s.qpn, true);
      v.setBigUint64(at + 8, BigInt(s.maxMsgSize), true);
      out.set(s.gid, at + 16);
      at += SETUP_BYTES;
    }
  }
  return out;
}

/** The peer's matrix, which must be `rows` (its NICs) by `cols` (ours). */
export function decodeSetup(bytes: Uint8Array, rows: number, cols: number): QueuePairSetup[][] {
  const v = expectBytes("queue pair setup", bytes, 8 + rows * cols * SETUP_BYTES);
  if (v.getUint32(0, true) !== rows || v.getUint32(4, true) !== cols) {
    throw protocolError(`cuda-gdr setup for ${v.getUint32(0, true)}x${v.getUint32(4, true)} NICs, not ${rows}x${cols}`);
  }
  const out: QueuePairSetup[][] = [];
  let at = 8;
  for (let i = 0; i < rows; i++) {
    const row: QueuePairSetup[] = [];
    for (let j = 0; j < cols; j++) {
      const maxMsgSize = v.getBigUint64(at + 8, true);
      const mtu = v.getUint8(at + 2);
      if (mtu < 1 || mtu > 5) throw protocolError(`cuda-gdr setup with MTU code ${mtu}`);
      if (maxMsgSize === 0n || maxMsgSize > 2n ** 32n) throw protocolError(`cuda-gdr setup with a largest message of ${maxMsgSize} bytes`);
      row.push({ lid: v.getUint16(at, true), mtu, qpn: v.getUint32(at + 4, true), maxMsgSize: Number(maxMsgSize), gid: bytes.slice(at + 16, at + 32) });
      at += SETUP_BYTES;
    }
    out.push(row);
  }
  return out;
}

/** What the sender announces of a tensor. */
export interface TensorDescriptor {
  /** The sender's NIC. */
  nic: number;
  /** Its bytes. */
  length: number;
}

/** A TensorDescriptor as sent. */
export function encodeDescriptor(d: TensorDescriptor): Uint8Array {
  const out = new Uint8Array(12);
  const v = view(out);
  v.setUint32(0, d.nic, true);
  v.setBigUint64(4, BigInt(d.length), true);
  return out;
}

/** Decodes a TensorDescriptor; ERR_TP_PROTOCOL on bad bytes. */
export function decodeDescriptor(bytes: Uint8Array, nics: number): TensorDescriptor {
  const v = expectBytes("descriptor", bytes, 12);
  const nic = v.getUint32(0, true);
  const length = v.getBigUint64(4, true);
  if (nic >= nics) throw protocolError(`cuda-gdr tensor sent from NIC #${nic} of ${nics}`);
  if (length > BigInt(Number.MAX_SAFE_INTEGER)) throw protocolError(`cuda-gdr tensor of ${length} bytes`);
  return { nic, length: Number(length) };
}

/** The receiver's NIC, once it can take the tensor. */
export function encodeReadyToReceive(nic: number): Uint8Array {
  return encodeNicCount(nic);
}

/** Decodes a ready-to-receive; ERR_TP_PROTOCOL on bad bytes. */
export function decodeReadyToReceive(bytes: Uint8Array, nics: number): number {
  const nic = expectBytes("ready-to-receive", bytes, 4).getUint32(0, true);
  if (nic >= nics) throw protocolError(`cuda-gdr ready to receive on NIC #${nic} of ${nics}`);
  return nic;
}
