/**
 * Contexts for the measurements and the tests: the first-party backends,
 * imported here, and third-party ones named by module, each made and
 * registered through its `backend` descriptor at its default priority.
 */
import { backend as basic } from "@tensorpipe/channel-basic";
import { backend as cma } from "@tensorpipe/channel-cma";
import { backend as cudaBasic } from "@tensorpipe/channel-cuda-basic";
import { backend as cudaGdr } from "@tensorpipe/channel-cuda-gdr";
import { backend as cudaIpc } from "@tensorpipe/channel-cuda-ipc";
import { backend as mpt } from "@tensorpipe/channel-mpt";
import {
  type BackendDescriptor,
  type ChannelContext,
  Context,
  type ContextOptions,
  type TransportContext,
  type Viability,
  isBackendDescriptor,
  notViable,
} from "@tensorpipe/core/backend";
import { backend as shm } from "@tensorpipe/transport-shm";
import { backend as uv } from "@tensorpipe/transport-uv";

/** Every first-party backend, highest default priority first within each kind. */
export const FIRST_PARTY: readonly BackendDescriptor[] = [shm, uv, cudaIpc, cudaGdr, cudaBasic, cma, mpt, basic];

/** Which backends a context gets, and the options they take. */
export interface BackendChoice extends ContextOptions {
  /** Transports to register (default: all); non-viable ones are skipped by negotiation. */
  transports?: readonly string[];
  /** Channels to register (default: all). */
  channels?: readonly string[];
  /** Modules of third-party backends to load too (each exports `backend`). */
  backends?: readonly string[];
  /** mpt lanes. */
  lanes?: number;
  /** cma: copier threads for large tensors. */
  parallelism?: number;
  /** uv: the network interface to listen and connect on. */
  interface?: string;
  /** uv: how long a silent peer may go unnoticed, in ms. */
  peerTimeout?: number;
}

/** A backend as probed here: whether it can work, and what memory it serves. */
export interface ProbedBackend {
  /** Its descriptor. */
  descriptor: BackendDescriptor;
  /** Whether it can work here. */
  viability: Viability;
  /** For channels: the memory its tensors live in. */
  memory?: "cpu" | "cuda";
}

/** The descriptors of the choice: the first-party ones and those of `choice.backends`, filtered by name. */
async function chosenDescriptors(choice: BackendChoice): Promise<BackendDescriptor[]> {
  const descriptors = [...FIRST_PARTY];
  for (const module of choice.backends ?? []) {
    const { backend } = (await import(module)) as { backend?: unknown };
    if (!isBackendDescriptor(backend)) throw new Error(`${module} exports no \`backend\` (kind, name, priority, create)`);
    descriptors.push(backend);
  }
  return descriptors.filter((d) => {
    const wanted = d.kind === "transport" ? choice.transports : choice.channels;
    return !wanted || wanted.includes(d.name);
  });
}

/** Each backend of the choice made, asked whether it can work here, and closed again. */
export async function probeBackends(choice: BackendChoice = {}): Promise<ProbedBackend[]> {
  const probed: ProbedBackend[] = [];
  for (const descriptor of await chosenDescriptors(choice)) {
    let instance: TransportContext | ChannelContext | undefined;
    try {
      instance = descriptor.create(choice);
      const devices = descriptor.kind === "channel" ? (instance as ChannelContext).deviceDescriptors() : [];
      const memory = descriptor.kind === "transport" ? undefined : devices.every((d) => d.device.type === "cpu") ? "cpu" : "cuda";
      probed.push({ descriptor, viability: instance.isViable(), ...(memory ? { memory } : {}) });
    } catch (e) {
      probed.push({ descriptor, viability: notViable((e as Error).message) });
    } finally {
      await instance?.close();
    }
  }
  return probed;
}

/** A context with the backends asked for (default: all), at their default priorities. */
export async function createContext(choice: BackendChoice = {}): Promise<Context> {
  const context = new Context(choice);
  for (const descriptor of await chosenDescriptors(choice)) {
    let instance: TransportContext | ChannelContext;
    try {
      instance = descriptor.create(choice);
    } catch {
      // Left out, as negotiation leaves out one that is not viable.
      continue;
    }
    if (descriptor.kind === "transport") context.registerTransport(descriptor.priority, descriptor.name, instance as TransportContext);
    else context.registerChannel(descriptor.priority, descriptor.name, instance as ChannelContext);
  }
  return context;
}
