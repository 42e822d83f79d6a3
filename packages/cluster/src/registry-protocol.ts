/**
 * The embedded registry's messages: one JSON object per pipe message, in
 * its metadata. Both ends check every message they read: the registry
 * trusts no member, and a member trusts no registry.
 */
import { ErrorCode, TensorPipeError } from "@tensorpipe/core";
import { MAX_RECORD_BYTES, nameProblem } from "./record.js";
import type { StoreRecord } from "./store.js";

/** A member's request; `id` pairs it with its reply. */
export type RegistryRequest =
  | { readonly t: "claim"; readonly id: number; readonly name: string; readonly value: string }
  | { readonly t: "update"; readonly id: number; readonly name: string; readonly value: string }
  | { readonly t: "release"; readonly id: number; readonly name: string }
  | { readonly t: "follow" };

/** What the registry sends. */
export type RegistryMessage =
  | { readonly t: "ok"; readonly id: number }
  | { readonly t: "err"; readonly id: number; readonly code: string; readonly message: string }
  | { readonly t: "snapshot"; readonly records: readonly StoreRecord[] }
  | { readonly t: "put"; readonly name: string; readonly value: string }
  | { readonly t: "delete"; readonly name: string };

/** The most bytes of one request's metadata. */
export const MAX_REQUEST_BYTES = MAX_RECORD_BYTES + 1024;

function protocol(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.PROTOCOL, message);
}

function parse(metadata: string, max: number, from: string): Record<string, unknown> {
  if (metadata.length > max) throw protocol(`${from} sent a message of ${metadata.length} characters, over ${max}`);
  let v: unknown;
  try {
    v = JSON.parse(metadata);
  } catch {
    throw protocol(`${from} sent a message that is not JSON`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw protocol(`${from} sent a message that is not an object`);
  return v as Record<string, unknown>;
}

const isId = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isName = (v: unknown): v is string => nameProblem(v) === undefined;
const isValue = (v: unknown): v is string => typeof v === "string" && v.length <= MAX_RECORD_BYTES;

/** A member's request, checked; throws ERR_TP_PROTOCOL. */
export function decodeRequest(metadata: string): RegistryRequest {
  const v = parse(metadata, MAX_REQUEST_BYTES, "a member");
  switch (v.t) {
    case "claim":
    case "update":
      if (isId(v.id) && isName(v.name) && isValue(v.value)) return { t: v.t, id: v.id, name: v.name, value: v.value };
      break;
    case "release":
      if (isId(v.id) && isName(v.name)) return { t: "release", id: v.id, name: v.name };
      break;
    case "follow":
      return { t: "follow" };
  }
  throw protocol(`a member sent a request that is not one (${JSON.stringify(String(v.t)).slice(0, 40)})`);
}

/** A registry's message, checked; throws ERR_TP_PROTOCOL. A snapshot's records are checked as records later, by the membership. */
export function decodeMessage(metadata: string, maxRecords: number): RegistryMessage {
  const v = parse(metadata, (maxRecords + 1) * (MAX_RECORD_BYTES + 256), "the registry");
  switch (v.t) {
    case "ok":
      if (isId(v.id)) return { t: "ok", id: v.id };
      break;
    case "err":
      if (isId(v.id) && typeof v.code === "string" && typeof v.message === "string")
        return { t: "err", id: v.id, code: v.code.slice(0, 64), message: v.message.slice(0, 1024) };
      break;
    case "snapshot":
      if (Array.isArray(v.records) && v.records.length <= maxRecords && v.records.every((r) => typeof r?.name === "string" && typeof r.value === "string"))
        return { t: "snapshot", records: v.records.map((r: StoreRecord) => ({ name: r.name, value: r.value })) };
      break;
    case "put":
      if (typeof v.name === "string" && typeof v.value === "string") return { t: "put", name: v.name, value: v.value };
      break;
    case "delete":
      if (typeof v.name === "string") return { t: "delete", name: v.name };
      break;
  }
  throw protocol(`the registry sent a message that is not one (${JSON.stringify(String(v.t)).slice(0, 40)})`);
}
