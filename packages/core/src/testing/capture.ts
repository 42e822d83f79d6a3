import { readFileSync } from "node:fs";

/** One TCP stream of a capture: "src -> dst", with the frames it carried. */
export interface CapturedStream {
  from: string;
  to: string;
  frames: Uint8Array[];
}

/**
 * Parses a capture of a C++ TensorPipe session (fixtures/upstream/*.txt):
 * every frame of every TCP stream, in hex.
 */
export function parseCapture(text: string): CapturedStream[] {
  const streams: CapturedStream[] = [];
  for (const line of text.split("\n")) {
    const header = /^== stream (\d+) -> (\d+)/.exec(line);
    if (header) {
      streams.push({ from: header[1]!, to: header[2]!, frames: [] });
      continue;
    }
    const frame = /^\s+frame len=(\d+): ([0-9a-f ]*)$/.exec(line);
    if (frame) {
      const bytes = Uint8Array.from(frame[2]!.trim().split(/\s+/).filter(Boolean), (h) => parseInt(h, 16));
      if (bytes.length !== Number(frame[1])) throw new Error(`capture line says ${frame[1]} bytes, has ${bytes.length}`);
      streams.at(-1)!.frames.push(bytes);
    }
  }
  return streams;
}

export function loadCapture(path: string | URL): CapturedStream[] {
  return parseCapture(readFileSync(path, "utf8"));
}

export function stream(streams: readonly CapturedStream[], from: string, to: string): CapturedStream {
  const s = streams.find((x) => x.from === from && x.to === to);
  if (!s) throw new Error(`no stream ${from} -> ${to} in the capture`);
  return s;
}

/** The bytes a frame occupies on the wire: 8-byte little-endian length, then the frame. */
export function onTheWire(frames: readonly Uint8Array[]): Buffer {
  return Buffer.concat(
    frames.flatMap((f) => {
      const header = Buffer.alloc(8);
      header.writeBigUInt64LE(BigInt(f.length));
      return [header, Buffer.from(f)];
    }),
  );
}
