import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { CudaBasicChannelContext } from "@tensorpipe/channel-cuda-basic";
import { CudaIpcChannelContext } from "@tensorpipe/channel-cuda-ipc";
import { cudaInfo } from "@tensorpipe/cuda";
import { describe, expect, it } from "vitest";

const check = fileURLToPath(new URL("../build/Release/emulator_check", import.meta.url));

describe("the CUDA emulator", () => {
  // Else the CUDA packages' GPU tests in this project would skip, and pass, without a word.
  it("is the driver the CUDA packages load here, with two GPUs", () => {
    const info = cudaInfo();
    expect(info.viability).toEqual({ viable: true });
    expect(info.devices.map((d) => d.name)).toEqual(["TensorPipe CUDA emulator 0", "TensorPipe CUDA emulator 1"]);
    expect(new CudaBasicChannelContext().isViable()).toEqual({ viable: true });
    expect(new CudaIpcChannelContext().isViable()).toEqual({ viable: true });
  });

  it.each([
    ["async", "queues copies on a stream and runs them later, in order"],
    ["events", "keeps no order between streams but the one events give"],
    ["legacy", "makes the legacy default stream and blocking streams wait for each other"],
    ["pageable", "takes pageable host bytes at the call and lands them by return, and tells pinned memory from pageable"],
    ["fault", "gives device pointers the host cannot read"],
    ["errors", "fails as the driver does: no context, bad sizes, unknown pointers, its own IPC handles"],
    ["ipc", "shares memory and events with another process, and refuses a freed allocation's handle"],
  ])("%s: %s", (name) => {
    const r = spawnSync(check, [name], { encoding: "utf8", env: process.env, timeout: 30_000 });
    expect(r.stderr).toBe("");
    expect(r.stdout.trim().split("\n")).toContain("ok");
    expect(r.status).toBe(0);
  });
});
