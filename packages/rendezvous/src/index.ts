export { Rendezvous, type RecvOptions, type RendezvousOptions } from "./rendezvous.js";
export type { RendezvousValue } from "./value-codec.js";
