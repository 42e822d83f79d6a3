export { Rendezvous, type RecvOptions } from "./rendezvous.js";
export type { RendezvousValue } from "./value-codec.js";
