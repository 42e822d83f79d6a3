/**
 * Which NIC each GPU uses: the one closest to it on the PCI tree, as
 * upstream TensorPipe picks it. Closeness is the length of the common
 * prefix of the two devices' sysfs paths (/sys/devices/pci0000:00/
 * 0000:00:01.0/0000:01:00.0/...): devices under the same switch share
 * more of it than devices under different root complexes.
 */
import { realpathSync } from "node:fs";

/** The sysfs path of the PCI device with bus id `busId` ("0000:3B:00.0"), or undefined. */
export function pciPathOfBusId(busId: string): string | undefined {
  try {
    return realpathSync(`/sys/bus/pci/devices/${busId.toLowerCase()}`);
  } catch {
    return undefined;
  }
}

/** The sysfs path of RDMA device `name`'s PCI function, or undefined. */
export function pciPathOfRdmaDevice(name: string): string | undefined {
  try {
    return realpathSync(`/sys/class/infiniband/${name}/device`);
  } catch {
    return undefined;
  }
}

function commonComponents(a: string, b: string): number {
  const x = a.split("/");
  const y = b.split("/");
  let n = 0;
  while (n < x.length && n < y.length && x[n] === y[n]) n++;
  return n;
}

/**
 * For each GPU path, the index of the closest NIC path (the first among
 * equals; the first NIC where a GPU's path is unknown).
 */
export function closestNics(gpuPaths: readonly (string | undefined)[], nicPaths: readonly (string | undefined)[]): number[] {
  return gpuPaths.map((gpu) => {
    let best = 0;
    let bestScore = -1;
    nicPaths.forEach((nic, i) => {
      const score = gpu && nic ? commonComponents(gpu, nic) : 0;
      if (score > bestScore) {
        best = i;
        bestScore = score;
      }
    });
    return best;
  });
}
