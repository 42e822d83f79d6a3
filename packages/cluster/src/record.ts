/**
 * A member's record as it sits in a store: what its peers need to reach it
 * and choose it. Records come from the store, which anyone who can write to
 * it can fill: each is read as untrusted input, bounded, and checked field
 * by field before a member acts on it.
 */
import { ErrorCode, TensorPipeError } from "@tensorpipe/core";
import { hostIdentity } from "@tensorpipe/core/backend";

/** What a member tells the others. */
export interface MemberRecord {
  /** The member's name: unique among live members, its context's name. */
  readonly name: string;
  /** Where it listens, in the order it would be dialled. */
  readonly urls: readonly string[];
  /** The machine and network namespace it runs in: shm URLs are dialled from the same one alone. */
  readonly host: string;
  /** Its process id, as it says. */
  readonly pid: number;
  /** The transports and channels it registered, by name. */
  readonly offers: { readonly transports: readonly string[]; readonly channels: readonly string[] };
  /** What the application added (JoinOptions.data): short strings by key. */
  readonly data: Readonly<Record<string, string>>;
  /** Bumped by each update of the record. */
  readonly version: number;
  /** When it joined (ms since the epoch, by its clock). */
  readonly joinedAt: number;
  /** Set in the record's last write before it leaves: the next delete is a leave, not a loss. */
  readonly leaving?: true | undefined;
}

/** The most bytes of a record's encoding. */
export const MAX_RECORD_BYTES = 16 * 1024;
/** The most URLs a member lists. */
export const MAX_URLS = 16;
/** The most entries of a record's `data`. */
export const MAX_DATA_ENTRIES = 32;
/** The most characters of a name. */
export const MAX_NAME = 128;

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.:@-]*$/;
const SCHEME = /^[a-z][a-z0-9+.-]*:\/\//;
const BACKEND_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

/** Why `name` cannot be a member's name, or undefined if it can. */
export function nameProblem(name: unknown): string | undefined {
  if (typeof name !== "string") return "a name is a string";
  if (name.length === 0 || name.length > MAX_NAME) return `a name has 1 to ${MAX_NAME} characters`;
  if (!NAME.test(name)) return "a name has letters, digits and _ . : @ - only, and begins with a letter or digit";
  return undefined;
}

/** This process's machine and network namespace, as records say it. */
export function thisHost(): string {
  const { bootId, netNs } = hostIdentity();
  return `${bootId}/${netNs}`;
}

/** Whether `a` and `b` are records of one process: the same pid, start and host (not another run under the name). */
export function sameProcess(a: Partial<MemberRecord>, b: MemberRecord): boolean {
  return a.pid === b.pid && a.joinedAt === b.joinedAt && a.host === b.host;
}

/** Whether `url` has the form scheme://... that members publish and dial. */
export function isUrl(url: unknown): url is string {
  return typeof url === "string" && SCHEME.test(url);
}

/** Bytes a member leaves free in its record: its last write, with `leaving`, must fit too. */
const LEAVING_ROOM = 32;

/** `r` as stored; throws ERR_TP_INVALID_ARG for a record (not a last write) over MAX_RECORD_BYTES less the room its last write needs. */
export function encodeRecord(r: MemberRecord): string {
  const text = JSON.stringify(r);
  const bytes = Buffer.byteLength(text);
  const max = r.leaving ? MAX_RECORD_BYTES : MAX_RECORD_BYTES - LEAVING_ROOM;
  if (bytes > max) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `the member's record would take ${bytes} bytes, over ${max}: put less in its data`);
  }
  return text;
}

function bad(key: string, why: string): TensorPipeError {
  return new TensorPipeError(
    ErrorCode.PROTOCOL,
    `the store's record ${JSON.stringify(key.slice(0, MAX_NAME))} is not a member's record: ${why}; it is ignored`,
  );
}

const isStringArray = (v: unknown, max: number, each: (s: string) => boolean): v is string[] =>
  Array.isArray(v) && v.length <= max && v.every((s) => typeof s === "string" && each(s));

/** The record stored under `key`, checked; throws ERR_TP_PROTOCOL saying what is wrong. */
export function decodeRecord(key: string, value: string): MemberRecord {
  // Stores cut what they read just past the bound: the size is not told, only that it is over.
  if (Buffer.byteLength(value) > MAX_RECORD_BYTES) throw bad(key, `over ${MAX_RECORD_BYTES} bytes`);
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(value);
  } catch {
    throw bad(key, "not JSON");
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw bad(key, "not an object");
  const problem = nameProblem(v.name);
  if (problem) throw bad(key, problem);
  if (v.name !== key) throw bad(key, `it names another member (${JSON.stringify(v.name)})`);
  if (!isStringArray(v.urls, MAX_URLS, (u) => u.length <= 512 && isUrl(u)) || v.urls.length === 0) throw bad(key, `urls: 1 to ${MAX_URLS} URLs`);
  if (typeof v.host !== "string" || v.host.length > 256) throw bad(key, "host");
  if (!Number.isSafeInteger(v.pid) || (v.pid as number) < 0) throw bad(key, "pid");
  const offers = v.offers as Record<string, unknown> | undefined;
  if (
    typeof offers !== "object" ||
    offers === null ||
    !isStringArray(offers.transports, 64, (s) => BACKEND_NAME.test(s)) ||
    !isStringArray(offers.channels, 64, (s) => BACKEND_NAME.test(s))
  )
    throw bad(key, "offers");
  const data = v.data as Record<string, unknown> | undefined;
  if (typeof data !== "object" || data === null || Array.isArray(data)) throw bad(key, "data");
  const entries = Object.entries(data);
  if (entries.length > MAX_DATA_ENTRIES || entries.some(([, d]) => typeof d !== "string")) throw bad(key, `data: at most ${MAX_DATA_ENTRIES} strings`);
  if (!Number.isSafeInteger(v.version) || !Number.isFinite(v.joinedAt)) throw bad(key, "version or joinedAt");
  if (v.leaving !== undefined && v.leaving !== true) throw bad(key, "leaving");
  return {
    name: v.name as string,
    urls: v.urls,
    host: v.host,
    pid: v.pid as number,
    offers: { transports: offers.transports as string[], channels: offers.channels as string[] },
    data: Object.fromEntries(entries) as Record<string, string>,
    version: v.version as number,
    joinedAt: v.joinedAt as number,
    ...(v.leaving ? { leaving: true as const } : {}),
  };
}
