/**
 * A "cma" channel that announces another process's memory instead of its
 * own tensor: what a hostile peer sends to have a listener read another
 * process for it. Used by the suite and by attacker.mjs.
 */
import { NopWriter, VIABLE } from "@tensorpipe/core/backend";
import { CmaChannelContext } from "@tensorpipe/channel-cma";

export class ForgedCmaContext {
  /** @param {{ pid: number, address: bigint }} target */
  constructor(target) {
    this.target = target;
    // As the process is now: it may change user before it connects.
    this.descriptors = new CmaChannelContext().deviceDescriptors();
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
    const target = this.target;
    return {
      async send(_buffer, length) {
        await announce.write([new NopWriter(32).structure(3).uint(target.pid).uint(target.address).uint(length).finish()]);
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
