/** Devices on the wire, as upstream's libnop writes them: a structure of type and index. */
import type { Device } from "../device.js";
import { CPU_DEVICE } from "../device.js";
import type { NopReader } from "../nop/reader.js";
import { NopWriter } from "../nop/writer.js";
import { peerExcerpt } from "../peer-text.js";

// The CPU device as libnop writes it: most devices on the wire are this one.
const CPU_ENCODED = Uint8Array.from(new NopWriter(8).structure(2).string("cpu").int(0).finish());

/** A device as libnop writes it. */
export function writeDevice(w: NopWriter, d: Device): void {
  if (d === CPU_DEVICE) w.raw(CPU_ENCODED);
  else w.structure(2).string(d.type).int(d.index);
}

/**
 * What a device type is: a name ("cpu", "cuda"). A peer's device types
 * end up in keys, logs, errors and pipe.path; one that is not a name (a
 * terminal's escape sequence, a line break, 200 KB) fails the frame.
 */
const DEVICE_TYPE = /^[A-Za-z0-9_.-]{1,64}$/;

/** The device at the reader; the CPU is always the one CPU_DEVICE object. */
export function readDevice(r: NopReader): Device {
  if (r.skip(CPU_ENCODED)) return CPU_DEVICE;
  r.structure(2, "Device");
  const type = r.string();
  if (!DEVICE_TYPE.test(type)) r.fail(`device type ${peerExcerpt(type)} is not a name of at most 64 characters [A-Za-z0-9_.-]`);
  const index = r.int(32);
  return { type, index };
}
