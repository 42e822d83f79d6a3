import { defineProject } from "vitest/config";

export default defineProject({
  test: { name: "channel-cuda-gdr", include: ["test/**/*.test.ts"], testTimeout: 60_000 },
});
