import { loadCapture, stream } from "./capture.js";

/**
 * A uv+basic session between two C++ TensorPipe processes, captured on
 * loopback: the frames each end put on each of the pipe's connections.
 */
export interface UpstreamSession {
  /** The port the C++ listener had; it appears in its BrochureAnswer. */
  serverPort: number;
  clientMain: Uint8Array[];
  serverMain: Uint8Array[];
  /** The reply connection, opened by the client (its first frame is the RequestedConnection). */
  clientReply: Uint8Array[];
  serverReply: Uint8Array[];
  /** The basic channel's connection, opened by the client. */
  clientChannel: Uint8Array[];
  serverChannel: Uint8Array[];
}

interface Ports {
  file: string;
  server: string;
  main: string;
  reply: string;
  channel: string;
}

const SESSIONS = {
  /** One warm-up and five round trips: metadata "BBB", a 5-byte payload, an 8-byte tensor with its target set. */
  basic: { file: "upstream-uv-basic-capture.txt", server: "29777", main: "53816", reply: "53822", channel: "53834" },
  /**
   * Zero-length payloads and tensors, a tensor without a target device
   * (answered by a DescriptorReply) and an empty message, each echoed back.
   */
  edge: { file: "upstream-uv-basic-edge-capture.txt", server: "29800", main: "58970", reply: "58986", channel: "58994" },
} satisfies Record<string, Ports>;

export type UpstreamSessionName = keyof typeof SESSIONS;

/** The capture files ship with this package, beside src/ and dist/. */
function capturePath(file: string): URL {
  return new URL(`../../fixtures/upstream/${file}`, import.meta.url);
}

/** A stream the capture lacks carried nothing (the C++ server never wrote on the reply connection, say). */
function framesOrNone(streams: ReturnType<typeof loadCapture>, from: string, to: string): Uint8Array[] {
  return streams.some((s) => s.from === from && s.to === to) ? stream(streams, from, to).frames : [];
}

export function upstreamSession(name: UpstreamSessionName): UpstreamSession {
  const p: Ports = SESSIONS[name];
  const streams = loadCapture(capturePath(p.file));
  return {
    serverPort: Number(p.server),
    clientMain: stream(streams, p.main, p.server).frames,
    serverMain: stream(streams, p.server, p.main).frames,
    clientReply: stream(streams, p.reply, p.server).frames,
    serverReply: framesOrNone(streams, p.server, p.reply),
    clientChannel: stream(streams, p.channel, p.server).frames,
    serverChannel: framesOrNone(streams, p.server, p.channel),
  };
}
