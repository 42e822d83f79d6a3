/**
 * The handshake's failures as each side reports them: a listener that hung
 * up, refused, or chose no channel for CPU tensors, and a peer that hung up
 * on an answer. Each says what failed and what to do.
 */
import { ErrorCode, TensorPipeError } from "../errors.js";
import { carriesCpuTensors } from "../negotiation.js";
import { describePath } from "../path-policy.js";
import { type PathReport, type PathVerdict, fromPeer, peerReport, reportJson } from "../path-report.js";
import type { BrochureAnswer, DeviceDescriptors } from "../protocol/handshake.js";
import { putReport, readExtensions } from "./extensions.js";
import type { HandshakeSettings } from "./settings.js";
import { choiceVerdicts, pathNote } from "./verdicts.js";

/** The transport a listener names in an answer that refuses the pipe: none. */
export const REFUSED = "";

/**
 * `err` as the dialling side reports it: a listener that closed the
 * connection before the handshake was done gives the same error whichever
 * transport saw it (in its own handshake, as shm, or in ours), since the
 * causes are the same.
 */
export function duringHandshake(url: string, err: TensorPipeError, auth: boolean, requested = false): TensorPipeError {
  if (err.code !== ErrorCode.PEER_CLOSED && err.code !== ErrorCode.CONNECTION_RESET) return err;
  const couldNot =
    "it could not take the connection (out of file descriptors, past its maxPendingHandshakes, or with maxUnaccepted pipes waiting for its accept(): see its connectionError events)";
  return new TensorPipeError(
    ErrorCode.NEGOTIATION,
    requested
      ? `peer closed a connection its answer asked for during the handshake: ${couldNot}`
      : `peer closed the connection during the handshake: not a TensorPipe listener, or no transport in common${
          auth ? ", or the shared secrets differ" : ", or it requires authentication (ContextOptions.auth)"
        }, or ${couldNot}`,
    { where: url, cause: err },
  );
}

/** A listener's answer that refuses the pipe, with its report (what it could use, its verdicts, what it found none of). */
export function refusal(offered: PathReport["offeredHere"], verdicts: readonly PathVerdict[], kind: PathVerdict["kind"]): BrochureAnswer {
  const channelDeviceDescriptors = new Map<string, DeviceDescriptors>();
  putReport(channelDeviceDescriptors, reportJson(offered, verdicts, kind));
  return {
    transport: REFUSED,
    address: "",
    transportRegistrationIds: new Map(),
    transportDomainDescriptor: "",
    channelRegistrationIds: new Map(),
    channelDeviceDescriptors,
    channelForDevicePair: [],
  };
}

/** The error for a listener's refusal: what it found none of, and its reasons, told from this side. */
export function refused(answer: BrochureAnswer, url: string, settings: HandshakeSettings): TensorPipeError {
  const report = peerReport(readExtensions(answer.channelDeviceDescriptors).report);
  const kind = report?.refused ?? "transport";
  const why = report ? choiceVerdicts(fromPeer(report.verdicts), kind, true) : "";
  const what = kind === "transport" ? "no transport in common" : "no channel for CPU tensors";
  return new TensorPipeError(
    ErrorCode.NEGOTIATION,
    `the listener refused the pipe: ${what} (there: ${why || (report ? "none allowed" : "it gave no reasons")})${pathNote(settings)}`,
    { where: url },
  );
}

/**
 * The dialling side's error for an answer with no channel for CPU tensors,
 * where this side offered some (`offered`: name and descriptor of each):
 * with the listener's own reasons where it gave them (`listenerSaid`),
 * else what its answer lets this side infer.
 */
export function noCpuChannel(
  settings: HandshakeSettings,
  offered: readonly { name: string; descriptor: string | undefined }[],
  url: string,
  listenerSaid?: readonly PathVerdict[],
): TensorPipeError {
  const described = offered.map((c) => `${c.name} "${c.descriptor}"`).join(", ");
  const names = new Set(offered.map((c) => c.name));
  const theirs =
    listenerSaid &&
    choiceVerdicts(
      listenerSaid.filter((v) => names.has(v.name)),
      "channel",
      true,
    );
  const why = theirs
    ? `the listener's reasons: ${theirs}`
    : "inferred from its answer: it lacks them, cannot run them, forbids them, or describes them otherwise";
  return new TensorPipeError(
    ErrorCode.NEGOTIATION,
    settings.path
      ? `the path (${describePath(settings.path)}) is not met: the listener chose no channel for CPU tensors among ${described} (${why})`
      : `no channel for CPU tensors in common with the listener: this side offers ${offered.map((c) => c.name).join(", ")} (${why}); register one that both ends have (basic works everywhere)`,
    { where: url },
  );
}

/**
 * A peer that closed the connection on an answer with no channel for CPU
 * tensors most likely refused it for that (this library's dialler does):
 * the mistake is then this side's as much as the peer's, and this side
 * hears of it only here.
 */
export function hungUpOnAnswer(e: unknown, path: PathReport): unknown {
  const code = (e as { code?: string }).code;
  if (code !== ErrorCode.PEER_CLOSED && code !== ErrorCode.CONNECTION_RESET) return e;
  if (carriesCpuTensors(path.pairs)) return e;
  const theirs = path.offeredThere?.channels ?? [];
  if (theirs.length === 0) return e;
  return new TensorPipeError(
    ErrorCode.NEGOTIATION,
    `the peer hung up on this listener's answer, which had no channel for CPU tensors in common with it (it offered ${theirs.join(", ")}; here: ${path.offeredHere.channels.join(", ") || "none registered, or none viable"}): register one both ends have (basic works everywhere)`,
    { where: (e as TensorPipeError).where, cause: e },
  );
}
