import { loadCapture, stream } from "../src/testing/capture.js";

/** shared/ sits beside the repository, in CI as on a developer's machine. */
export const CAPTURE_PATH = new URL("../../../../shared/protocol/upstream-uv-basic-capture.txt", import.meta.url);

const streams = loadCapture(CAPTURE_PATH);
export const clientMain = stream(streams, "53816", "29777").frames;
export const serverMain = stream(streams, "29777", "53816").frames;
export const replyConnection = stream(streams, "53822", "29777").frames;
export const clientChannel = stream(streams, "53834", "29777").frames;
export const serverChannel = stream(streams, "29777", "53834").frames;
