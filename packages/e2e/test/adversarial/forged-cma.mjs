/**
 * A "cma" channel that announces another process's memory instead of its
 * own tensor: what a hostile peer sends to have a listener read another
 * process for it, as a tensorpipe-js end would announce it or (upstreamWire)
 * as upstream TensorPipe would. Used by the suite and by attacker.mjs.
 */
import { NopWriter, VIABLE } from "@tensorpipe/core/backend";
import { CmaChannelContext } from "@tensorpipe/channel-cma";

export class ForgedCmaContext {
  /**
   * @param {{ pid: number, address: bigint }} target
   * @param {{ upstreamWire?: boolean }} [options]
   */
  constructor(target, options = {}) {
    this.target = target;
    this.upstreamWire = options.upstreamWire ?? false;
    // As the process is now: it may change user before it connects.
    const real = new CmaChannelContext();
    this.descriptors = real.deviceDescriptors();
    this.extension = real.wireExtension();
  }

  wireExtension() {
    return this.upstreamWire ? undefined : this.extension;
  }

  isViable() {
    return VIABLE;
  }

  deviceDescriptors() {
    return this.descriptors;
  }

  numConnectionsNeeded() {
    return 2;
  }

  canCommunicateWithRemote(local, remote) {
    return local === remote;
  }

  createChannel([announce, acks]) {
    const { target, upstreamWire } = this;
    return {
      async send(_buffer, length) {
        const w = new NopWriter(32)
          .structure(upstreamWire ? 2 : 3)
          .uint(target.pid)
          .uint(target.address);
        await announce.write([(upstreamWire ? w : w.uint(length)).finish()]);
        const answer = await acks.read(4096);
        if (answer.byteLength > 0) throw new Error(Buffer.from(answer).toString());
      },
      recv() {
        return Promise.reject(new Error("the forged channel only sends"));
      },
      close(error) {
        announce.close(error);
        acks.close(error);
      },
    };
  }

  async close() {}
}
