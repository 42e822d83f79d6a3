/**
 * A channel by a third party that checks what it carries: each CPU tensor
 * goes as one frame on a connection of its own, behind its CRC32C
 * (Castagnoli, as iSCSI and ext4 use it), computed by @node-rs/crc32, a
 * native addon. A tensor that arrives with another checksum fails the pipe
 * with ERR_TP_DATA_CORRUPTED; core then tells the writing end why. It uses
 * nothing but what `@tensorpipe/core/backend` exports.
 */
import { createRequire } from "node:module";
import { arch, platform } from "node:os";
import {
  type Channel,
  type ChannelBackend,
  type ChannelContext,
  type Connection,
  type Context,
  CPU_DEVICE,
  type DeviceDescriptor,
  ErrorCode,
  type TensorBuffer,
  TensorPipeError,
  VIABLE,
  type Viability,
  cpuBytes,
  notViable,
  registerBackend,
} from "@tensorpipe/core/backend";

type Crc32c = (input: Uint8Array, initial?: number) => number;

/** The checksum, or why it cannot be had here: @node-rs/crc32 ships a binary per platform, and one may be missing. */
function loadCrc32c(): Crc32c | Error {
  try {
    const { crc32c } = createRequire(import.meta.url)("@node-rs/crc32") as { crc32c: (input: Buffer, initial?: number) => number };
    return (input, initial) => crc32c(Buffer.from(input.buffer, input.byteOffset, input.byteLength), initial);
  } catch (e) {
    return e as Error;
  }
}

/** One end of a crc32c channel. */
export class Crc32cChannel implements Channel {
  constructor(
    private readonly connection: Connection,
    private readonly crc32c: Crc32c,
  ) {}

  send(buffer: TensorBuffer, length: number): Promise<void> {
    try {
      const bytes = cpuBytes(buffer, length, "crc32c");
      const head = new Uint8Array(4);
      new DataView(head.buffer).setUint32(0, this.crc32c(bytes));
      return this.connection.write([head, bytes]).then(() => undefined);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  async recv(buffer: TensorBuffer, length: number): Promise<void> {
    const bytes = cpuBytes(buffer, length, "crc32c");
    // Both frames asked for at once: a receive issued before this one has
    // landed must queue its frames behind these, not between them.
    const head = new Uint8Array(4);
    await Promise.all([this.connection.readInto(head), this.connection.readInto(bytes)]);
    const sent = new DataView(head.buffer).getUint32(0);
    const got = this.crc32c(bytes);
    if (got !== sent) {
      throw new TensorPipeError(
        ErrorCode.DATA_CORRUPTED,
        `a tensor of ${length} bytes arrived with CRC32C ${hex(got)}, sent with ${hex(sent)}: the link or the memory in between changed it`,
        { where: "crc32c channel" },
      );
    }
  }

  close(error?: Error): void {
    this.connection.close(error);
  }
}

function hex(n: number): string {
  return `0x${n.toString(16).padStart(8, "0")}`;
}

/** The crc32c channel's backend: CPU only, wherever @node-rs/crc32 has a binary. */
export class Crc32cChannelContext implements ChannelContext {
  private readonly crc32c = loadCrc32c();

  isViable(): Viability {
    if (this.crc32c instanceof Error) {
      return notViable(
        `@node-rs/crc32 did not load (${this.crc32c.message.split("\n")[0]}): it ships a binary for each platform, and none loaded for ${platform()}-${arch()}; reinstall it on this machine, or use a channel without a checksum`,
      );
    }
    return VIABLE;
  }

  deviceDescriptors(): readonly DeviceDescriptor[] {
    return [{ device: CPU_DEVICE, descriptor: "crc32c-v1" }];
  }

  numConnectionsNeeded(): number {
    return 1;
  }

  canCommunicateWithRemote(local: string, remote: string): boolean {
    return local === remote;
  }

  createChannel(connections: readonly Connection[]): Channel {
    if (this.crc32c instanceof Error) throw this.crc32c;
    return new Crc32cChannel(connections[0]!, this.crc32c);
  }

  async close(): Promise<void> {}
}

/** Above basic (0), below mpt (10): where both ends have it, CPU tensors are checked. */
export const CRC32C_PRIORITY = 8;

/** For registries (`tensorpipe doctor --backend tensorpipe-crc32c-channel-example`). */
export const backend: ChannelBackend<Record<string, never>, Crc32cChannelContext> = {
  kind: "channel",
  name: "crc32c",
  priority: CRC32C_PRIORITY,
  create: () => new Crc32cChannelContext(),
};

/** Registers the crc32c channel with `context`. */
export function registerCrc32cChannel(context: Context, priority = CRC32C_PRIORITY): Crc32cChannelContext {
  return registerBackend(context, backend, {}, priority);
}
