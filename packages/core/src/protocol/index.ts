/** The wire's objects, as core/testing gives them to tests and tools: the handshake's and each message's. */
export * from "./handshake.js";
export * from "./message.js";
