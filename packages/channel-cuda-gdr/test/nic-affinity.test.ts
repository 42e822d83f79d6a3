import { describe, expect, it } from "vitest";
import { closestNics, pciPathOfBusId, pciPathOfRdmaDevice } from "../src/nic-affinity.js";

// A DGX-like tree: two root complexes, a PCIe switch under each.
const root0 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
const root1 = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
const gpus = [`${root0}/0000:02:00.0/0000:03:00.0`, `${root0}/0000:02:08.0/0000:04:00.0`, `${root1}/0000:82:00.0/0000:83:00.0`];
const nics = [`${root1}/0000:82:04.0/0000:85:00.0`, `${root0}/0000:02:04.0/0000:05:00.0`];

describe("GPU to NIC affinity", () => {
  it("gives each GPU the NIC that shares most of its PCI path", () => {
    expect(closestNics(gpus, nics)).toEqual([1, 1, 0]);
  });

  it("falls back to the first NIC where a path is unknown, and to the first among equals", () => {
    expect(closestNics([undefined, gpus[0]], nics)).toEqual([0, 1]);
    expect(closestNics([gpus[0]], [undefined, undefined])).toEqual([0]);
    expect(closestNics([gpus[2]], [nics[0], nics[0]])).toEqual([0]);
  });

  it("reads the real sysfs where it exists, and says nothing where it does not", () => {
    expect(pciPathOfRdmaDevice("no-such-device")).toBeUndefined();
    expect(pciPathOfBusId("0000:ff:1f.7")).toBeUndefined();
  });
});
